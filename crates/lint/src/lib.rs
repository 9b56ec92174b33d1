//! Checks on the workspace's own source. [`check_import_cycles`]: no two files of
//! one crate may refer to each other, directly or around a longer loop (a `use`,
//! a path in code or in a macro's arguments; test-only code excluded). A cycle
//! means neither file can be read, tested or moved without the other.
//! `crates/lint/tests/import_cycles.rs` runs it over `crates/*` with the README's
//! test command. [`switches::unread_switches`]: no script, doc or comment names a
//! `WRING_*` switch that no code reads (`tests/wring_switches.rs`). And
//! `tests/benchmarks_page.rs` keeps BENCHMARKS.md equal to what `scripts/benchmarks.py`
//! makes of the data under `results/`.

pub mod graph;
pub mod items;
pub mod modules;
pub mod refs;
pub mod switches;

use std::path::{Path, PathBuf};

use anyhow::Result;

/// A file-to-file edge tolerated for now (paths relative to the workspace root).
#[derive(Debug, Clone, Copy)]
pub struct AllowedEdge {
    pub from: &'static str,
    pub to: &'static str,
    pub why: &'static str,
}

/// Every crate root (`src/lib.rs`, `src/main.rs`) under `crates_dir/*`.
pub fn crate_roots(crates_dir: &Path) -> Result<Vec<PathBuf>> {
    let mut roots = Vec::new();
    for entry in std::fs::read_dir(crates_dir)? {
        let src = entry?.path().join("src");
        for name in ["lib.rs", "main.rs"] {
            let root = src.join(name);
            if root.is_file() {
                roots.push(root);
            }
        }
    }
    roots.sort();
    Ok(roots)
}

/// Problems found in the crates under `workspace/crates`: each cycle (with the
/// line of every edge), and every allowed edge that no longer exists (so its entry
/// is deleted). Empty when all is well.
pub fn check_import_cycles(workspace: &Path, allowed: &[AllowedEdge]) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    let mut seen_allowed = vec![false; allowed.len()];
    for root in crate_roots(&workspace.join("crates"))? {
        let mut edges = graph::file_edges(&root)?;
        edges.retain(|e| {
            let rel = |p: &Path| p.strip_prefix(workspace).unwrap_or(p).to_path_buf();
            let hit = allowed
                .iter()
                .position(|a| rel(&e.from) == Path::new(a.from) && rel(&e.to) == Path::new(a.to));
            if let Some(i) = hit {
                seen_allowed[i] = true;
            }
            hit.is_none()
        });
        for cycle in graph::cycles(&edges) {
            problems.push(format!(
                "import cycle in {}:\n{}",
                root.strip_prefix(workspace).unwrap_or(&root).display(),
                graph::describe(&cycle, workspace)
            ));
        }
    }
    for (a, seen) in allowed.iter().zip(seen_allowed) {
        if !seen {
            problems.push(format!(
                "allowed edge {} -> {} no longer exists: delete its entry ({})",
                a.from, a.to, a.why
            ));
        }
    }
    Ok(problems)
}
