//! What each module file defines and imports, and how a path to an item is
//! followed through imports and re-exports (`pub use`) to the file that defines it,
//! noting every module whose re-export it passed through on the way (a facade). A
//! module's re-export is routing for the files inside that module; for a file outside
//! it, the facade is the module's interface and so a dependency (`graph.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use crate::modules::{is_test_only, ModuleFiles};

/// One `use` of a name: where it points (None: another crate).
#[derive(Debug, Clone)]
pub struct Import {
    pub target: Option<Vec<String>>,
    /// `pub`, `pub(crate)`, …: a re-export. Only counts as a dependency where the
    /// file's own code uses the name.
    pub public: bool,
    pub line: usize,
}

/// A module file's top-level names.
#[derive(Debug, Default, Clone)]
pub struct FileItems {
    pub defined: BTreeSet<String>,
    pub imports: BTreeMap<String, Import>,
    /// `use path::*` targets (None: another crate).
    pub globs: Vec<Import>,
}

/// Every module's items.
pub struct CrateItems<'a> {
    pub files: &'a ModuleFiles,
    pub items: BTreeMap<Vec<String>, FileItems>,
}

impl<'a> CrateItems<'a> {
    pub fn new(files: &'a ModuleFiles, asts: &BTreeMap<Vec<String>, syn::File>) -> Self {
        let items = asts
            .iter()
            .map(|(module, ast)| (module.clone(), file_items(module, ast, files)))
            .collect();
        Self { files, items }
    }

    /// The file that defines what `path` (absolute) names, following imports and
    /// re-exports; None when it leaves the crate.
    pub fn resolve(&self, path: &[String]) -> Option<&'a PathBuf> {
        self.resolve_through(path).map(|r| r.file)
    }

    /// [`Self::resolve`], and the modules whose re-exports the path went through.
    pub fn resolve_through(&self, path: &[String]) -> Option<Resolved<'a>> {
        let mut facades = Vec::new();
        let file = self.resolve_depth(path, 0, &mut facades)?;
        Some(Resolved { file, facades })
    }

    fn resolve_depth(
        &self,
        path: &[String],
        depth: usize,
        facades: &mut Vec<Vec<String>>,
    ) -> Option<&'a PathBuf> {
        let n = (0..=path.len())
            .rev()
            .find(|&n| self.files.contains_key(&path[..n]))?;
        let file = &self.files[&path[..n]];
        let (Some(name), Some(items)) = (path.get(n), self.items.get(&path[..n])) else {
            return Some(file);
        };
        if items.defined.contains(name) || depth > 16 {
            return Some(file);
        }
        let rest = &path[n + 1..];
        if let Some(imp) = items.imports.get(name) {
            let mut target = imp.target.clone()?;
            target.extend(rest.iter().cloned());
            facades.push(path[..n].to_vec());
            return self.resolve_depth(&target, depth + 1, facades);
        }
        for glob in &items.globs {
            let Some(g) = &glob.target else { continue };
            if let Some(gi) = self.items.get(g) {
                if gi.defined.contains(name) || gi.imports.contains_key(name) {
                    let mut target = g.clone();
                    target.extend(path[n..].iter().cloned());
                    facades.push(path[..n].to_vec());
                    return self.resolve_depth(&target, depth + 1, facades);
                }
            }
        }
        // Not found (a macro, a derive's output): the module's own file.
        Some(file)
    }
}

/// Where a path leads: the defining file, and every module (path under the crate root)
/// whose import or re-export it was routed through, in order.
#[derive(Debug, Clone)]
pub struct Resolved<'a> {
    pub file: &'a PathBuf,
    pub facades: Vec<Vec<String>>,
}

/// Resolves a path as written in module `module` to an absolute one; None for a
/// path that starts in another crate or names something not visible as a module.
pub fn absolute(module: &[String], segs: &[String], files: &ModuleFiles) -> Option<Vec<String>> {
    let first = segs.first()?;
    let (mut base, rest) = match first.as_str() {
        "crate" => (Vec::new(), &segs[1..]),
        "self" => (module.to_vec(), &segs[1..]),
        "super" => {
            let mut base = module.to_vec();
            let mut i = 0;
            while segs.get(i).is_some_and(|s| s == "super") {
                base.pop()?;
                i += 1;
            }
            (base, &segs[i..])
        }
        // A bare name is a child module when one of that name exists.
        _ => {
            let mut child = module.to_vec();
            child.push(first.clone());
            if !files.contains_key(&child) {
                return None;
            }
            (module.to_vec(), segs)
        }
    };
    base.extend(rest.iter().cloned());
    Some(base)
}

fn file_items(module: &[String], ast: &syn::File, files: &ModuleFiles) -> FileItems {
    let mut out = FileItems::default();
    for item in &ast.items {
        let (attrs, name) = match item {
            syn::Item::Const(i) => (&i.attrs, Some(&i.ident)),
            syn::Item::Enum(i) => (&i.attrs, Some(&i.ident)),
            syn::Item::Fn(i) => (&i.attrs, Some(&i.sig.ident)),
            syn::Item::Macro(i) => (&i.attrs, i.ident.as_ref()),
            syn::Item::Mod(i) => (&i.attrs, Some(&i.ident)),
            syn::Item::Static(i) => (&i.attrs, Some(&i.ident)),
            syn::Item::Struct(i) => (&i.attrs, Some(&i.ident)),
            syn::Item::Trait(i) => (&i.attrs, Some(&i.ident)),
            syn::Item::Type(i) => (&i.attrs, Some(&i.ident)),
            syn::Item::Union(i) => (&i.attrs, Some(&i.ident)),
            syn::Item::Use(u) => {
                if !is_test_only(&u.attrs) {
                    let public = !matches!(u.vis, syn::Visibility::Inherited);
                    add_uses(&mut out, module, files, &mut Vec::new(), &u.tree, public);
                }
                continue;
            }
            _ => continue,
        };
        if let (false, Some(name)) = (is_test_only(attrs), name) {
            out.defined.insert(name.to_string());
        }
    }
    out
}

fn add_uses(
    out: &mut FileItems,
    module: &[String],
    files: &ModuleFiles,
    prefix: &mut Vec<String>,
    tree: &syn::UseTree,
    public: bool,
) {
    let import = |path: Vec<String>, line: usize| Import {
        target: absolute(module, &path, files),
        public,
        line,
    };
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            add_uses(out, module, files, prefix, &p.tree, public);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let name = n.ident.to_string();
            let line = n.ident.span().start().line;
            if name == "self" {
                // `use a::b::{self}` imports `b` as `b`.
                if let Some(last) = prefix.last().cloned() {
                    out.imports.insert(last, import(prefix.clone(), line));
                }
            } else {
                let mut p = prefix.clone();
                p.push(name.clone());
                out.imports.insert(name, import(p, line));
            }
        }
        syn::UseTree::Rename(r) => {
            let mut p = prefix.clone();
            let line = r.ident.span().start().line;
            if r.ident != "self" {
                p.push(r.ident.to_string());
            }
            out.imports.insert(r.rename.to_string(), import(p, line));
        }
        syn::UseTree::Glob(g) => {
            let line = g.star_token.spans[0].start().line;
            out.globs.push(import(prefix.clone(), line));
        }
        syn::UseTree::Group(g) => {
            for t in &g.items {
                add_uses(out, module, files, prefix, t, public);
            }
        }
    }
}
