//! `wring generate`: one prompt, streamed to stdout; statistics to stderr. The prompt goes to
//! the model as a user message in its chat template when it has one (as llama.cpp's CLI
//! does), so an instruct model answers it; `--raw` continues the text as it is.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use anyhow::bail;
use wring_engine::{EngineEvent, FinishReason, GenerateRequest};
use wring_model::ChatMessage;

use super::common::{
    encode_prompt, model_sampling_defaults, system_turn, CommonArgs, SamplingArgs,
};
use super::launch::LaunchPlan;

#[derive(clap::Args)]
pub struct Args {
    /// The prompt: a user message in the model's chat template when it has one (an answer,
    /// greedy unless sampling flags say otherwise), the text to continue with --raw.
    #[arg(long)]
    pub prompt: String,
    /// Plain completion: continue the prompt text as it is, without the chat template.
    #[arg(long, conflicts_with_all = ["chat", "system"])]
    pub raw: bool,
    /// Sample as `wring chat` does (the model's own settings, else wring's chat defaults, and
    /// the DRY loop penalty) instead of greedy decoding.
    #[arg(long)]
    pub chat: bool,
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
    if args.prompt.is_empty() {
        bail!("--prompt is empty; give the text to continue");
    }
    let plan = LaunchPlan::resolve_one_stream(&args.common)?;
    let checkpoint = plan.checkpoint().map(Path::to_path_buf);
    let checkpoint = checkpoint.as_deref();
    let (engine, info) = plan.start()?;
    let text = match (&info.chat_template, args.raw) {
        (Some(tpl), false) => {
            let mut msgs = system_turn(args.system.as_deref(), checkpoint);
            msgs.push(ChatMessage::new("user", &args.prompt));
            tracing::info!(
                "prompt: a user message in the model's chat template (--raw: plain completion)"
            );
            tpl.render(&msgs, true)?
        }
        (None, false) if args.chat => {
            engine.shutdown(std::time::Duration::ZERO);
            bail!("this model has no chat template; drop --chat");
        }
        (None, false) => {
            tracing::info!("prompt: continued as it is (this model has no chat template)");
            args.prompt.clone()
        }
        (_, true) => {
            tracing::info!("prompt: continued as it is (--raw)");
            args.prompt.clone()
        }
    };
    let prompt_ids = encode_prompt(&info, &text)?;
    let sampling = if args.chat {
        let (params, how) = args
            .sampling
            .chat_params(&model_sampling_defaults(checkpoint));
        tracing::info!("{how}");
        params
    } else {
        args.sampling.params()
    };
    let req = GenerateRequest {
        request_id: "cli".into(),
        prompt_ids,
        sampling,
        max_tokens: args.sampling.max_tokens,
        stop_strings: args.sampling.stop.clone(),
        ignore_eos: args.sampling.ignore_eos,
        ..Default::default()
    };
    let t0 = Instant::now();
    let mut h = engine.submit(req)?;
    let mut out = std::io::stdout().lock();
    let mut first_token = None;
    let result = loop {
        match h.events.blocking_recv() {
            Some(EngineEvent::Tokens { text, .. }) => {
                first_token.get_or_insert_with(Instant::now);
                out.write_all(text.as_bytes())?;
                out.flush()?;
            }
            Some(EngineEvent::Finished { reason, usage }) => break Ok((reason, usage)),
            Some(EngineEvent::Error { message }) => break Err(anyhow::anyhow!(message)),
            None => break Err(anyhow::anyhow!("the engine stopped unexpectedly")),
        }
    };
    writeln!(out)?;
    drop(out);
    engine.shutdown(std::time::Duration::from_secs(0));
    let (reason, usage) = result?;
    let total = t0.elapsed().as_secs_f64();
    let ttft = first_token.map_or(total, |t| (t - t0).as_secs_f64());
    let decode_tps = if usage.completion_tokens > 1 {
        (usage.completion_tokens - 1) as f64 / (total - ttft).max(1e-9)
    } else {
        0.0
    };
    let mut stats = format!(
        "[{} prompt + {} generated tokens, finish: {}, ttft {:.3}s, {:.1} tok/s decode]",
        usage.prompt_tokens,
        usage.completion_tokens,
        reason.as_str(),
        ttft,
        decode_tps
    );
    if usage.draft_tokens > 0 {
        stats.push_str(&format!(
            " [spec: {} steps, {}/{} drafts accepted ({:.1}%)]",
            usage.spec_steps,
            usage.accepted_tokens,
            usage.draft_tokens,
            100.0 * usage.accepted_tokens as f64 / usage.draft_tokens as f64
        ));
    }
    eprintln!("{stats}");
    if reason == FinishReason::Error {
        bail!("generation failed");
    }
    Ok(())
}
