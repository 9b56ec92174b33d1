//! The file import graph of one crate and its cycles.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::items::CrateItems;
use crate::modules::{module_files, parse};
use crate::refs::{code_references, Reference};

/// `from` refers to an item of `to`: first seen at `line` of `from`, as `path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edge {
    pub from: PathBuf,
    pub to: PathBuf,
    pub line: usize,
    pub path: String,
}

/// Every file-to-file dependency of the crate rooted at `root`, one edge per pair:
/// private imports, and paths in code, to the defining file and to every facade passed
/// on the way there that is not the referring file's own module or one of its parents.
/// `config.rs` naming `crate::spec_decode::TimingsCache` (re-exported by
/// `spec_decode/mod.rs` from `spec_decode/k_policy/…`) depends on the defining file and on
/// `spec_decode/mod.rs`: a module's interface is part of it. `spec_decode/planner.rs`
/// naming `super::StepDrafts` depends on `drafts.rs` alone: a parent routes its children.
pub fn file_edges(root: &Path) -> Result<Vec<Edge>> {
    let files = module_files(root)?;
    let mut asts = BTreeMap::new();
    for (module, file) in &files {
        asts.insert(module.clone(), parse(file)?);
    }
    let table = CrateItems::new(&files, &asts);
    let mut edges: BTreeMap<(PathBuf, PathBuf), Edge> = BTreeMap::new();
    for (module, file) in &files {
        let items = &table.items[module];
        let imports = items.imports.values().chain(&items.globs);
        let mut refs: Vec<Reference> = imports
            .filter(|i| !i.public)
            .filter_map(|i| {
                Some(Reference {
                    path: i.target.clone()?,
                    line: i.line,
                })
            })
            .collect();
        refs.extend(code_references(&asts[module], module, items, &files));
        for r in refs {
            let Some(resolved) = table.resolve_through(&r.path) else {
                continue;
            };
            let facades = resolved
                .facades
                .iter()
                .filter(|m| !module.starts_with(m))
                .filter_map(|m| files.get(m));
            for to in std::iter::once(resolved.file).chain(facades) {
                if to == file {
                    continue;
                }
                edges
                    .entry((file.clone(), to.clone()))
                    .or_insert_with(|| Edge {
                        from: file.clone(),
                        to: to.clone(),
                        line: r.line,
                        path: r.path.join("::"),
                    });
            }
        }
    }
    Ok(edges.into_values().collect())
}

/// One cycle per strongly connected group of files, as the edges that close it.
pub fn cycles(edges: &[Edge]) -> Vec<Vec<Edge>> {
    let mut out: BTreeMap<&Path, Vec<&Edge>> = BTreeMap::new();
    for e in edges {
        out.entry(&e.from).or_default().push(e);
    }
    let mut reported: BTreeSet<&Path> = BTreeSet::new();
    let mut found = Vec::new();
    for start in out.keys().copied() {
        if reported.contains(start) {
            continue;
        }
        if let Some(cycle) = shortest_cycle(&out, start) {
            for e in &cycle {
                reported.insert(&e.from);
            }
            found.push(cycle.into_iter().cloned().collect());
        }
    }
    found
}

/// Breadth-first from `start` back to itself: the shortest cycle through it.
fn shortest_cycle<'a>(out: &BTreeMap<&Path, Vec<&'a Edge>>, start: &Path) -> Option<Vec<&'a Edge>> {
    let mut came_by: BTreeMap<&Path, &'a Edge> = BTreeMap::new();
    let mut frontier = vec![start];
    while !frontier.is_empty() {
        let mut next = Vec::new();
        for node in frontier {
            for &e in out.get(node).map(Vec::as_slice).unwrap_or_default() {
                if e.to == start {
                    let mut cycle = vec![e];
                    let mut at: &Path = node;
                    while at != start {
                        let prev = came_by[at];
                        cycle.push(prev);
                        at = &prev.from;
                    }
                    cycle.reverse();
                    return Some(cycle);
                }
                if !came_by.contains_key(e.to.as_path()) {
                    came_by.insert(&e.to, e);
                    next.push(e.to.as_path());
                }
            }
        }
        frontier = next;
    }
    None
}

/// A cycle as one readable line per edge.
pub fn describe(cycle: &[Edge], base: &Path) -> String {
    cycle
        .iter()
        .map(|e| {
            let rel = |p: &Path| p.strip_prefix(base).unwrap_or(p).display().to_string();
            format!(
                "  {} -> {} (line {}: {})",
                rel(&e.from),
                rel(&e.to),
                e.line,
                e.path
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}
