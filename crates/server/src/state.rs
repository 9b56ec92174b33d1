//! What every handler shares: the engine, what we know about the model, and the
//! server's own settings.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use wring_engine::{EngineHandle, EngineInfo};

use crate::structured::Grammars;
use crate::tools::ToolFormat;

/// `max_tokens` of a chat request that sends none, unless configured: long enough for
/// any ordinary answer, short enough that a forgotten limit does not hold a slot for
/// the whole context.
pub const DEFAULT_MAX_TOKENS: u32 = 2048;

/// Settings of the HTTP layer (the engine has its own `EngineConfig`).
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Names clients may use in `model`; the first is the one we report. Empty = the model's own name.
    pub served_model_names: Vec<String>,
    /// When set, `/v1/*` and `/admin/*` need `Authorization: Bearer <key>`.
    pub api_key: Option<String>,
    /// Largest request body accepted (413 beyond).
    pub max_body_bytes: usize,
    /// `Retry-After` seconds sent with 429.
    pub retry_after_s: u64,
    /// How long running requests may finish after SIGTERM/SIGINT before they are aborted.
    pub drain_timeout: Duration,
    /// Period of the throughput log line (zero = off).
    pub stats_interval: Duration,
    /// Origins allowed to call from a browser (`*` = any; empty, the default = no CORS headers).
    pub allowed_origins: Vec<String>,
    /// `max_tokens` of a chat request that sends none (0 = the rest of the context).
    pub max_tokens_default: u32,
    /// How tool calls are written (None = detected from the chat template).
    pub tool_call_format: Option<ToolFormat>,
    /// The model's own sampling settings (its generation config, else its model card: the CLI's
    /// `wring_model::ModelSampling`), for fields a request leaves out.
    pub generation_defaults: wring_model::GenerationDefaults,
    /// Accept `replay_output` (benchmark mode; the engine must allow it too).
    pub replay_outputs: bool,
    /// `dry_multiplier` of a chat request that sends none: 0 (off, OpenAI's semantics) unless the
    /// model is measured to loop without the DRY penalty (`wring serve` decides; llama.cpp's
    /// other DRY settings, the ones `wring chat` uses, come with it).
    pub dry_multiplier_default: f32,
    /// System message of a chat request that sends none (and offers no tools), in place of
    /// the one the template inserts: `wring serve` sets the one `wring chat` uses where it
    /// measured better (the default model's: empty). None = the template's own.
    pub default_system: Option<String>,
    /// Socket settings: listen backlog, connection cap, header-read and idle timeouts.
    pub listen: crate::listen::ListenConfig,
    /// The reasoning parser (`--reasoning-parser`; resolved against the model by
    /// `AppState::new`).
    pub reasoning_parser: crate::reasoning::ParserChoice,
    /// Chat-template variables of every chat request, under the request's own
    /// `chat_template_kwargs` (`--default-chat-template-kwargs`).
    pub default_chat_template_kwargs: serde_json::Map<String, serde_json::Value>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            served_model_names: Vec::new(),
            api_key: None,
            max_body_bytes: 8 << 20,
            retry_after_s: 1,
            drain_timeout: Duration::from_secs(30),
            stats_interval: Duration::from_secs(10),
            allowed_origins: Vec::new(),
            max_tokens_default: DEFAULT_MAX_TOKENS,
            generation_defaults: wring_model::GenerationDefaults::default(),
            tool_call_format: None,
            replay_outputs: false,
            dry_multiplier_default: 0.0,
            default_system: None,
            listen: crate::listen::ListenConfig::default(),
            reasoning_parser: crate::reasoning::ParserChoice::Auto,
            default_chat_template_kwargs: serde_json::Map::new(),
        }
    }
}

pub struct AppState {
    pub engine: EngineHandle,
    pub info: EngineInfo,
    pub config: ServerConfig,
    /// Unix seconds at start-up (the `created` of `/v1/models`).
    pub started_unix: u64,
    /// Structured-output grammar compiler (built on first use).
    pub grammars: Grammars,
    /// Ready, or draining after a shutdown signal (`ops.rs`: `/ready`).
    pub readiness: crate::readiness::Readiness,
    /// The reasoning parser chat responses go through (None: off).
    pub reasoning: Option<crate::reasoning::Reasoning>,
    id_prefix: u32,
    next_id: AtomicU64,
}

impl AppState {
    pub fn new(engine: EngineHandle, info: EngineInfo, mut config: ServerConfig) -> Arc<Self> {
        if config.served_model_names.is_empty() {
            config.served_model_names.push(info.model_name.clone());
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let (reasoning, why) = crate::reasoning::resolve(
            config.reasoning_parser,
            &info.tokenizer,
            info.chat_template.as_ref().map(|t| t.source()),
        );
        match (&reasoning, config.reasoning_parser) {
            (None, crate::reasoning::ParserChoice::Named(_)) => {
                tracing::warn!("reasoning parser: {why}")
            }
            _ => tracing::info!("reasoning parser: {why}"),
        }
        Arc::new(Self {
            reasoning,
            engine,
            info,
            config,
            started_unix: now.as_secs(),
            grammars: Grammars::default(),
            readiness: crate::readiness::Readiness::new(crate::readiness::Phase::Ready),
            // Distinguishes ids across restarts without a random source.
            id_prefix: now.subsec_nanos() ^ (now.as_secs() as u32).rotate_left(16),
            next_id: AtomicU64::new(1),
        })
    }

    /// The name responses report.
    pub fn model_name(&self) -> &str {
        &self.config.served_model_names[0]
    }

    pub fn knows_model(&self, name: &str) -> bool {
        self.config.served_model_names.iter().any(|n| n == name)
    }

    /// A fresh id such as `chatcmpl-5f3a09c1000000000000002a`.
    pub fn new_request_id(&self, prefix: &str) -> String {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        format!("{prefix}-{:08x}{n:016x}", self.id_prefix)
    }
}

pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
