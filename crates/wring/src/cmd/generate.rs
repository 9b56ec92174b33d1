//! `wring generate`: one prompt, streamed to stdout; statistics to stderr.

use std::io::Write;
use std::time::Instant;

use anyhow::{bail, Context};
use wring_engine::{EngineEvent, FinishReason, GenerateRequest};
use wring_model::ChatMessage;

use super::common::{
    encode_prompt, model_sampling_defaults, start_one_stream_engine, system_turn, CommonArgs,
    SamplingArgs,
};

#[derive(clap::Args)]
pub struct Args {
    /// The prompt text.
    #[arg(long)]
    pub prompt: String,
    /// Wrap the prompt as a user message in the model's chat template.
    #[arg(long)]
    pub chat: bool,
    /// System message for --chat (default: an empty one for SmolLM2-135M-Instruct, where it
    /// measured better; for other models the template's own).
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
    let (engine, info) = start_one_stream_engine(&args.common)?;
    let text = if args.chat {
        let tpl = info
            .chat_template
            .as_ref()
            .context("this model has no chat template; drop --chat")?;
        let mut msgs = system_turn(args.system.as_deref(), &args.common.model);
        msgs.push(ChatMessage::new("user", &args.prompt));
        tpl.render(&msgs, true)?
    } else {
        args.prompt.clone()
    };
    let prompt_ids = encode_prompt(&info, &text)?;
    let sampling = if args.chat {
        let (params, how) = args
            .sampling
            .chat_params(&model_sampling_defaults(&args.common.model));
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
