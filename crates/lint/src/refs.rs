//! The paths one file's code refers to (types, expressions, macro names, and
//! `crate::`/`super::`/`self::` paths inside macro arguments), made absolute: a
//! first segment that is a `use`d name is replaced by what it imports. Test-only
//! items are skipped: tests may reach anywhere in their crate.

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

use crate::items::{absolute, FileItems};
use crate::modules::{is_test_only, ModuleFiles};

/// One reference to an item of the crate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// Absolute path under the crate root.
    pub path: Vec<String>,
    pub line: usize,
}

/// What the code of `ast` (module `module`, whose imports are `items`) refers to.
pub fn code_references(
    ast: &syn::File,
    module: &[String],
    items: &FileItems,
    files: &ModuleFiles,
) -> Vec<Reference> {
    let mut c = Collector {
        module: module.to_vec(),
        items,
        files,
        out: Vec::new(),
    };
    c.visit_file(ast);
    c.out
}

struct Collector<'a> {
    /// Current module (grows inside inline modules).
    module: Vec<String>,
    items: &'a FileItems,
    files: &'a ModuleFiles,
    out: Vec<Reference>,
}

impl Collector<'_> {
    fn push(&mut self, segs: &[String], line: usize) {
        let Some(first) = segs.first() else { return };
        let path = match self.items.imports.get(first) {
            // An imported name: the import's target (None: another crate).
            Some(imp) if !matches!(first.as_str(), "crate" | "self" | "super") => {
                imp.target.clone().map(|mut t| {
                    t.extend(segs[1..].iter().cloned());
                    t
                })
            }
            _ if segs.len() == 1 && !matches!(first.as_str(), "crate" | "self" | "super") => None,
            _ => absolute(&self.module, segs, self.files),
        };
        if let Some(path) = path {
            self.out.push(Reference { path, line });
        }
    }

    /// `crate::a::b`, `super::x`, `self::y` sequences in macro arguments (whose
    /// tokens syn leaves unparsed). `$crate` in a macro definition is skipped.
    fn macro_tokens(&mut self, tokens: TokenStream) {
        let tts: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < tts.len() {
            if let TokenTree::Group(g) = &tts[i] {
                self.macro_tokens(g.stream());
            }
            let TokenTree::Ident(id) = &tts[i] else {
                i += 1;
                continue;
            };
            if !matches!(id.to_string().as_str(), "crate" | "super" | "self") {
                i += 1;
                continue;
            }
            let after_dollar =
                i > 0 && matches!(&tts[i - 1], TokenTree::Punct(p) if p.as_char() == '$');
            let mut segs = vec![id.to_string()];
            let mut j = i + 1;
            while let (
                Some(TokenTree::Punct(a)),
                Some(TokenTree::Punct(b)),
                Some(TokenTree::Ident(n)),
            ) = (tts.get(j), tts.get(j + 1), tts.get(j + 2))
            {
                if a.as_char() != ':' || b.as_char() != ':' {
                    break;
                }
                segs.push(n.to_string());
                j += 3;
            }
            if !after_dollar && segs.len() > 1 {
                self.push(&segs, id.span().start().line);
            }
            i = j;
        }
    }
}

impl<'ast> Visit<'ast> for Collector<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Const(i) => &i.attrs,
            syn::Item::Enum(i) => &i.attrs,
            syn::Item::Fn(i) => &i.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Macro(i) => &i.attrs,
            syn::Item::Mod(i) => &i.attrs,
            syn::Item::Static(i) => &i.attrs,
            syn::Item::Struct(i) => &i.attrs,
            syn::Item::Trait(i) => &i.attrs,
            syn::Item::Type(i) => &i.attrs,
            syn::Item::Union(i) => &i.attrs,
            // Imports are read by `items.rs`.
            syn::Item::Use(_) => return,
            _ => return syn::visit::visit_item(self, item),
        };
        if !is_test_only(attrs) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_test_only(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        // `mod x;` declares a child: that is the tree, not a reference.
        if let Some((_, items)) = &m.content {
            self.module.push(m.ident.to_string());
            for item in items {
                self.visit_item(item);
            }
            self.module.pop();
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segs: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        if let Some(first) = p.segments.first() {
            self.push(&segs, first.ident.span().start().line);
        }
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        syn::visit::visit_macro(self, m);
        self.macro_tokens(m.tokens.clone());
    }

    // Attributes (`#[derive]`, `#[doc]`, `#[cfg]`) and visibilities (`pub(crate)`)
    // name no item of the crate.
    fn visit_attribute(&mut self, _: &'ast syn::Attribute) {}
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}
}
