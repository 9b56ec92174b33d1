//! One closed-loop run: exactly `concurrency` streaming chat requests in flight until the prompt
//! list is exhausted, each timed per token from the SSE stream.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use futures::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};

use crate::corpus::Prompt;
use crate::sse::{SseEvent, SseParser};

/// How requests are made (everything except the prompts).
#[derive(Debug, Clone)]
pub struct RequestConfig {
    /// Server root, e.g. `http://127.0.0.1:8000` (a trailing `/v1` is accepted).
    pub base_url: String,
    pub model: String,
    pub api_key: Option<String>,
    pub max_tokens: u32,
    pub temperature: f32,
    /// Send `ignore_eos` (vLLM and llama.cpp extension) so every request runs to max_tokens.
    pub ignore_eos: bool,
    /// Ask for per-chunk usage (`stream_options.continuous_usage_stats`, a vLLM extension) so
    /// ITL is normalised with exact per-chunk token counts.
    pub continuous_usage: bool,
    pub request_timeout: Duration,
    /// wring's per-request K policy (`k_policy`), sent with every request when set.
    pub k_policy: Option<String>,
}

impl RequestConfig {
    /// The server root without a trailing `/` or `/v1`.
    pub fn root(&self) -> String {
        let trimmed = self.base_url.trim_end_matches('/');
        trimmed.strip_suffix("/v1").unwrap_or(trimmed).to_string()
    }
}

/// What one request measured. Times are seconds.
#[derive(Debug, Clone, Default)]
pub struct RequestOutcome {
    pub id: String,
    pub error: Option<String>,
    pub prompt_tokens: u64,
    pub output_tokens: u64,
    /// Time to the first chunk that carried output.
    pub ttft: f64,
    pub e2e: f64,
    /// Inter-token latencies, one per generated token after the first (token-normalised: a gap
    /// before a chunk that carries n tokens counts as n gaps of gap/n).
    pub itl: Vec<f64>,
    /// The longest wall-clock gap between two content chunks of the stream (not normalised:
    /// a stall is a stall however many tokens the next chunk carries); None under two chunks.
    pub max_gap: Option<f64>,
    /// The server sent no `usage`; token counts were estimated from chunks.
    pub usage_missing: bool,
}

impl RequestOutcome {
    pub fn ok(&self) -> bool {
        self.error.is_none()
    }
}

/// A content-bearing chunk: when it arrived and, if the server said, how many tokens it carried.
#[derive(Debug, Clone, Copy)]
struct Arrival {
    at: f64,
    tokens: Option<u64>,
}

/// Runs the prompts closed-loop at `concurrency` and returns the outcomes plus the wall time from
/// the first request to the last response.
pub async fn run_closed_loop(
    client: &reqwest::Client,
    config: &RequestConfig,
    prompts: &[(Prompt, String)],
    concurrency: usize,
    progress: Option<ProgressBar>,
) -> (Vec<RequestOutcome>, Duration) {
    let next = Arc::new(AtomicUsize::new(0));
    let prompts: Arc<Vec<(Prompt, String)>> = Arc::new(prompts.to_vec());
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..concurrency.max(1).min(prompts.len().max(1)) {
        let (next, prompts, client, config, progress) = (
            next.clone(),
            prompts.clone(),
            client.clone(),
            config.clone(),
            progress.clone(),
        );
        workers.push(tokio::spawn(async move {
            let mut outcomes = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((prompt, workload)) = prompts.get(i) else {
                    break;
                };
                let outcome = send_one(&client, &config, prompt, workload).await;
                if let Some(bar) = &progress {
                    bar.inc(1);
                }
                outcomes.push((i, outcome));
            }
            outcomes
        }));
    }
    let mut all = Vec::with_capacity(prompts.len());
    for worker in workers {
        match worker.await {
            Ok(outcomes) => all.extend(outcomes),
            Err(e) => all.push((
                usize::MAX,
                failed("worker", format!("worker task failed: {e}")),
            )),
        }
    }
    let wall = started.elapsed();
    all.sort_by_key(|(i, _)| *i);
    (all.into_iter().map(|(_, o)| o).collect(), wall)
}

/// A progress bar for `n` requests (drawn on stderr only when it is a terminal).
pub fn progress_bar(n: usize, label: &str) -> ProgressBar {
    let bar = ProgressBar::new(n as u64);
    bar.set_style(
        ProgressStyle::with_template(
            "{prefix:>12} [{bar:30}] {pos}/{len} requests {elapsed_precise} eta {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar.set_prefix(label.to_string());
    bar
}

fn failed(id: &str, error: String) -> RequestOutcome {
    RequestOutcome {
        id: id.to_string(),
        error: Some(error),
        ..Default::default()
    }
}

/// The chat request body for one prompt (its first user turn only).
pub fn request_body(config: &RequestConfig, prompt: &Prompt) -> Value {
    let mut stream_options = json!({ "include_usage": true });
    if config.continuous_usage {
        stream_options["continuous_usage_stats"] = json!(true);
    }
    let mut body = json!({
        "model": config.model,
        "messages": [{ "role": "user", "content": prompt.text }],
        "max_tokens": config.max_tokens,
        "temperature": config.temperature,
        "stream": true,
        "stream_options": stream_options,
    });
    if config.ignore_eos {
        body["ignore_eos"] = json!(true);
    }
    if let Some(policy) = &config.k_policy {
        body["k_policy"] = json!(policy);
    }
    if let Some((_, recording)) = &prompt.replay {
        body["replay_output"] = recording.to_json();
    }
    body
}

async fn send_one(
    client: &reqwest::Client,
    config: &RequestConfig,
    prompt: &Prompt,
    workload: &str,
) -> RequestOutcome {
    let started = Instant::now();
    let body = request_body(config, prompt);
    let build = || {
        let request = client
            .post(format!("{}/v1/chat/completions", config.root()))
            .header("X-Wring-Workload", workload)
            // The prompt's id names the request in the server's logs and `--trace-out`,
            // which is how `--replay own:FILE` finds a prompt's recorded output.
            .header("X-Request-Id", &prompt.id)
            .timeout(config.request_timeout)
            .json(&body);
        match &config.api_key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    };
    let response = match build().send().await {
        Ok(r) => r,
        // Sending failed before any response: typically a pooled keep-alive connection the
        // server had already closed (llama-server does this under load), so the server never
        // saw the request. Retry once; latencies still count from the first attempt.
        Err(e) if e.is_request() && !e.is_timeout() => match build().send().await {
            Ok(r) => {
                tracing::debug!("request {} resent after: {e}", prompt.id);
                r
            }
            Err(e2) => {
                return failed(
                    &prompt.id,
                    format!("request failed twice: {e2} (first attempt: {e})"),
                )
            }
        },
        Err(e) => return failed(&prompt.id, format!("request failed: {e}")),
    };
    let status = response.status();
    if !status.is_success() {
        let body = response.text().await.unwrap_or_default();
        let snippet: String = body.chars().take(200).collect();
        return failed(&prompt.id, format!("HTTP {status}: {snippet}"));
    }
    let mut parser = SseParser::new();
    let mut stream = response.bytes_stream();
    let mut tracker = StreamTracker::default();
    let mut done = false;
    'read: while let Some(chunk) = stream.next().await {
        let bytes = match chunk {
            Ok(b) => b,
            Err(e) => {
                return failed(
                    &prompt.id,
                    format!("stream broke after {} chunks: {e}", tracker.arrivals.len()),
                )
            }
        };
        let at = started.elapsed().as_secs_f64();
        for event in parser.push(&bytes) {
            match event {
                SseEvent::Done => {
                    done = true;
                    break 'read;
                }
                SseEvent::Data(data) => {
                    if let Err(e) = tracker.on_data(&data, at) {
                        return failed(&prompt.id, e);
                    }
                }
            }
        }
    }
    if let Some(SseEvent::Data(data)) = parser.finish() {
        let at = started.elapsed().as_secs_f64();
        if let Err(e) = tracker.on_data(&data, at) {
            return failed(&prompt.id, e);
        }
    }
    let e2e = started.elapsed().as_secs_f64();
    if !done && tracker.finish_reason.is_none() {
        return failed(
            &prompt.id,
            "stream ended without [DONE] or a finish_reason".into(),
        );
    }
    tracker.into_outcome(&prompt.id, e2e)
}

/// Accumulates what the SSE stream says about one request.
#[derive(Debug, Default)]
struct StreamTracker {
    arrivals: Vec<Arrival>,
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    /// Last cumulative completion_tokens seen in a chunk's usage (continuous usage stats).
    last_cumulative: u64,
    finish_reason: Option<String>,
}

impl StreamTracker {
    fn on_data(&mut self, data: &str, at: f64) -> std::result::Result<(), String> {
        let value: Value = serde_json::from_str(data)
            .map_err(|e| format!("bad SSE JSON ({e}): {}", truncate(data, 120)))?;
        if let Some(error) = value.get("error") {
            return Err(format!(
                "server error in stream: {}",
                truncate(&error.to_string(), 200)
            ));
        }
        let usage = value.get("usage").filter(|u| !u.is_null());
        let cumulative = usage.and_then(|u| u["completion_tokens"].as_u64());
        if let Some(u) = usage {
            self.prompt_tokens = u["prompt_tokens"].as_u64().or(self.prompt_tokens);
            self.completion_tokens = cumulative.or(self.completion_tokens);
        }
        let Some(choice) = value["choices"].as_array().and_then(|c| c.first()) else {
            return Ok(()); // the final usage-only chunk
        };
        if let Some(reason) = choice["finish_reason"].as_str() {
            self.finish_reason = Some(reason.to_string());
        }
        let delta = &choice["delta"];
        let has_output = ["content", "reasoning_content", "reasoning"]
            .iter()
            .any(|k| delta[*k].as_str().is_some_and(|s| !s.is_empty()));
        if has_output {
            let tokens = cumulative.map(|c| c.saturating_sub(self.last_cumulative));
            self.arrivals.push(Arrival { at, tokens });
        }
        if let Some(c) = cumulative {
            self.last_cumulative = c;
        }
        Ok(())
    }

    fn into_outcome(self, id: &str, e2e: f64) -> RequestOutcome {
        let usage_missing = self.completion_tokens.is_none();
        let chunks = self.arrivals.len() as u64;
        let output_tokens = self.completion_tokens.unwrap_or(chunks);
        let ttft = self.arrivals.first().map_or(e2e, |a| a.at);
        RequestOutcome {
            id: id.to_string(),
            error: None,
            prompt_tokens: self.prompt_tokens.unwrap_or(0),
            output_tokens,
            ttft,
            e2e,
            itl: token_normalised_itl(&self.arrivals, output_tokens),
            max_gap: self
                .arrivals
                .windows(2)
                .map(|p| p[1].at - p[0].at)
                .max_by(f64::total_cmp),
            usage_missing,
        }
    }
}

/// Splits each gap between content chunks over the tokens of the later chunk. With exact
/// per-chunk counts every token gets its own sample; without them each chunk is assumed to
/// carry the average `output_tokens / chunks`, giving one sample per gap of gap / average.
fn token_normalised_itl(arrivals: &[Arrival], output_tokens: u64) -> Vec<f64> {
    if arrivals.len() < 2 {
        return Vec::new();
    }
    let exact = arrivals.iter().all(|a| a.tokens.is_some());
    let average = (output_tokens as f64 / arrivals.len() as f64).max(1.0);
    let mut itl = Vec::new();
    for pair in arrivals.windows(2) {
        let gap = pair[1].at - pair[0].at;
        match pair[1].tokens {
            Some(n) if exact && n > 0 => {
                itl.extend(std::iter::repeat_n(gap / n as f64, n as usize))
            }
            Some(_) if exact => {}
            _ => itl.push(gap / average),
        }
    }
    itl
}

fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// Shared HTTP client sized for `concurrency` keep-alive connections.
pub fn http_client(concurrency: usize) -> Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency.max(1))
        .connect_timeout(Duration::from_secs(10))
        .build()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(content: &str, usage: Option<u64>) -> String {
        let mut v =
            json!({"choices":[{"index":0,"delta":{"content":content},"finish_reason":null}]});
        if let Some(c) = usage {
            v["usage"] = json!({"prompt_tokens": 7, "completion_tokens": c});
        }
        v.to_string()
    }

    #[test]
    fn exact_per_chunk_tokens_give_one_itl_per_token() {
        let mut t = StreamTracker::default();
        t.on_data(&chunk("a", Some(1)), 0.10).unwrap();
        t.on_data(&chunk("bcd", Some(4)), 0.40).unwrap(); // 3 tokens in 0.3 s
        t.on_data(&chunk("e", Some(5)), 0.50).unwrap();
        let o = t.into_outcome("x", 0.6);
        assert_eq!(o.output_tokens, 5);
        assert_eq!(o.prompt_tokens, 7);
        assert!((o.ttft - 0.10).abs() < 1e-12);
        let expected = [0.1, 0.1, 0.1, 0.1];
        assert_eq!(o.itl.len(), 4);
        for (got, want) in o.itl.iter().zip(expected) {
            assert!((got - want).abs() < 1e-9, "{:?}", o.itl);
        }
    }

    #[test]
    fn final_usage_only_normalises_by_average_chunk_size() {
        let mut t = StreamTracker::default();
        t.on_data(&chunk("a", None), 0.1).unwrap();
        t.on_data(&chunk("b", None), 0.3).unwrap();
        t.on_data(
            &json!({"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}).to_string(),
            0.31,
        )
        .unwrap();
        t.on_data(
            &json!({"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}).to_string(),
            0.32,
        )
        .unwrap();
        let o = t.into_outcome("x", 0.32);
        assert_eq!(o.output_tokens, 4);
        assert!(!o.usage_missing);
        assert_eq!(o.itl.len(), 1);
        assert!((o.itl[0] - 0.1).abs() < 1e-9); // 0.2 s gap / 2 tokens per chunk
    }

    #[test]
    fn missing_usage_counts_chunks_and_says_so() {
        let mut t = StreamTracker::default();
        t.on_data(&chunk("a", None), 0.1).unwrap();
        t.on_data(&chunk("", None), 0.2).unwrap(); // role-only / empty delta: not a token
        t.on_data(&chunk("b", None), 0.3).unwrap();
        let o = t.into_outcome("x", 0.4);
        assert!(o.usage_missing);
        assert_eq!(o.output_tokens, 2);
    }

    #[test]
    fn error_event_fails_the_request() {
        let mut t = StreamTracker::default();
        assert!(t.on_data(r#"{"error":{"message":"boom"}}"#, 0.1).is_err());
        assert!(t.on_data("not json", 0.1).is_err());
    }

    #[test]
    fn root_strips_v1_and_slash() {
        let mut c = RequestConfig {
            base_url: "http://h:1/v1/".into(),
            model: "m".into(),
            api_key: None,
            max_tokens: 8,
            temperature: 0.0,
            ignore_eos: false,
            continuous_usage: false,
            request_timeout: Duration::from_secs(1),
            k_policy: None,
        };
        assert_eq!(c.root(), "http://h:1");
        c.base_url = "http://h:1".into();
        assert_eq!(c.root(), "http://h:1");
        let body = request_body(
            &c,
            &Prompt {
                id: "a".into(),
                source: crate::corpus::Corpus::Mbpp,
                text: "hi".into(),
                reference: Some("ok".into()),
                replay: None,
            },
        );
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert_eq!(body["messages"][0]["content"], "hi");
        assert!(body.get("ignore_eos").is_none());
        assert!(body.get("replay_output").is_none(), "only with --replay");
        let replayed = Prompt {
            id: "a".into(),
            source: crate::corpus::Corpus::Mbpp,
            text: "hi".into(),
            reference: None,
            replay: Some((
                crate::recording::ReplayKind::Own,
                crate::recording::Recording::Ids(vec![3, 4]),
            )),
        };
        assert_eq!(request_body(&c, &replayed)["replay_output"], json!([3, 4]));
    }
}
