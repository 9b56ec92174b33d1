//! `GET /metrics`: the engine's snapshot in Prometheus text, named like vLLM's
//! metrics wherever vLLM has one (so existing dashboards work), `wring:` otherwise.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use wring_engine::MetricsSnapshot;

use crate::prom::PromText;
use crate::state::AppState;

pub async fn handler(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    let snapshot = state.engine.metrics();
    let mut text = render(&snapshot, state.model_name());
    text.push_str(&cache_config_info(
        state.info.block_size,
        state.info.num_kv_blocks,
        state.model_name(),
    ));
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
}

/// `vllm:cache_config_info`: the KV cache's block size and block count as labels (what the
/// Gateway API Inference Extension's prefix-cache scorer reads). No LoRA metric: this server
/// serves no adapters, so `vllm:lora_requests_info` is absent rather than empty.
pub fn cache_config_info(block_size: usize, num_blocks: usize, model_name: &str) -> String {
    let mut p = PromText::new(&[("model_name", model_name)]);
    let (bs, nb) = (block_size.to_string(), num_blocks.to_string());
    p.info(
        "vllm:cache_config_info",
        "KV cache configuration (labels; value 1).",
        &[("block_size", bs.as_str()), ("num_gpu_blocks", nb.as_str())],
    );
    p.finish()
}

pub fn render(m: &MetricsSnapshot, model_name: &str) -> String {
    let mut p = PromText::new(&[("model_name", model_name)]);
    p.gauge(
        "vllm:num_requests_running",
        "Requests in the running batch.",
        m.running as f64,
    );
    p.gauge(
        "vllm:num_requests_waiting",
        "Requests waiting to be scheduled.",
        m.waiting as f64,
    );
    let usage = if m.kv_blocks_total == 0 {
        0.0
    } else {
        m.kv_blocks_used as f64 / m.kv_blocks_total as f64
    };
    p.gauge(
        "vllm:kv_cache_usage_perc",
        "KV-cache usage (1 = full).",
        usage,
    );
    p.gauge(
        "wring:kv_blocks_used",
        "KV blocks held by requests.",
        m.kv_blocks_used as f64,
    );
    p.gauge(
        "wring:kv_blocks_free",
        "KV blocks not held by any request (includes reusable prefix-cached blocks).",
        m.kv_blocks_total.saturating_sub(m.kv_blocks_used) as f64,
    );
    p.gauge(
        "wring:kv_blocks_total",
        "KV blocks in the pool.",
        m.kv_blocks_total as f64,
    );
    p.gauge(
        "wring:spec_decode_k",
        "K of the last speculative verify step (0 = plain decode).",
        m.last_k as f64,
    );

    p.counter(
        "vllm:prompt_tokens_total",
        "Prefill tokens processed.",
        m.prompt_tokens as f64,
    );
    p.counter(
        "vllm:generation_tokens_total",
        "Tokens generated.",
        m.generation_tokens as f64,
    );
    p.counter(
        "vllm:num_preemptions_total",
        "Preemptions (by recompute).",
        m.preemptions as f64,
    );
    p.counter(
        "vllm:prefix_cache_queries_total",
        "Prompt tokens looked up in the prefix cache.",
        m.prefix_cache_queried_tokens as f64,
    );
    p.counter(
        "vllm:prefix_cache_hits_total",
        "Prompt tokens found in the prefix cache.",
        m.prefix_cache_hit_tokens as f64,
    );
    p.counter(
        "wring:engine_steps_total",
        "Engine steps run.",
        m.steps as f64,
    );
    p.counter(
        "wring:engine_step_model_seconds_total",
        "Seconds engine steps spent in the model's forward.",
        m.step_model_seconds,
    );
    p.counter(
        "wring:engine_constrained_steps_total",
        "Engine steps with structured-output (grammar) rows.",
        m.constrained_steps as f64,
    );
    p.counter(
        "wring:engine_constrained_steps_masked_argmax_total",
        "Constrained steps whose grammar masks were applied inside the argmax (only ids came back).",
        m.constrained_steps_masked_argmax as f64,
    );
    p.counter(
        "wring:engine_steps_with_prefill_total",
        "Engine steps that carried prompt tokens (not uniform: eager on CUDA).",
        m.steps_with_prefill as f64,
    );
    p.counter(
        "wring:engine_step_model_seconds_with_prefill_total",
        "Seconds the steps with prompt tokens spent in the model's forward.",
        m.step_model_seconds_with_prefill,
    );
    p.counter(
        "wring:engine_step_host_seconds_total",
        "Seconds engine steps spent on the host around the forward (drafting, scheduling, verifying, streaming).",
        m.step_host_seconds,
    );
    let labels: Vec<[(&str, &str); 1]> = wring_engine::HOST_PHASES
        .iter()
        .map(|&name| [("phase", name)])
        .collect();
    let phases: Vec<(&[(&str, &str)], f64)> = labels
        .iter()
        .zip(&m.step_host_phase_seconds)
        .map(|(l, &v)| (&l[..], v))
        .collect();
    p.labeled_counter(
        "wring:engine_step_host_phase_seconds_total",
        "The host part of engine steps by phase: drafter_wait, draft, schedule, verify_emit, end.",
        &phases,
    );
    p.counter(
        "wring:engine_admin_seconds_total",
        "Seconds the engine thread spent admitting and finishing requests, outside steps.",
        m.admin_seconds,
    );
    p.labeled_counter(
        "vllm:request_success_total",
        "Finished requests by finish reason.",
        &[
            (&[("finished_reason", "stop")], m.finished_stop as f64),
            (&[("finished_reason", "length")], m.finished_length as f64),
            (&[("finished_reason", "abort")], m.finished_abort as f64),
            (&[("finished_reason", "error")], m.finished_error as f64),
        ],
    );

    p.counter(
        "vllm:spec_decode_num_drafts_total",
        "Sequence-steps that carried at least one real draft token.",
        m.spec_num_drafts as f64,
    );
    p.counter(
        "vllm:spec_decode_num_draft_tokens_total",
        "Real draft tokens proposed (pad slots excluded).",
        m.spec_num_draft_tokens as f64,
    );
    p.counter(
        "vllm:spec_decode_num_accepted_tokens_total",
        "Draft tokens accepted.",
        m.spec_num_accepted_tokens as f64,
    );
    p.counter(
        "wring:engine_grammar_draft_tokens_total",
        "Draft tokens a structured-output grammar forced (in the spec_decode totals too).",
        m.grammar_draft_tokens as f64,
    );
    p.counter(
        "wring:engine_grammar_draft_tokens_accepted_total",
        "Draft tokens a structured-output grammar forced that were accepted.",
        m.grammar_draft_accepted_tokens as f64,
    );
    let positions: Vec<String> = (0..m.spec_num_accepted_tokens_per_pos.len())
        .map(|i| i.to_string())
        .collect();
    let labels: Vec<[(&str, &str); 1]> = positions
        .iter()
        .map(|p| [("position", p.as_str())])
        .collect();
    let per_pos: Vec<(&[(&str, &str)], f64)> = labels
        .iter()
        .zip(&m.spec_num_accepted_tokens_per_pos)
        .map(|(l, &v)| (l.as_slice(), v as f64))
        .collect();
    p.labeled_counter(
        "vllm:spec_decode_num_accepted_tokens_per_pos_total",
        "Drafts whose token at this position was accepted.",
        &per_pos,
    );

    for (name, help, h) in [
        (
            "vllm:time_to_first_token_seconds",
            "Time to first token.",
            &m.ttft,
        ),
        (
            "vllm:time_per_output_token_seconds",
            "Time per output token after the first.",
            &m.tpot,
        ),
        (
            "vllm:e2e_request_latency_seconds",
            "End-to-end request latency.",
            &m.e2e,
        ),
    ] {
        p.histogram(name, help, &h.bounds, &h.counts, h.sum);
    }
    p.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_family_from_a_snapshot() {
        let mut m = MetricsSnapshot {
            running: 2,
            kv_blocks_used: 5,
            kv_blocks_total: 20,
            finished_length: 3,
            ..MetricsSnapshot::default()
        };
        m.count_verify(3, 2);
        m.count_grammar_drafts(2, 1);
        m.ttft.observe(0.03);
        let text = render(&m, "smol");
        assert!(!text.contains("lora"), "no adapters, no LoRA metric");
        let info = cache_config_info(16, 1234, "smol");
        assert!(info.contains("# TYPE vllm:cache_config_info gauge"));
        assert!(info.contains(
            "vllm:cache_config_info{model_name=\"smol\",block_size=\"16\",num_gpu_blocks=\"1234\"} 1"
        ));
        for line in [
            "vllm:num_requests_running{model_name=\"smol\"} 2",
            "vllm:kv_cache_usage_perc{model_name=\"smol\"} 0.25",
            "wring:kv_blocks_free{model_name=\"smol\"} 15",
            "vllm:request_success_total{model_name=\"smol\",finished_reason=\"length\"} 3",
            "vllm:spec_decode_num_draft_tokens_total{model_name=\"smol\"} 3",
            "vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"smol\",position=\"1\"} 1",
            "vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"smol\",position=\"2\"} 0",
            "wring:engine_grammar_draft_tokens_total{model_name=\"smol\"} 2",
            "wring:engine_grammar_draft_tokens_accepted_total{model_name=\"smol\"} 1",
            "vllm:time_to_first_token_seconds_bucket{model_name=\"smol\",le=\"0.04\"} 1",
            "vllm:time_to_first_token_seconds_count{model_name=\"smol\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
        }
    }
}
