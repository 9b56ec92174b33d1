//! A crate's module tree: which file holds which module, found by following
//! `mod name;` declarations from the crate root (test-only modules left out).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Module path (segments under the crate root; empty = the root) → its file.
pub type ModuleFiles = BTreeMap<Vec<String>, PathBuf>;

/// True for items compiled only for tests (`#[cfg(test)]`, `#[cfg(all(test, …))]`).
pub fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        if !a.path().is_ident("cfg") {
            return false;
        }
        let Ok(list) = a.meta.require_list() else {
            return false;
        };
        let s = list.tokens.to_string();
        s.split(|c: char| !c.is_alphanumeric() && c != '_')
            .any(|w| w == "test")
            && !s.contains("not")
    })
}

/// Parses a file into syn's syntax tree.
pub fn parse(path: &Path) -> Result<syn::File> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    syn::parse_file(&text).with_context(|| format!("parsing {}", path.display()))
}

/// Every module file of the crate whose root is `root` (`src/lib.rs`, `src/main.rs`).
pub fn module_files(root: &Path) -> Result<ModuleFiles> {
    let mut files = ModuleFiles::new();
    let dir = root.parent().context("crate root has no directory")?;
    add_file(&mut files, Vec::new(), root, dir)?;
    Ok(files)
}

/// Adds `file` as module `module`; `dir` is where its child modules' files live.
fn add_file(files: &mut ModuleFiles, module: Vec<String>, file: &Path, dir: &Path) -> Result<()> {
    let ast = parse(file)?;
    files.insert(module.clone(), file.to_path_buf());
    add_children(files, &module, &ast.items, dir)
}

fn add_children(
    files: &mut ModuleFiles,
    module: &[String],
    items: &[syn::Item],
    dir: &Path,
) -> Result<()> {
    for item in items {
        let syn::Item::Mod(m) = item else { continue };
        if is_test_only(&m.attrs) {
            continue;
        }
        let name = m.ident.to_string();
        let mut child = module.to_vec();
        child.push(name.clone());
        match &m.content {
            // An inline module: its own `mod x;` children live in `dir/name/`.
            Some((_, inner)) => add_children(files, &child, inner, &dir.join(&name))?,
            None => {
                let flat = dir.join(format!("{name}.rs"));
                let nested = dir.join(&name).join("mod.rs");
                let file = if flat.is_file() { flat } else { nested };
                anyhow::ensure!(
                    file.is_file(),
                    "module {} declared but neither {name}.rs nor {name}/mod.rs exists in {}",
                    child.join("::"),
                    dir.display()
                );
                add_file(files, child, &file, &dir.join(&name))?;
            }
        }
    }
    Ok(())
}
