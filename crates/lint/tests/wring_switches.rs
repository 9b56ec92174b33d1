//! No script, doc or comment of the workspace names a `WRING_*` switch that no code reads;
//! and the checker finds such a name (on small workspaces written to a temp dir).

use std::path::Path;

use wring_lint::switches::unread_switches;

#[test]
fn every_switch_named_in_scripts_and_docs_is_read_by_code() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let problems = unread_switches(&workspace.canonicalize().unwrap()).unwrap();
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

fn workspace(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    dir
}

#[test]
fn a_switch_only_a_script_sets_is_reported_with_where_it_is_named() {
    let d = workspace(&[
        (
            "crates/a/src/lib.rs",
            "//! Reads `WRING_KEPT`.\nfn f() { let _ = std::env::var(\"WRING_KEPT\"); }\n",
        ),
        (
            "scripts/x.sh",
            "WRING_KEPT=1 WRING_GONE=on wring serve\necho ${WRING_SCRIPT_VAR:-x}\n",
        ),
        ("README.md", "Set `WRING_SCRIPT_VAR` or `WRING_GONE`.\n"),
        (
            "results/2026-01-01-x/NOTES.md",
            "WRING_HISTORY=on was measured\n",
        ),
    ]);
    let p = unread_switches(d.path()).unwrap();
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(
        p[0].starts_with("WRING_GONE: named in README.md:1, scripts/x.sh:1"),
        "{}",
        p[0]
    );
}

#[test]
fn reads_count_from_helpers_clap_python_and_families() {
    let d = workspace(&[
        (
            "crates/a/src/lib.rs",
            "#[arg(long, env = \"WRING_CLAP\")]\nstruct A;\nfn g() { switch(\"WRING_CUDA_HELPER\", &v); std::env::set_var(\"WRING_SET_ONLY\", \"1\"); }\n",
        ),
        ("scripts/p.py", "import os\nos.environ.get(\"WRING_PY\")\n"),
        (
            "README.md",
            "`WRING_CLAP`, `WRING_CUDA_HELPER`, `WRING_PY`, the `WRING_CUDA_*` family, `WRING_SET_ONLY`\n",
        ),
    ]);
    let p = unread_switches(d.path()).unwrap();
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(p[0].starts_with("WRING_SET_ONLY:"), "{}", p[0]);
}
