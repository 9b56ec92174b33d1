//! `wring serve`: the OpenAI-compatible HTTP server over one engine.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use wring_server::{AppState, ServerConfig};

use super::common::{model_sampling_defaults, CommonArgs};
use super::launch::LaunchPlan;

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
    /// `*` for any, or scheme://host[:port] values. Default: none (no CORS headers, so
    /// browser pages on other origins cannot read the API's answers).
    #[arg(long, num_args = 1.., default_value = "none")]
    pub allowed_origins: Vec<String>,
    /// `dry_multiplier` of a chat request that sends none: `auto` turns the DRY loop penalty on
    /// (0.8, with llama.cpp's base 1.75, allowed length 2, the whole context: what `wring
    /// chat` uses) for a model measured to loop without it (the default model, BENCHMARKS.md
    /// "Server defaults of the default model") and leaves it off for others; or a number
    /// (0 = off for every request that does not ask). A request's own `dry_multiplier` wins.
    #[arg(long, default_value = "auto")]
    pub default_dry_multiplier: String,
    /// Pending connections the kernel queues before they are accepted (Linux caps it at
    /// net.core.somaxconn).
    #[arg(long, default_value_t = wring_server::listen::DEFAULT_BACKLOG)]
    pub backlog: u32,
    /// Open connections served at once; one more is answered 429 with Retry-After and closed.
    #[arg(long, default_value_t = wring_server::listen::DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// Seconds from a request's first byte to the end of its headers before the connection is
    /// closed (0 = no limit).
    #[arg(long, default_value_t = wring_server::listen::DEFAULT_HEADER_READ_TIMEOUT.as_secs_f64())]
    pub header_read_timeout: f64,
    /// Seconds a keep-alive connection may stay open with no request in flight (0 = no limit).
    #[arg(long, default_value_t = wring_server::listen::DEFAULT_IDLE_TIMEOUT.as_secs_f64())]
    pub idle_timeout: f64,
    /// `max_tokens` of a chat request that sends none (0 = the rest of the context).
    /// Legacy completions keep OpenAI's default of 16.
    #[arg(long, default_value_t = wring_server::state::DEFAULT_MAX_TOKENS)]
    pub max_tokens_default: u32,
    /// How the model writes tool calls: auto (from the chat template: Hermes
    /// `<tool_call>` or Llama 3.1 JSON), hermes, llama3_json.
    #[arg(long, default_value = "auto")]
    pub tool_call_parser: String,
    /// How a reasoning model's thinking (`<think>` … `</think>`) is split off chat
    /// responses into `reasoning_content`, as vLLM's parsers do: qwen3, deepseek_r1, none,
    /// or auto: on when the chat template writes `<think>` or the tokenizer has
    /// `<think>`/`</think>` tokens (qwen3 when the template has `enable_thinking`, else
    /// deepseek_r1); the choice is logged at start-up and shown in /v1/models.
    #[arg(long, default_value = "auto")]
    pub reasoning_parser: String,
    /// Chat-template variables of every chat request, as a JSON object (e.g.
    /// '{"enable_thinking": false}'); a request's own `chat_template_kwargs` win key by key.
    #[arg(long, value_name = "JSON")]
    pub default_chat_template_kwargs: Option<String>,
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
    let reasoning_parser = wring_server::reasoning::ParserChoice::parse(&args.reasoning_parser)
        .map_err(anyhow::Error::msg)
        .context("--reasoning-parser")?;
    let default_chat_template_kwargs =
        template_kwargs_flag(args.default_chat_template_kwargs.as_deref())
            .context("--default-chat-template-kwargs")?;
    if !default_chat_template_kwargs.is_empty() {
        tracing::info!(
            "chat-template variables of chat requests (a request's chat_template_kwargs win): {}",
            serde_json::Value::Object(default_chat_template_kwargs.clone())
        );
    }
    let mut config = ServerConfig {
        reasoning_parser,
        default_chat_template_kwargs,
        served_model_names: args.served_model_name.clone(),
        api_key: args.api_key.clone().filter(|k| !k.is_empty()),
        allowed_origins,
        max_tokens_default: args.max_tokens_default,
        tool_call_format,
        max_body_bytes: args.max_body_bytes,
        drain_timeout: seconds("--drain-timeout", args.drain_timeout)?,
        stats_interval: seconds("--stats-interval", args.stats_interval)?,
        replay_outputs: args.replay_outputs,
        listen: listen_config(&args)?,
        ..ServerConfig::default()
    };
    args.common.engine.replay_outputs = args.replay_outputs;
    if args.replay_outputs {
        tracing::warn!(
            "--replay-outputs: requests with replay_output emit their recording, not the model's tokens (benchmark mode)"
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
    let plan = LaunchPlan::resolve(&args.common)?;
    let model_sampling = model_sampling_defaults(plan.checkpoint());
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
    let (dry, why) = dry_default(&args.default_dry_multiplier, plan.checkpoint())?;
    config.dry_multiplier_default = dry;
    if dry > 0.0
        && args.default_dry_multiplier == "auto"
        && config.generation_defaults.temperature.is_some()
    {
        // Through the API (a 2,048-token cap, not the chat command's 256) the card's
        // temperature 0.2 with DRY still let 2 of 46 everyday answers ramble to the cap;
        // greedy with DRY answered all 8 questions right, the longest in 308 tokens
        // (BENCHMARKS.md, "Server defaults of the default model").
        config.generation_defaults.temperature = Some(0.0);
        tracing::info!(
            "temperature of requests that send none: 0 (greedy), not the model card's: with the loop penalty it answers everyday questions right and ends them (BENCHMARKS.md); a request's temperature wins"
        );
    }
    if dry > 0.0 {
        let engine = wring_engine::api::SamplingParams::default();
        tracing::info!(
            "loop penalty for chat requests that send no dry_multiplier: DRY {dry} (base {}, allowed length {}, whole context; {why}); a request's dry_multiplier overrides it, 0 turns it off",
            engine.dry_base,
            engine.dry_allowed_length
        );
    } else {
        tracing::info!("loop penalty: off unless a request sends dry_multiplier ({why})");
    }
    config.default_system = system_default(plan.checkpoint());
    match &config.default_system {
        Some(s) => tracing::info!(
            "system message of chat requests that send none (and no tools): {s:?}, what `wring chat` uses for this model (measured better than the template's own)"
        ),
        None => tracing::info!("system message of chat requests that send none: the template's own"),
    }
    if let Some(limit) = wring_server::listen::raise_open_files_limit() {
        if (limit as usize) < config.listen.max_connections + 64 {
            tracing::warn!(
                "--max-connections {} is near this process's open-file limit ({limit}); connections past the limit wait in the backlog",
                config.listen.max_connections
            );
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("wring-http")
        .build()
        .context("starting the async runtime")?;
    let backlog = args.backlog;
    runtime.block_on(async move {
        // The port answers from the start (503 `loading` on /health and /ready), so an
        // orchestrator can tell a loading server from a dead one.
        let listener =
            wring_server::listen::bind(addr, backlog).with_context(|| format!("binding {addr}"))?;
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
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("wring-load".into())
            .spawn(move || {
                let _ = started_tx.send(plan.start());
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

/// `--default-chat-template-kwargs`: a JSON object of template variables, checked as a
/// request's `chat_template_kwargs` are.
fn template_kwargs_flag(
    flag: Option<&str>,
) -> anyhow::Result<serde_json::Map<String, serde_json::Value>> {
    let Some(text) = flag else {
        return Ok(serde_json::Map::new());
    };
    let serde_json::Value::Object(map) =
        serde_json::from_str(text).map_err(|e| anyhow::anyhow!("not JSON: {e}"))?
    else {
        anyhow::bail!(
            "expected a JSON object of template variables, e.g. '{{\"enable_thinking\": false}}'"
        );
    };
    wring_server::reasoning::check_template_kwargs(&map, "--default-chat-template-kwargs")
        .map_err(|(_, msg)| anyhow::anyhow!(msg))?;
    Ok(map)
}

/// Models whose answers loop without the DRY penalty under their own sampling defaults, by
/// Hub id: SmolLM2-135M-Instruct at its card's temperature 0.2 looped on 6 of 80 everyday
/// questions with DRY off and 0 with DRY 0.8 through `wring chat`'s settings (BENCHMARKS.md,
/// "Chat defaults of the default model"), and through the API (BENCHMARKS.md, "Server
/// defaults of the default model").
const NEEDS_LOOP_PENALTY: &[&str] = &["HuggingFaceTB/SmolLM2-135M-Instruct"];

/// The server's `dry_multiplier` for requests that send none, and why (`checkpoint`: the
/// launch plan's; None for dummy weights).
fn dry_default(flag: &str, checkpoint: Option<&Path>) -> anyhow::Result<(f32, String)> {
    if flag != "auto" {
        let v: f32 = flag
            .parse()
            .ok()
            .filter(|v: &f32| *v >= 0.0 && v.is_finite())
            .with_context(|| {
                format!("--default-dry-multiplier {flag:?}: expected auto or a number ≥ 0")
            })?;
        return Ok((v, "--default-dry-multiplier".into()));
    }
    let known = checkpoint.and_then(wring_model::catalog::known_model);
    Ok(match known {
        Some(m) if NEEDS_LOOP_PENALTY.contains(&m.hub_id) => (
            super::common::CHAT_DRY_MULTIPLIER,
            format!("{} loops without it, BENCHMARKS.md", m.hub_id),
        ),
        _ => (
            0.0,
            "no measurement says this model needs it; --default-dry-multiplier sets one".into(),
        ),
    })
}

/// The system message `wring chat` sends for this checkpoint when none is given, where one
/// measured better than the template's (`wring_model::cli_system_default`); none for dummy
/// weights.
fn system_default(checkpoint: Option<&Path>) -> Option<String> {
    checkpoint
        .and_then(wring_model::cli_system_default)
        .map(str::to_string)
}

/// The socket settings the flags ask for.
fn listen_config(args: &Args) -> anyhow::Result<wring_server::listen::ListenConfig> {
    if args.max_connections == 0 {
        anyhow::bail!("--max-connections must be at least 1");
    }
    let optional = |flag: &str, s: f64| -> anyhow::Result<Option<Duration>> {
        Ok(Some(seconds(flag, s)?).filter(|d| !d.is_zero()))
    };
    Ok(wring_server::listen::ListenConfig {
        backlog: args.backlog,
        max_connections: args.max_connections,
        header_read_timeout: optional("--header-read-timeout", args.header_read_timeout)?,
        idle_timeout: optional("--idle-timeout", args.idle_timeout)?,
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
    use std::time::Duration;

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

    #[test]
    fn the_loop_penalty_default_follows_the_model_and_the_flag() {
        // Known models are recognised by name; the files need only exist.
        let dir = std::env::temp_dir().join(format!("wring-dry-default-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let default = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
        let other = dir.join("SmolLM2-360M-Instruct.Q4_1.gguf");
        std::fs::write(&default, b"").unwrap();
        std::fs::write(&other, b"").unwrap();
        let (v, why) = super::dry_default("auto", Some(default.as_path())).unwrap();
        assert_eq!(v, 0.8, "{why}");
        let (v, _) = super::dry_default("auto", Some(other.as_path())).unwrap();
        assert_eq!(v, 0.0, "not measured: OpenAI's semantics");
        let (v, _) = super::dry_default("0", Some(default.as_path())).unwrap();
        assert_eq!(v, 0.0);
        let (v, _) = super::dry_default("1.2", Some(other.as_path())).unwrap();
        assert_eq!(v, 1.2);
        assert!(super::dry_default("-1", Some(other.as_path())).is_err());
        assert!(super::dry_default("lots", Some(other.as_path())).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn default_chat_template_kwargs_must_be_a_checked_object() {
        assert!(super::template_kwargs_flag(None).unwrap().is_empty());
        let m =
            super::template_kwargs_flag(Some(r#"{"enable_thinking": false, "x": [1]}"#)).unwrap();
        assert_eq!(m["enable_thinking"], serde_json::json!(false));
        for bad in [
            "enable_thinking=false",
            "[1]",
            r#"{"enable_thinking": "no"}"#,
            r#"{"messages": []}"#,
        ] {
            assert!(super::template_kwargs_flag(Some(bad)).is_err(), "{bad}");
        }
        let cli = Cli::try_parse_from(["serve"]).unwrap();
        assert_eq!(cli.args.reasoning_parser, "auto");
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
        assert_eq!(
            cli.args.allowed_origins,
            vec!["none".to_string()],
            "no CORS unless the operator asks"
        );
        let listen = super::listen_config(&cli.args).unwrap();
        assert_eq!(listen.backlog, 2048);
        assert_eq!(listen.max_connections, 2048);
        assert_eq!(listen.header_read_timeout, Some(Duration::from_secs(10)));
        assert_eq!(listen.idle_timeout, Some(Duration::from_secs(5)));
        let cli = Cli::try_parse_from([
            "serve",
            "--backlog",
            "4096",
            "--max-connections",
            "100",
            "--header-read-timeout",
            "0",
            "--idle-timeout",
            "0.5",
        ])
        .unwrap();
        let listen = super::listen_config(&cli.args).unwrap();
        assert_eq!((listen.backlog, listen.max_connections), (4096, 100));
        assert_eq!(listen.header_read_timeout, None, "0 = no limit");
        assert_eq!(listen.idle_timeout, Some(Duration::from_millis(500)));
        let cli = Cli::try_parse_from(["serve", "--max-connections", "0"]).unwrap();
        assert!(super::listen_config(&cli.args).is_err());
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
