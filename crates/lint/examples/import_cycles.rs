//! Prints the file import cycles of every crate under `WORKSPACE/crates` (default:
//! this workspace), with nothing allowed: `cargo run -p wring-lint --example
//! import_cycles [WORKSPACE]`.

fn main() -> anyhow::Result<()> {
    let workspace = std::env::args()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."));
    let problems = wring_lint::check_import_cycles(&workspace.canonicalize()?, &[])?;
    for p in &problems {
        println!("{p}");
    }
    println!("{} cycle(s)", problems.len());
    Ok(())
}
