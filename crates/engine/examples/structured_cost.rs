//! What structured output costs on this machine, on the real default model:
//! (1) the grammar's mask per token (llguidance, person JSON schema, 49k vocabulary),
//! and (2) greedy decoding time per emitted token of the same requests without and
//! with that schema, rounds interleaved A/B/A/B (the masks run beside the model
//! step, so (2) shows what is left on the critical path).
//!
//! cargo run -p wring-engine --example structured_cost -- [--rounds 3] [--batch 4]

use std::time::Instant;

use anyhow::{Context, Result};
use serde_json::json;
use wring_engine::{Engine, EngineConfig, EngineEvent, GenerateRequest};
use wring_grammar::{GrammarCompiler, GrammarSpec};
use wring_model::{ModelSpec, RunnerOptions};

fn main() -> Result<()> {
    let mut rounds = 3usize;
    let mut batch = 4usize;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--rounds" => rounds = v.parse()?,
            "--batch" => batch = v.parse()?,
            _ => anyhow::bail!("unknown flag {flag}"),
        }
    }
    let model = wring_model::load_model(&ModelSpec::default())?;
    let compiler = GrammarCompiler::new(
        &model.tokenizer,
        &model.eos_token_ids,
        model.config.vocab_size,
    )?;
    let schema = GrammarSpec::JsonSchema(json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 24},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "city": {"type": "string", "maxLength": 24},
            "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 16}, "maxItems": 4}
        },
        "required": ["name", "age", "city", "hobbies"],
        "additionalProperties": false
    }));

    // (1) Mask per token along a valid object.
    let text =
        r#"{"name": "Ada Lovelace", "age": 36, "city": "London", "hobbies": ["maths", "poetry"]}"#;
    let ids = model.tokenizer.encode(text)?;
    let mut times = Vec::new();
    for _ in 0..20 {
        let mut m = compiler.compile(&schema)?;
        for &t in &ids {
            let t0 = Instant::now();
            let mask = m.allowed_tokens()?;
            times.push(t0.elapsed().as_secs_f64() * 1e6);
            anyhow::ensure!(mask.allows(t), "token {t} not allowed");
            m.advance(&[t])?;
        }
    }
    times.sort_by(f64::total_cmp);
    let pct = |p: f64| times[((times.len() - 1) as f64 * p) as usize];
    println!(
        "mask per token over {} tokens x 20: median {:.0} us, p90 {:.0} us, max {:.0} us",
        ids.len(),
        pct(0.5),
        pct(0.9),
        pct(1.0)
    );

    // (2) Decoding with and without the schema.
    let template = model.chat_template.clone().context("a chat template")?;
    let tokenizer = model.tokenizer.clone();
    let prompts: Vec<Vec<u32>> = [
        "Describe a famous scientist as JSON.",
        "Describe a person who likes sports, as JSON.",
        "Describe your best friend as JSON.",
        "Describe a musician as JSON.",
    ]
    .iter()
    .cycle()
    .take(batch)
    .map(|p| {
        let text = template.render_json(&json!([{"role": "user", "content": p}]), None, true)?;
        tokenizer.encode(&text)
    })
    .collect::<Result<_>>()?;
    let opts = RunnerOptions {
        kv_cache_bytes: 256 << 20,
        max_model_len: 2048,
        ..RunnerOptions::default()
    };
    let cfg = EngineConfig {
        max_num_seqs: batch.max(1),
        max_model_len: 2048,
        ..EngineConfig::default()
    };
    let (engine, info) = Engine::start(model, opts, cfg)?;
    println!("device {}, batch {batch}, f32 weights, greedy", info.device);
    let run = |constrained: bool| -> Result<(usize, f64)> {
        let t0 = Instant::now();
        let handles = prompts
            .iter()
            .map(|p| {
                let req = GenerateRequest {
                    prompt_ids: p.clone(),
                    max_tokens: 64,
                    grammar: constrained.then(|| compiler.compile(&schema)).transpose()?,
                    ..Default::default()
                };
                Ok(engine.submit(req)?)
            })
            .collect::<Result<Vec<_>>>()?;
        let mut tokens = 0;
        for mut h in handles {
            while let Some(ev) = h.events.blocking_recv() {
                match ev {
                    EngineEvent::Tokens { ids, .. } => tokens += ids.len(),
                    EngineEvent::Finished { .. } => break,
                    EngineEvent::Error { message } => anyhow::bail!(message),
                }
            }
        }
        Ok((tokens, t0.elapsed().as_secs_f64()))
    };
    run(false)?; // warm-up
    for r in 0..rounds {
        for constrained in [false, true] {
            let (tokens, secs) = run(constrained)?;
            println!(
                "round {r} {:<13} {tokens:>4} tokens in {secs:.2} s: {:.1} ms per token",
                if constrained {
                    "json_schema"
                } else {
                    "unconstrained"
                },
                secs * 1e3 / tokens as f64
            );
        }
    }
    engine.shutdown(std::time::Duration::from_secs(5));
    Ok(())
}
