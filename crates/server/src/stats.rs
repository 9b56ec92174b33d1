//! The periodic throughput line: token rates, queue, KV use and speculative
//! acceptance since the previous line (quiet while the server is idle).

use std::sync::Arc;
use std::time::Instant;

use wring_engine::MetricsSnapshot;

use crate::state::AppState;

pub fn spawn(state: Arc<AppState>) -> tokio::task::JoinHandle<()> {
    let period = state.config.stats_interval;
    tokio::spawn(async move {
        if period.is_zero() {
            return;
        }
        let mut ticker = tokio::time::interval(period);
        ticker.tick().await;
        let mut last = (Instant::now(), state.engine.metrics());
        loop {
            ticker.tick().await;
            let now = (Instant::now(), state.engine.metrics());
            if let Some(line) = throughput_line(&last.1, &now.1, (now.0 - last.0).as_secs_f64()) {
                tracing::info!(target: "wring::stats", "{line}");
            }
            last = now;
        }
    })
}

/// `None` when nothing happened in the interval and nothing is queued.
pub fn throughput_line(prev: &MetricsSnapshot, cur: &MetricsSnapshot, secs: f64) -> Option<String> {
    let prompt = cur.prompt_tokens.saturating_sub(prev.prompt_tokens);
    let generated = cur.generation_tokens.saturating_sub(prev.generation_tokens);
    if prompt == 0 && generated == 0 && cur.running == 0 && cur.waiting == 0 {
        return None;
    }
    let secs = secs.max(1e-9);
    let kv = if cur.kv_blocks_total == 0 {
        0.0
    } else {
        100.0 * cur.kv_blocks_used as f64 / cur.kv_blocks_total as f64
    };
    let mut line = format!(
        "prompt {:.1} tok/s, generation {:.1} tok/s, running {}, waiting {}, KV {kv:.1}%",
        prompt as f64 / secs,
        generated as f64 / secs,
        cur.running,
        cur.waiting,
    );
    let drafts = cur.spec_num_drafts.saturating_sub(prev.spec_num_drafts);
    let draft_tokens = cur
        .spec_num_draft_tokens
        .saturating_sub(prev.spec_num_draft_tokens);
    let accepted = cur
        .spec_num_accepted_tokens
        .saturating_sub(prev.spec_num_accepted_tokens);
    if draft_tokens > 0 {
        line.push_str(&format!(
            ", spec K {} acceptance {:.1}% ({:.2} accepted per draft)",
            cur.last_k,
            100.0 * accepted as f64 / draft_tokens as f64,
            accepted as f64 / drafts.max(1) as f64,
        ));
    }
    Some(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_when_idle_and_reports_rates_otherwise() {
        let idle = MetricsSnapshot::default();
        assert_eq!(throughput_line(&idle, &idle, 10.0), None);
        let mut busy = idle.clone();
        busy.generation_tokens = 500;
        busy.prompt_tokens = 100;
        busy.running = 3;
        busy.kv_blocks_total = 100;
        busy.kv_blocks_used = 25;
        busy.count_verify(4, 3);
        busy.last_k = 4;
        let line = throughput_line(&idle, &busy, 10.0).unwrap();
        assert_eq!(
            line,
            "prompt 10.0 tok/s, generation 50.0 tok/s, running 3, waiting 0, KV 25.0%, \
             spec K 4 acceptance 75.0% (3.00 accepted per draft)"
        );
    }
}
