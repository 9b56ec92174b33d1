//! `wring serve`: the OpenAI-compatible HTTP server over one engine.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use wring_server::{AppState, ServerConfig};

use super::common::{model_sampling_defaults, start_engine, CommonArgs};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// Name(s) clients use in `model` (the first is reported); default: the model's own name.
    #[arg(long, num_args = 1..)]
    pub served_model_name: Vec<String>,
    /// Require `Authorization: Bearer <key>` on /v1/*, /tokenize, /detokenize and
    /// /admin/* (compared in constant time). Also read from $WRING_API_KEY, which
    /// keeps the key out of the process list.
    #[arg(long, env = "WRING_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Origins browsers may call the API from (CORS; preflights are answered):
    /// `*` for any, or scheme://host[:port] values; `none` sends no CORS headers.
    #[arg(long, num_args = 1.., default_value = "*")]
    pub allowed_origins: Vec<String>,
    /// `max_tokens` of a chat request that sends none (0 = the rest of the context).
    /// Legacy completions keep OpenAI's default of 16.
    #[arg(long, default_value_t = wring_server::state::DEFAULT_MAX_TOKENS)]
    pub max_tokens_default: u32,
    /// How the model writes tool calls: auto (from the chat template: Hermes
    /// `<tool_call>` or Llama 3.1 JSON), hermes, llama3_json.
    #[arg(long, default_value = "auto")]
    pub tool_call_parser: String,
    /// Largest request body in bytes (413 beyond).
    #[arg(long, default_value_t = 8 << 20)]
    pub max_body_bytes: usize,
    /// Seconds running requests get to finish after SIGTERM/SIGINT.
    #[arg(long, default_value_t = 30.0)]
    pub drain_timeout: f64,
    /// Seconds between throughput log lines (0 = off).
    #[arg(long, default_value_t = 10.0)]
    pub stats_interval: f64,
    /// Benchmark mode: requests may carry `replay_output` (a recorded output, as text or
    /// token ids), which the server emits instead of the model's own tokens while every
    /// step still runs the whole forward pass; drafts are accepted as far as they match
    /// the recording. Measures what speculation buys on a model whose own outputs cannot
    /// be had (dummy weights) with real outputs. Off: such requests get a 400.
    #[arg(long)]
    pub replay_outputs: bool,
    /// Publish KV-cache events (BlockStored / BlockRemoved / AllBlocksCleared) on this ZMQ
    /// endpoint, in vLLM's wire format, for prefix-cache-aware routers (llm-d, Dynamo):
    /// `tcp://*:5557` binds, `tcp://HOST:PORT` connects to a subscriber that binds.
    #[arg(long, value_name = "ENDPOINT")]
    pub kv_events_endpoint: Option<String>,
    /// Topic frame of every KV-event message (llm-d reads `kv@<pod>@<model>`).
    #[arg(long, default_value = "")]
    pub kv_events_topic: String,
    /// Seed of the block-hash chain (the router's `hashSeed`): block hashes are
    /// FNV-64a over canonical CBOR of [parent, tokens, null], the first block's parent
    /// derived from this seed and the served model name, as llm-d's indexer computes them.
    #[arg(long, default_value = "")]
    pub kv_events_hash_seed: String,
}

/// KV events the engine may report before the publisher sends them; more are dropped
/// (counted and logged) rather than stall a step.
const KV_EVENT_QUEUE: usize = 1 << 16;

pub fn run(mut args: Args) -> anyhow::Result<()> {
    let addr: SocketAddr = format!("{}:{}", args.host, args.port)
        .parse()
        .with_context(|| format!("--host {:?} --port {}", args.host, args.port))?;
    let allowed_origins: Vec<String> = if args.allowed_origins.iter().any(|o| o == "none") {
        Vec::new()
    } else {
        args.allowed_origins.clone()
    };
    wring_server::cors::check_origins(&allowed_origins).context("--allowed-origins")?;
    let tool_call_format = wring_server::tools::ToolFormat::parse(&args.tool_call_parser)
        .map_err(anyhow::Error::msg)
        .context("--tool-call-parser")?;
    let mut config = ServerConfig {
        served_model_names: args.served_model_name.clone(),
        api_key: args.api_key.clone().filter(|k| !k.is_empty()),
        allowed_origins,
        max_tokens_default: args.max_tokens_default,
        tool_call_format,
        max_body_bytes: args.max_body_bytes,
        drain_timeout: seconds("--drain-timeout", args.drain_timeout)?,
        stats_interval: seconds("--stats-interval", args.stats_interval)?,
        replay_outputs: args.replay_outputs,
        ..ServerConfig::default()
    };
    args.common.engine.replay_outputs = args.replay_outputs;
    if args.replay_outputs {
        tracing::warn!(
            "--replay-outputs: requests with replay_output emit their recording, not the model's tokens (benchmark mode)"
        );
    }
    let model_sampling = model_sampling_defaults(&args.common.model);
    config.generation_defaults = model_sampling.defaults;
    if model_sampling.defaults.is_empty() {
        tracing::info!(
            "sampling fields a request leaves out: OpenAI's defaults (temperature 1, top_p 1); the model states none (no generation config, no known model card)"
        );
    } else {
        tracing::info!(
            "sampling fields a request leaves out come from the model's {}: {:?}; the rest OpenAI's defaults",
            model_sampling.source.label(),
            model_sampling.defaults
        );
    }
    args.common.engine.warm_up = Some(warm_up(&args));
    // The hash root names the model routers see (the first served name; the engine falls
    // back to the model's own name).
    let kv = &mut args.common.engine.kv_events;
    kv.hash_seed = args.kv_events_hash_seed.clone();
    kv.model_name = args.served_model_name.first().cloned().unwrap_or_default();
    let kv_publisher = match &args.kv_events_endpoint {
        Some(endpoint) => {
            wring_server::kv_publisher::check_endpoint(endpoint).context("--kv-events-endpoint")?;
            let (sink, source) = wring_engine::kv_event_channel(KV_EVENT_QUEUE);
            kv.sink = Some(sink);
            let medium = if args.common.model.device.starts_with("cuda") {
                "GPU"
            } else {
                "CPU"
            };
            Some((
                wring_server::kv_publisher::KvPublisherConfig {
                    endpoint: endpoint.clone(),
                    topic: args.kv_events_topic.clone(),
                    block_size: args.common.model.block_size,
                    medium: medium.into(),
                },
                source,
            ))
        }
        None => None,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("wring-http")
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async move {
        // The port answers from the start (503 `loading` on /health and /ready), so an
        // orchestrator can tell a loading server from a dead one.
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding {addr}"))?;
        let listener = listener.into_std()?;
        let (loaded_tx, loaded_rx) = tokio::sync::oneshot::channel::<()>();
        let loading = tokio::spawn(wring_server::ops::serve_while_loading(
            tokio::net::TcpListener::from_std(listener.try_clone()?)?,
            loaded_rx,
        ));
        tracing::info!(
            "listening on http://{}: not ready until the model is loaded",
            listener.local_addr()?
        );
        if let Some((cfg, source)) = kv_publisher {
            wring_server::kv_publisher::spawn(cfg, source)?;
        }
        let common = args.common.clone();
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("wring-load".into())
            .spawn(move || {
                let _ = started_tx.send(start_engine(&common));
            })
            .context("starting the model-loading thread")?;
        let started = started_rx
            .await
            .context("the model-loading thread ended without an answer")?;
        let _ = loaded_tx.send(());
        let _ = loading.await;
        let (engine, info) = started?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let state = AppState::new(engine, info, config);
        tracing::info!(
            "serving {:?} on http://{}{}",
            state.config.served_model_names,
            listener.local_addr()?,
            if state.config.api_key.is_some() {
                " (API key required)"
            } else {
                ""
            }
        );
        wring_server::serve(listener, state, shutdown_signal()).await
    })
}

fn seconds(flag: &str, s: f64) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(s).with_context(|| format!("{flag} {s}: expected seconds ≥ 0"))
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!("cannot listen for Ctrl-C: {e}");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!("cannot listen for SIGTERM: {e}");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => tracing::info!("SIGINT received"),
        _ = term => tracing::info!("SIGTERM received"),
    }
}

/// A server pays its cold step shapes before its first request, not during it, unless
/// told not to (`--warm-up=false`, WRING_WARM_UP=0).
fn warm_up(args: &Args) -> bool {
    args.common.engine.warm_up.unwrap_or(true)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    #[test]
    fn a_server_warms_up_unless_told_not_to() {
        let parse = |a: &[&str]| Cli::try_parse_from(a).unwrap().args;
        assert!(super::warm_up(&parse(&["serve"])));
        assert!(super::warm_up(&parse(&["serve", "--warm-up"])));
        assert!(!super::warm_up(&parse(&["serve", "--warm-up=false"])));
        assert!(!super::warm_up(&parse(&[
            "serve",
            "--warm-up",
            "false",
            "--port",
            "9"
        ])));
    }

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: super::Args,
    }

    #[test]
    fn api_key_and_serving_defaults() {
        // The only test in this binary that touches WRING_API_KEY.
        std::env::set_var("WRING_API_KEY", "from-env");
        let cli = Cli::try_parse_from(["serve"]).unwrap();
        assert_eq!(cli.args.api_key.as_deref(), Some("from-env"));
        let cli = Cli::try_parse_from(["serve", "--api-key", "flag"]).unwrap();
        assert_eq!(cli.args.api_key.as_deref(), Some("flag"), "the flag wins");
        std::env::remove_var("WRING_API_KEY");
        let cli = Cli::try_parse_from(["serve"]).unwrap();
        assert_eq!(cli.args.api_key, None);
        assert_eq!(cli.args.allowed_origins, vec!["*".to_string()]);
        assert_eq!(cli.args.max_tokens_default, 2048);
        let cli = Cli::try_parse_from([
            "serve",
            "--allowed-origins",
            "http://a.test",
            "https://b.test:8443",
        ])
        .unwrap();
        assert_eq!(cli.args.allowed_origins.len(), 2);
    }
}
