//! What the benchmark asks the server besides completions: `/metrics` counters and the suffix
//! cache reset. Both degrade gracefully on servers that lack them (vLLM, llama.cpp).

use serde::{Deserialize, Serialize};

use crate::prom;

pub const DRAFTS: &str = "vllm:spec_decode_num_drafts_total";
pub const DRAFT_TOKENS: &str = "vllm:spec_decode_num_draft_tokens_total";
pub const ACCEPTED: &str = "vllm:spec_decode_num_accepted_tokens_total";
pub const ACCEPTED_PER_POS: &str = "vllm:spec_decode_num_accepted_tokens_per_pos_total";

/// The spec-decode counters at one instant (`None` where the server does not export them).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpecCounters {
    pub drafts: Option<f64>,
    pub draft_tokens: Option<f64>,
    pub accepted: Option<f64>,
    /// Accepted tokens per draft position (index = `position` label).
    pub accepted_per_pos: Vec<f64>,
}

impl SpecCounters {
    pub fn from_metrics_text(text: &str) -> Self {
        let samples = prom::parse(text);
        let mut per_pos: Vec<f64> = Vec::new();
        for s in samples.iter().filter(|s| s.name == ACCEPTED_PER_POS) {
            if let Some(pos) = s
                .labels
                .get("position")
                .and_then(|p| p.parse::<usize>().ok())
            {
                if pos < 1024 {
                    if per_pos.len() <= pos {
                        per_pos.resize(pos + 1, 0.0);
                    }
                    per_pos[pos] += s.value;
                }
            }
        }
        Self {
            drafts: prom::sum(&samples, DRAFTS),
            draft_tokens: prom::sum(&samples, DRAFT_TOKENS),
            accepted: prom::sum(&samples, ACCEPTED),
            accepted_per_pos: per_pos,
        }
    }
}

/// Spec-decode results over one run, from counter deltas.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SpecStats {
    pub spec_num_drafts: u64,
    pub spec_num_draft_tokens: u64,
    pub spec_num_accepted_tokens: u64,
    /// accepted / draft tokens (real draft tokens only; pad slots are never counted by wring).
    pub spec_acceptance_rate: Option<f64>,
    /// 1 + accepted / drafts: tokens emitted per verify step (vLLM's "mean acceptance length").
    pub spec_mean_acceptance_length: Option<f64>,
    /// Accepted tokens per draft position / drafts.
    pub spec_acceptance_rate_per_pos: Vec<f64>,
}

/// Deltas between two scrapes; `None` when the counters are absent (not a spec-decoding server,
/// or no `/metrics`).
pub fn spec_delta(before: &SpecCounters, after: &SpecCounters) -> Option<SpecStats> {
    let delta = |a: Option<f64>, b: Option<f64>| Some((b? - a?).max(0.0).round() as u64);
    let drafts = delta(before.drafts, after.drafts)?;
    let draft_tokens = delta(before.draft_tokens, after.draft_tokens)?;
    let accepted = delta(before.accepted, after.accepted)?;
    let per_pos = after
        .accepted_per_pos
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let b = before.accepted_per_pos.get(i).copied().unwrap_or(0.0);
            if drafts > 0 {
                (a - b).max(0.0) / drafts as f64
            } else {
                0.0
            }
        })
        .collect();
    Some(SpecStats {
        spec_num_drafts: drafts,
        spec_num_draft_tokens: draft_tokens,
        spec_num_accepted_tokens: accepted,
        spec_acceptance_rate: (draft_tokens > 0).then(|| accepted as f64 / draft_tokens as f64),
        spec_mean_acceptance_length: (drafts > 0).then(|| 1.0 + accepted as f64 / drafts as f64),
        spec_acceptance_rate_per_pos: per_pos,
    })
}

/// Scrapes `/metrics`; `None` (logged once by the caller) when the server has none.
pub async fn scrape_spec(client: &reqwest::Client, root: &str) -> Option<SpecCounters> {
    let response = client.get(format!("{root}/metrics")).send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    Some(SpecCounters::from_metrics_text(
        &response.text().await.ok()?,
    ))
}

/// Empties the server's global suffix cache so a run starts cold. Returns the cache state to
/// record: `reset`, or `unknown (...)` when the server has no such endpoint.
pub async fn reset_suffix_cache(
    client: &reqwest::Client,
    root: &str,
    api_key: Option<&str>,
) -> String {
    let mut request = client.post(format!("{root}/admin/suffix-cache/reset"));
    if let Some(key) = api_key {
        request = request.bearer_auth(key);
    }
    match request.send().await {
        Ok(r) if r.status().is_success() => "reset".to_string(),
        Ok(r) => format!(
            "unknown (reset endpoint answered HTTP {})",
            r.status().as_u16()
        ),
        Err(e) => format!("unknown (reset failed: {e})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_from_two_scrapes() {
        let before = SpecCounters::from_metrics_text(
            "vllm:spec_decode_num_drafts_total 10\nvllm:spec_decode_num_draft_tokens_total 80\n\
             vllm:spec_decode_num_accepted_tokens_total 20\n\
             vllm:spec_decode_num_accepted_tokens_per_pos_total{position=\"0\"} 8\n",
        );
        let after = SpecCounters::from_metrics_text(
            "vllm:spec_decode_num_drafts_total 30\nvllm:spec_decode_num_draft_tokens_total 240\n\
             vllm:spec_decode_num_accepted_tokens_total 60\n\
             vllm:spec_decode_num_accepted_tokens_per_pos_total{position=\"0\"} 18\n\
             vllm:spec_decode_num_accepted_tokens_per_pos_total{position=\"1\"} 5\n",
        );
        let s = spec_delta(&before, &after).unwrap();
        assert_eq!(
            (
                s.spec_num_drafts,
                s.spec_num_draft_tokens,
                s.spec_num_accepted_tokens
            ),
            (20, 160, 40)
        );
        assert_eq!(s.spec_acceptance_rate, Some(0.25));
        assert_eq!(s.spec_mean_acceptance_length, Some(3.0));
        assert_eq!(s.spec_acceptance_rate_per_pos, vec![0.5, 0.25]);
    }

    #[test]
    fn absent_counters_give_none() {
        let plain = SpecCounters::from_metrics_text("llamacpp:tokens_predicted_total 100\n");
        assert_eq!(spec_delta(&plain, &plain), None);
        let zero = SpecCounters::from_metrics_text(
            "vllm:spec_decode_num_drafts_total 0\nvllm:spec_decode_num_draft_tokens_total 0\n\
             vllm:spec_decode_num_accepted_tokens_total 0\n",
        );
        let s = spec_delta(&zero, &zero).unwrap();
        assert_eq!(s.spec_acceptance_rate, None);
        assert_eq!(s.spec_mean_acceptance_length, None);
    }
}
