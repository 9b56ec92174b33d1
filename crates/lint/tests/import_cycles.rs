//! No `use` cycle between the files of any crate of the workspace; and the checker
//! itself finds the cycles it should (on small crates written to a temp dir).

use std::path::Path;

use wring_lint::{check_import_cycles, AllowedEdge};

/// Edges tolerated until their owner removes them. Each one cuts a known cycle.
const ALLOWED: &[AllowedEdge] = &[];

#[test]
fn no_crate_has_a_file_import_cycle() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let workspace = workspace.canonicalize().unwrap();
    let problems = check_import_cycles(&workspace, ALLOWED).unwrap();
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

/// Writes `files` (path under `crates/demo/src`, text) into a fresh workspace.
fn demo(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let p = dir.path().join("crates/demo/src").join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    dir
}

fn problems(dir: &tempfile::TempDir, allowed: &[AllowedEdge]) -> Vec<String> {
    check_import_cycles(dir.path(), allowed).unwrap()
}

#[test]
fn a_cycle_through_use_and_code_paths_is_reported_with_its_lines() {
    let d = demo(&[
        ("lib.rs", "mod a;\nmod b;\npub mod c;\n"),
        ("a.rs", "use crate::b::B;\npub struct A;\n"),
        (
            "b.rs",
            "pub struct B;\nfn f() { let _ = crate::c::d::make(); }\n",
        ),
        ("c/mod.rs", "pub mod d;\n"),
        (
            "c/d.rs",
            "pub fn make() -> super::super::a::A { super::super::a::A }\n",
        ),
    ]);
    let p = problems(&d, &[]);
    assert_eq!(p.len(), 1, "{p:?}");
    for part in [
        "crates/demo/src/a.rs -> crates/demo/src/b.rs (line 1: b::B)",
        "crates/demo/src/b.rs -> crates/demo/src/c/d.rs (line 2: c::d::make)",
        "crates/demo/src/c/d.rs -> crates/demo/src/a.rs (line 1: a::A)",
    ] {
        assert!(p[0].contains(part), "{part} not in {}", p[0]);
    }
}

#[test]
fn macro_arguments_and_child_module_paths_count() {
    let d = demo(&[
        ("lib.rs", "mod x;\nmod y;\n"),
        ("x.rs", "pub fn f() { println!(\"{}\", crate::y::g()); }\n"),
        (
            "y.rs",
            "pub fn g() -> u8 { 1 }\nmod z;\npub fn h() { z::k(); super::x::f() }\n",
        ),
        ("y/z.rs", "pub fn k() {}\n"),
    ]);
    assert_eq!(problems(&d, &[]).len(), 1);
}

#[test]
fn a_cycle_through_a_modules_re_export_is_reported() {
    // `config.rs` names `spec::Cache`, which `spec/mod.rs` re-exports from `spec/cache.rs`,
    // and `spec/mod.rs` uses `config.rs`: the two modules import each other.
    let d = demo(&[
        ("lib.rs", "mod config;\nmod spec;\n"),
        (
            "config.rs",
            "use crate::spec::Cache;\npub struct Config(pub Option<Cache>);\n",
        ),
        (
            "spec/mod.rs",
            "mod cache;\npub use cache::Cache;\nuse crate::config::Config;\npub fn f(_: Config) {}\n",
        ),
        ("spec/cache.rs", "pub struct Cache;\n"),
    ]);
    let p = problems(&d, &[]);
    assert_eq!(p.len(), 1, "{p:?}");
    for part in [
        "crates/demo/src/config.rs -> crates/demo/src/spec/mod.rs (line 1: spec::Cache)",
        "crates/demo/src/spec/mod.rs -> crates/demo/src/config.rs (line 3: config::Config)",
    ] {
        assert!(p[0].contains(part), "{part} not in {}", p[0]);
    }
}

#[test]
fn a_child_reaching_a_sibling_through_its_parents_re_export_is_no_cycle() {
    let d = demo(&[
        ("lib.rs", "mod spec;\npub use spec::plan;\n"),
        (
            "spec/mod.rs",
            "mod drafts;\nmod planner;\npub use drafts::Drafts;\npub fn plan() { planner::p() }\n",
        ),
        ("spec/drafts.rs", "pub struct Drafts;\n"),
        (
            "spec/planner.rs",
            "use super::Drafts;\npub fn p() { let _: Option<Drafts> = None; let _: Option<crate::spec::Drafts> = None; }\n",
        ),
    ]);
    assert!(problems(&d, &[]).is_empty(), "{:?}", problems(&d, &[]));
}

#[test]
fn tests_comments_strings_and_dollar_crate_do_not_count() {
    let d = demo(&[
        ("lib.rs", "mod x;\nmod y;\n"),
        (
            "x.rs",
            "pub fn f() {}\n/// See [`crate::y::g`].\nfn doc() { let _ = \"crate::y::g\"; }\n",
        ),
        (
            "y.rs",
            "pub fn g() { crate::x::f() }\n#[cfg(test)]\nmod tests { use crate::x::f; }\n\
             macro_rules! m { () => { $crate::x::f() } }\n",
        ),
    ]);
    assert!(problems(&d, &[]).is_empty());
    // A test module's reference back does not count either.
    let d = demo(&[
        ("lib.rs", "mod x;\nmod y;\n"),
        (
            "x.rs",
            "pub fn f() {}\n#[cfg(test)]\nmod tests { fn t() { crate::y::g() } }\n",
        ),
        ("y.rs", "pub fn g() { crate::x::f() }\n"),
    ]);
    assert!(problems(&d, &[]).is_empty());
}

#[test]
fn an_allowed_edge_cuts_its_cycle_and_a_stale_one_is_reported() {
    let d = demo(&[
        ("lib.rs", "mod x;\nmod y;\n"),
        ("x.rs", "pub fn f() { crate::y::g() }\n"),
        ("y.rs", "pub fn g() { crate::x::f() }\n"),
    ]);
    let cut = AllowedEdge {
        from: "crates/demo/src/y.rs",
        to: "crates/demo/src/x.rs",
        why: "test",
    };
    assert!(problems(&d, &[cut]).is_empty());
    let stale = AllowedEdge {
        from: "crates/demo/src/x.rs",
        to: "crates/demo/src/lib.rs",
        why: "test",
    };
    let p = problems(&d, &[cut, stale]);
    assert_eq!(p.len(), 1);
    assert!(p[0].contains("no longer exists"), "{p:?}");
}
