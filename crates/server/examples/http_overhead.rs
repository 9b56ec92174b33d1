//! How much the HTTP layer costs: the same closed-loop workload (N chat requests,
//! C in flight, fixed output length) run against the engine in-process and
//! through `wring serve`'s router on loopback (streaming, as clients use it), in
//! alternating rounds over one engine. Prints requests/s, output tokens/s and the
//! overhead of HTTP relative to in-process.
//!
//!   cargo run --release -p wring-server --example http_overhead -- \
//!       --concurrency 32 --requests 128 --max-tokens 64 --rounds 2
//!
//! Prompts: the first user turns of WildChat ($WRING_SHARED or <repo>/../shared).
//! The HTTP client runs in the same process, so its JSON/SSE parsing is counted
//! against HTTP too (the overhead reported is an upper bound).

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use futures::StreamExt;
use wring_engine::api::{EngineEvent, GenerateRequest, SamplingParams};
use wring_engine::{Engine, EngineConfig, EngineHandle, EngineInfo};
use wring_model::{ChatMessage, Device, LoadFormat, ModelSpec, RunnerOptions};
use wring_server::{AppState, ServerConfig};

struct Opts {
    concurrency: usize,
    requests: usize,
    max_tokens: u32,
    rounds: usize,
    max_prompt_tokens: usize,
}

fn parse_opts() -> Result<Opts> {
    let mut o = Opts {
        concurrency: 32,
        requests: 128,
        max_tokens: 64,
        rounds: 2,
        max_prompt_tokens: 256,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let [flag, value] = pair else {
            bail!("flags take a value: {pair:?}");
        };
        let n: usize = value.parse().with_context(|| format!("{flag} {value}"))?;
        match flag.as_str() {
            "--concurrency" => o.concurrency = n,
            "--requests" => o.requests = n,
            "--max-tokens" => o.max_tokens = n as u32,
            "--rounds" => o.rounds = n,
            "--max-prompt-tokens" => o.max_prompt_tokens = n,
            _ => bail!("unknown flag {flag}"),
        }
    }
    Ok(o)
}

fn shared_dir() -> PathBuf {
    std::env::var_os("WRING_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared"))
}

/// Chat prompts (user turns) and their token ids under the model's template.
fn prompts(info: &EngineInfo, n: usize, max_tokens: usize) -> Result<Vec<(String, Vec<u32>)>> {
    let path = shared_dir().join("corpora/wildchat_users_100.json");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let records: Vec<serde_json::Value> = serde_json::from_str(&text)?;
    let template = info
        .chat_template
        .as_ref()
        .context("model has no chat template")?;
    let mut out = Vec::new();
    for r in records.iter().cycle().take(records.len() * 4) {
        if out.len() == n {
            break;
        }
        let user = r["user"].as_str().unwrap_or_default().to_string();
        let msgs = [ChatMessage {
            role: "user".into(),
            content: user.clone(),
        }];
        let ids = info.tokenizer.encode(&template.render(&msgs, true)?)?;
        if ids.len() <= max_tokens {
            out.push((user, ids));
        }
    }
    if out.len() < n {
        bail!("only {} prompts of at most {max_tokens} tokens", out.len());
    }
    Ok(out)
}

#[derive(Debug, Clone, Copy)]
struct Measured {
    secs: f64,
    requests: usize,
    output_tokens: usize,
}

impl Measured {
    fn rps(&self) -> f64 {
        self.requests as f64 / self.secs
    }
    fn tps(&self) -> f64 {
        self.output_tokens as f64 / self.secs
    }
}

/// Runs `total` jobs with `concurrency` workers; each job returns its output tokens.
async fn closed_loop<F, Fut>(total: usize, concurrency: usize, job: F) -> Result<Measured>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<usize>> + Send,
{
    let job = Arc::new(job);
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (job, next) = (job.clone(), next.clone());
            tokio::spawn(async move {
                let mut tokens = 0;
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= total {
                        return Ok::<_, anyhow::Error>(tokens);
                    }
                    tokens += job(i).await?;
                }
            })
        })
        .collect();
    let mut output_tokens = 0;
    for w in workers {
        output_tokens += w.await??;
    }
    Ok(Measured {
        secs: start.elapsed().as_secs_f64(),
        requests: total,
        output_tokens,
    })
}

async fn in_process(
    engine: EngineHandle,
    prompts: Arc<Vec<(String, Vec<u32>)>>,
    o: &Opts,
) -> Result<Measured> {
    let max_tokens = o.max_tokens;
    closed_loop(o.requests, o.concurrency, move |i| {
        let engine = engine.clone();
        let prompts = prompts.clone();
        async move {
            let req = GenerateRequest {
                request_id: format!("inproc-{i}"),
                prompt_ids: prompts[i % prompts.len()].1.clone(),
                sampling: SamplingParams::default(),
                max_tokens,
                ignore_eos: true,
                ..GenerateRequest::default()
            };
            let mut handle = engine.submit(req)?;
            let mut text = String::new();
            while let Some(ev) = handle.events.recv().await {
                match ev {
                    EngineEvent::Tokens { text: t, .. } => text.push_str(&t),
                    EngineEvent::Finished { usage, .. } => {
                        return Ok(usage.completion_tokens as usize)
                    }
                    EngineEvent::Error { message } => bail!(message),
                }
            }
            bail!("engine stopped")
        }
    })
    .await
}

async fn over_http(
    base: String,
    prompts: Arc<Vec<(String, Vec<u32>)>>,
    o: &Opts,
) -> Result<Measured> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(o.concurrency)
        .build()?;
    let max_tokens = o.max_tokens;
    closed_loop(o.requests, o.concurrency, move |i| {
        let client = client.clone();
        let url = format!("{base}/v1/chat/completions");
        let prompts = prompts.clone();
        async move {
            let body = serde_json::json!({
                "messages": [{"role": "user", "content": prompts[i % prompts.len()].0}],
                "max_tokens": max_tokens, "temperature": 0, "ignore_eos": true,
                "stream": true, "stream_options": {"include_usage": true},
            });
            let resp = client.post(&url).json(&body).send().await?;
            if !resp.status().is_success() {
                bail!("HTTP {}: {}", resp.status(), resp.text().await?);
            }
            let mut stream = resp.bytes_stream();
            let mut buf = Vec::new();
            let mut text = String::new();
            let mut completion_tokens = None;
            while let Some(chunk) = stream.next().await {
                buf.extend_from_slice(&chunk?);
                while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
                    let event: Vec<u8> = buf.drain(..end + 2).collect();
                    let Some(data) = std::str::from_utf8(&event)?.trim().strip_prefix("data: ")
                    else {
                        continue;
                    };
                    if data == "[DONE]" {
                        continue;
                    }
                    let v: serde_json::Value = serde_json::from_str(data)?;
                    if let Some(t) = v["choices"][0]["delta"]["content"].as_str() {
                        text.push_str(t);
                    }
                    if let Some(n) = v["usage"]["completion_tokens"].as_u64() {
                        completion_tokens = Some(n as usize);
                    }
                }
            }
            completion_tokens.context("stream ended without usage")
        }
    })
    .await
}

fn start_engine(o: &Opts) -> Result<(EngineHandle, EngineInfo)> {
    let model = wring_model::load_model(&ModelSpec {
        model: std::env::var("WRING_MODEL").ok(),
        load_format: LoadFormat::Auto,
        model_shape: None,
    })?;
    let max_model_len = o.max_prompt_tokens + o.max_tokens as usize + 16;
    let opts = RunnerOptions {
        device: Device::Cpu,
        kv_cache_bytes: 1 << 30,
        block_size: 16,
        max_num_seqs: o.concurrency,
        max_model_len,
        ..RunnerOptions::default()
    };
    let cfg = EngineConfig {
        max_num_seqs: o.concurrency,
        max_model_len,
        // Rounds repeat prompts: without this, later rounds would hit the cache.
        enable_prefix_caching: false,
        ..EngineConfig::default()
    };
    Engine::start(model, opts, cfg)
}

fn main() -> Result<()> {
    let o = parse_opts()?;
    let (engine, info) = start_engine(&o)?;
    let prompts = Arc::new(prompts(&info, o.requests.min(100), o.max_prompt_tokens)?);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let state = AppState::new(
            engine.clone(),
            info.clone(),
            ServerConfig {
                stats_interval: Duration::ZERO,
                ..ServerConfig::default()
            },
        );
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(wring_server::serve(listener, state, async move {
            let _ = stop_rx.await;
        }));
        eprintln!(
            "model {} on {}; {} requests, concurrency {}, {} output tokens each, {} rounds",
            info.model_name, info.device, o.requests, o.concurrency, o.max_tokens, o.rounds
        );
        // Warm-up: touch every code path once.
        let warm = Opts {
            requests: o.concurrency,
            ..o
        };
        in_process(engine.clone(), prompts.clone(), &warm).await?;
        over_http(base.clone(), prompts.clone(), &warm).await?;

        let (mut inproc, mut http) = (Vec::new(), Vec::new());
        for round in 0..o.rounds {
            let a = in_process(engine.clone(), prompts.clone(), &o).await?;
            let b = over_http(base.clone(), prompts.clone(), &o).await?;
            eprintln!(
                "round {round}: in-process {:.2} req/s {:.1} tok/s | HTTP {:.2} req/s {:.1} tok/s",
                a.rps(),
                a.tps(),
                b.rps(),
                b.tps()
            );
            inproc.push(a);
            http.push(b);
        }
        let sum = |v: &[Measured]| Measured {
            secs: v.iter().map(|m| m.secs).sum(),
            requests: v.iter().map(|m| m.requests).sum(),
            output_tokens: v.iter().map(|m| m.output_tokens).sum(),
        };
        let (a, b) = (sum(&inproc), sum(&http));
        println!("| path | requests/s | output tok/s | wall s |");
        println!("|---|---|---|---|");
        println!(
            "| in-process engine | {:.2} | {:.1} | {:.1} |",
            a.rps(),
            a.tps(),
            a.secs
        );
        println!(
            "| HTTP (SSE, loopback) | {:.2} | {:.1} | {:.1} |",
            b.rps(),
            b.tps(),
            b.secs
        );
        println!(
            "HTTP overhead: {:.2} % of output tokens/s",
            100.0 * (1.0 - b.tps() / a.tps())
        );
        let _ = stop_tx.send(());
        server.await??;
        Ok(())
    })
}
