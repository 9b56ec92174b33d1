//! `wring chat`: interactive chat over stdin lines, keeping the conversation and
//! rendering it with the model's chat template. `/exit` quits, `/reset` forgets.

use std::io::{BufRead, Write};
use std::path::Path;

use anyhow::Context;
use wring_engine::{EngineEvent, GenerateRequest};
use wring_model::ChatMessage;

use super::common::{
    encode_prompt, model_sampling_defaults, system_turn, CommonArgs, SamplingArgs,
};
use super::launch::LaunchPlan;

#[derive(clap::Args)]
pub struct Args {
    /// System message (default: an empty one for SmolLM2-135M-Instruct, where it measured
    /// better; for other models the template's own).
    #[arg(long)]
    pub system: Option<String>,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    #[command(flatten)]
    pub common: CommonArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let plan = LaunchPlan::resolve_one_stream(&args.common)?;
    let checkpoint = plan.checkpoint().map(Path::to_path_buf);
    let checkpoint = checkpoint.as_deref();
    let (engine, info) = plan.start()?;
    let tpl = info
        .chat_template
        .clone()
        .context("this model has no chat template; use `wring generate` instead")?;
    let mut history = system_turn(args.system.as_deref(), checkpoint);
    let base_len = history.len();
    let (sampling, how) = args
        .sampling
        .chat_params(&model_sampling_defaults(checkpoint));
    tracing::info!("{how}");
    eprintln!(
        "chatting with {} (/exit to quit, /reset to start over)",
        info.model_name
    );
    let stdin = std::io::stdin();
    let mut lines = stdin.lock();
    let mut buf = Vec::new();
    loop {
        eprint!("> ");
        buf.clear();
        if lines.read_until(b'\n', &mut buf)? == 0 {
            break; // end of input
        }
        let Ok(line) = std::str::from_utf8(&buf) else {
            eprintln!("error: that line is not valid UTF-8; please retype it");
            continue;
        };
        let line = line.trim_end_matches(['\n', '\r']);
        match line.trim() {
            "" => continue,
            "/exit" | "/quit" => break,
            "/reset" => {
                history.truncate(base_len);
                eprintln!("(conversation cleared)");
                continue;
            }
            _ => {}
        }
        history.push(ChatMessage::new("user", line));
        let prompt_ids = encode_prompt(&info, &tpl.render(&history, true)?)?;
        let req = GenerateRequest {
            request_id: "chat".into(),
            prompt_ids,
            sampling: sampling.clone(),
            max_tokens: args.sampling.max_tokens,
            stop_strings: args.sampling.stop.clone(),
            ignore_eos: args.sampling.ignore_eos,
            ..Default::default()
        };
        let mut h = match engine.submit(req) {
            Ok(h) => h,
            Err(e) => {
                // e.g. the conversation outgrew the context: say so and forget this turn.
                eprintln!("error: {e}");
                history.pop();
                continue;
            }
        };
        let mut reply = String::new();
        let mut out = std::io::stdout().lock();
        loop {
            match h.events.blocking_recv() {
                Some(EngineEvent::Tokens { text, .. }) => {
                    reply.push_str(&text);
                    out.write_all(text.as_bytes())?;
                    out.flush()?;
                }
                Some(EngineEvent::Finished { .. }) => break,
                Some(EngineEvent::Error { message }) => {
                    eprintln!("\nerror: {message}");
                    break;
                }
                None => anyhow::bail!("the engine stopped unexpectedly"),
            }
        }
        writeln!(out)?;
        history.push(ChatMessage::new("assistant", &reply));
    }
    engine.shutdown(std::time::Duration::from_secs(0));
    Ok(())
}
