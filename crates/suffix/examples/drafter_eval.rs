//! Stand-alone build of `wring drafter-eval` (the same source file), for when the full
//! `wring` binary cannot be built: `cargo run --release -p wring-suffix --example drafter_eval -- --help`.

#[path = "../../wring/src/cmd/drafter_eval.rs"]
mod drafter_eval;

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "drafter-eval",
    about = "Replay token traces through the suffix drafter"
)]
struct Cli {
    #[command(flatten)]
    args: drafter_eval::Args,
}

fn main() {
    if let Err(e) = drafter_eval::run(Cli::parse().args) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
