//! `wring`: the one CLI binary. Each subcommand lives in `cmd/<name>.rs`.

mod cmd;
mod malloc;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "wring",
    version,
    about = "LLM inference server with suffix-tree speculative decoding (bestKpad)",
    long_about = "wring serves Llama-family models over an OpenAI-compatible API.\n\
                  Without --model it uses SmolLM2-135M-Instruct (Q4_1 GGUF), fetched on first use."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Fetch the default model (or check it is cached) into $WRING_HOME.
    Pull(cmd::pull::Args),
    /// Generate a completion for one prompt, streamed to the terminal.
    Generate(cmd::generate::Args),
    /// Interactive chat with the model (keeps history, uses the chat template).
    Chat(cmd::chat::Args),
    /// Serve the OpenAI-compatible HTTP API.
    Serve(cmd::serve::Args),
    /// Write a quantized copy of a model (int8, int4 with AWQ+GPTQ, fp8, nvfp4) as a Hugging Face directory.
    Quantize(cmd::quantize::Args),
    /// Replay token traces through the suffix drafter offline and report acceptance and speed.
    DrafterEval(cmd::drafter_eval::Args),
    /// Trace-replay benchmark against an OpenAI-compatible server.
    Bench(cmd::bench::Args),
    /// Sweep configurations with `wring serve` and write a best-K profile.
    Tune(cmd::bench::TuneArgs),
    /// Build a markdown report, charts and a decision tree from benchmark results.
    Report(cmd::bench::ReportArgs),
    /// Distribution-equivalence gate: may a candidate model replace the reference? (exit 0 PASS, 1 FAIL, 2 error)
    Gate(cmd::gate::Args),
}

fn main() {
    // NVLink multicast stays off in every NCCL wring starts (tensor parallelism): on a
    // shared host it can take the GPUs out of service. Set before any thread exists;
    // wring_cuda::nccl sets it again before NCCL starts, for library users.
    std::env::set_var("NCCL_NVLS_ENABLE", "0");
    malloc::fix_thresholds();
    cmd::init_tracing();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Pull(a) => cmd::pull::run(a),
        Command::Generate(a) => cmd::generate::run(a),
        Command::Chat(a) => cmd::chat::run(a),
        Command::Serve(a) => cmd::serve::run(a),
        Command::Quantize(a) => cmd::quantize::run(a),
        Command::DrafterEval(a) => cmd::drafter_eval::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Tune(a) => cmd::bench::run_tune(a),
        Command::Report(a) => cmd::bench::run_report(a),
        Command::Gate(a) => cmd::gate::run(a),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
