//! [`unread_switches`]: every `WRING_*` environment switch that a script, a doc or a
//! comment names must be one that some code reads, so that no page tells a reader to set
//! a switch that does nothing any more. Read means: a Rust string literal passed to a
//! function (`std::env::var("WRING_X")`, a helper such as `switch("WRING_X", ..)`, clap's
//! `env = "WRING_X"`), a shell expansion (`$WRING_X`, `${WRING_X:-..}`) or a Python
//! `os.environ.get("WRING_X")` / `os.environ["WRING_X"]` / `os.getenv("WRING_X")`.
//! A name ending in `_` (`WRING_CUDA_*`) names a family: some read switch must start with it.
//! A C preprocessor constant (`#define WRING_INF ...` in a kernel) is not a switch.
//! `results/` is history (it records the switches of its day) and is not checked.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::Result;
use regex::Regex;

/// Directory names never walked: build outputs, carries, virtual environments, history.
const SKIP_DIRS: &[&str] = &[
    ".git",
    "results",
    "node_modules",
    "__pycache__",
    "bench-out",
    "bench-results",
];

/// Files that name switches on purpose (the checker's own tests write made-up ones).
const SKIP_FILES: &[&str] = &["crates/lint/tests/wring_switches.rs"];

fn walked(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if path.is_dir() {
        return !(SKIP_DIRS.contains(&name)
            || name.starts_with("target")
            || (name.starts_with('.') && name != ".ci"));
    }
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    matches!(
        ext,
        "md" | "sh" | "py" | "rs" | "cu" | "cuh" | "toml" | "txt"
    ) || path.parent().and_then(|p| p.file_name()) == Some(".ci".as_ref())
}

/// The files checked under `workspace`, relative to it.
fn files(workspace: &Path) -> Vec<PathBuf> {
    walkdir::WalkDir::new(workspace)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| e.depth() == 0 || walked(e.path()))
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file())
        .map(|e| e.path().strip_prefix(workspace).unwrap().to_path_buf())
        .filter(|p| !SKIP_FILES.iter().any(|s| p == Path::new(s)))
        .collect()
}

/// One line per switch named but never read: `WRING_X: named in a/b.md:12, c.sh:3`.
pub fn unread_switches(workspace: &Path) -> Result<Vec<String>> {
    let name = Regex::new(r"WRING_[A-Z0-9_]*")?;
    let rust_read =
        Regex::new(r#"(\w+!?)\(\s*"(WRING_[A-Z0-9_]+)"|\benv\s*=\s*"(WRING_[A-Z0-9_]+)""#)?;
    let shell_read = Regex::new(r"\$\{?(WRING_[A-Z0-9_]+)")?;
    let defined = Regex::new(r"#define\s+(WRING_[A-Z0-9_]+)")?;
    let python_read = Regex::new(
        r#"(?:environ\.get|environ\.setdefault|getenv)\(\s*["'](WRING_[A-Z0-9_]+)|environ\[\s*["'](WRING_[A-Z0-9_]+)"#,
    )?;
    // Calls that take a switch's name without reading it.
    let not_reads = [
        "set_var",
        "remove_var",
        "contains",
        "starts_with",
        "format!",
        "bail!",
    ];
    let mut read = BTreeSet::new();
    let mut named: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for rel in files(workspace) {
        let Ok(text) = std::fs::read_to_string(workspace.join(&rel)) else {
            continue;
        };
        let ext = rel.extension().and_then(|e| e.to_str()).unwrap_or("");
        for c in rust_read.captures_iter(&text).filter(|_| ext == "rs") {
            if let Some(n) = c.get(3) {
                read.insert(n.as_str().to_string());
            } else if !not_reads.contains(&&c[1]) {
                read.insert(c[2].to_string());
            }
        }
        for c in defined.captures_iter(&text) {
            read.insert(c[1].to_string());
        }
        for c in shell_read.captures_iter(&text).filter(|_| ext != "rs") {
            read.insert(c[1].to_string());
        }
        for c in python_read.captures_iter(&text).filter(|_| ext == "py") {
            read.insert(c.get(1).or(c.get(2)).unwrap().as_str().to_string());
        }
        for (i, line) in text.lines().enumerate() {
            for m in name.find_iter(line) {
                named
                    .entry(m.as_str().to_string())
                    .or_default()
                    .push(format!("{}:{}", rel.display(), i + 1));
            }
        }
    }
    let mut problems = Vec::new();
    for (switch, places) in named {
        let ok = if switch.ends_with('_') {
            read.iter().any(|r| r.starts_with(&switch))
        } else {
            read.contains(&switch)
        };
        if !ok {
            let mut shown: Vec<_> = places.iter().take(6).cloned().collect();
            if places.len() > 6 {
                shown.push(format!("and {} more", places.len() - 6));
            }
            problems.push(format!(
                "{switch}: named in {} but read by no code",
                shown.join(", ")
            ));
        }
    }
    Ok(problems)
}
