//! Offline evaluation of the drafter on traces: acceptance, draft statistics and latency,
//! per corpus and overall (the engine behind `wring drafter-eval`).

use std::collections::BTreeMap;

use crate::replay::{python_shuffle, replay_request, Step, TraceRequest};
use crate::{DraftMode, DrafterError, SuffixConfig, SuffixDrafter};

/// Request order and cache state of a replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Order {
    /// File order, one global tree for the whole run (warm across corpora).
    Corpus,
    /// Python's `random.Random(0).shuffle` of the file order, one global tree.
    Shuffled,
    /// File order, a fresh drafter for each corpus (cold cache).
    Cold,
}

impl Order {
    pub fn name(self) -> &'static str {
        match self {
            Order::Corpus => "corpus",
            Order::Shuffled => "shuffled",
            Order::Cold => "cold",
        }
    }
}

/// Running totals for one group of requests.
#[derive(Clone, Debug, Default)]
struct Tally {
    requests: usize,
    steps: usize,
    emitted: usize,
    drafted: usize,
    accepted: usize,
    empty: usize,
    speculate_ns: Vec<u64>,
    append_ns: Vec<u64>,
    memory_bytes: usize,
    cached_tokens: usize,
}

impl Tally {
    fn add(&mut self, s: &Step) {
        self.steps += 1;
        self.emitted += s.emitted;
        self.drafted += s.draft.len();
        self.accepted += s.accepted;
        self.empty += usize::from(s.draft.is_empty());
        self.speculate_ns.push(s.speculate_ns);
        self.append_ns.push(s.append_ns);
    }

    fn merge(&mut self, o: &Tally) {
        self.requests += o.requests;
        self.steps += o.steps;
        self.emitted += o.emitted;
        self.drafted += o.drafted;
        self.accepted += o.accepted;
        self.empty += o.empty;
        self.speculate_ns.extend_from_slice(&o.speculate_ns);
        self.append_ns.extend_from_slice(&o.append_ns);
    }

    fn row(mut self, order: Order, k: usize, mode: DraftMode, corpus: &str) -> Row {
        let ratio = |a: usize, b: usize| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        Row {
            order: order.name().into(),
            k,
            mode,
            corpus: corpus.into(),
            requests: self.requests,
            steps: self.steps,
            tokens_per_step: ratio(self.emitted, self.steps),
            accept_rate: ratio(self.accepted, self.drafted),
            mean_draft_len: ratio(self.drafted, self.steps),
            empty_fraction: ratio(self.empty, self.steps),
            speculate_us_p50: percentile_us(&mut self.speculate_ns, 0.50),
            speculate_us_p99: percentile_us(&mut self.speculate_ns, 0.99),
            append_us_p50: percentile_us(&mut self.append_ns, 0.50),
            append_us_p99: percentile_us(&mut self.append_ns, 0.99),
            global_memory_bytes: self.memory_bytes,
            global_cached_tokens: self.cached_tokens,
            bytes_per_cached_token: ratio(self.memory_bytes, self.cached_tokens),
        }
    }
}

/// Nearest-rank percentile, in microseconds.
fn percentile_us(v: &mut [u64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_unstable();
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1] as f64 / 1000.0
}

/// Results for one (order, K, mode) and one corpus (`"all"` = every request).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Row {
    pub order: String,
    pub k: usize,
    pub mode: DraftMode,
    pub corpus: String,
    pub requests: usize,
    pub steps: usize,
    /// Accepted draft tokens + 1, per verify step.
    pub tokens_per_step: f64,
    /// Accepted / drafted, over real draft tokens only.
    pub accept_rate: f64,
    pub mean_draft_len: f64,
    pub empty_fraction: f64,
    pub speculate_us_p50: f64,
    pub speculate_us_p99: f64,
    pub append_us_p50: f64,
    pub append_us_p99: f64,
    /// Global tree at the end of the corpus (or run).
    pub global_memory_bytes: usize,
    pub global_cached_tokens: usize,
    pub bytes_per_cached_token: f64,
}

/// Replays `trace` once with the given parameters; returns one row per corpus (in order of
/// first appearance) and a final `"all"` row.
pub fn evaluate(
    trace: &[TraceRequest],
    cfg: &SuffixConfig,
    k: usize,
    mode: DraftMode,
    order: Order,
) -> Result<Vec<Row>, DrafterError> {
    let indices: Vec<usize> = match order {
        Order::Shuffled => python_shuffle(trace.len(), 0),
        Order::Corpus | Order::Cold => (0..trace.len()).collect(),
    };
    let mut corpora: Vec<&str> = Vec::new();
    for r in trace {
        if !corpora.contains(&r.corpus.as_str()) {
            corpora.push(&r.corpus);
        }
    }
    let mut per_corpus: BTreeMap<&str, Tally> = BTreeMap::new();
    let mut drafter = SuffixDrafter::try_new(cfg.clone())?;
    let mut current_corpus: Option<&str> = None;
    let mut peak = (0usize, 0usize);
    for (n, &i) in indices.iter().enumerate() {
        let req = &trace[i];
        if order == Order::Cold && current_corpus != Some(req.corpus.as_str()) {
            drafter = SuffixDrafter::try_new(cfg.clone())?;
            current_corpus = Some(&req.corpus);
        }
        let tally = per_corpus.entry(&req.corpus).or_default();
        tally.requests += 1;
        replay_request(&mut drafter, n as u64, req, k, mode, |s| tally.add(s))?;
        tally.memory_bytes = drafter.global_memory_bytes();
        tally.cached_tokens = drafter.global_cached_tokens();
        if tally.memory_bytes > peak.0 {
            peak = (tally.memory_bytes, tally.cached_tokens);
        }
    }
    let mut rows = Vec::new();
    let mut all = Tally::default();
    for c in &corpora {
        let t = per_corpus.remove(c).unwrap_or_default();
        all.merge(&t);
        rows.push(t.row(order, k, mode, c));
    }
    // Warm orders end with everything cached; cold runs report their largest tree.
    (all.memory_bytes, all.cached_tokens) = match order {
        Order::Cold => peak,
        _ => (
            drafter.global_memory_bytes(),
            drafter.global_cached_tokens(),
        ),
    };
    rows.push(all.row(order, k, mode, "all"));
    Ok(rows)
}

/// Plain-text table of rows (one line per row, fixed columns).
pub fn format_table(rows: &[Row]) -> String {
    let mut s =
        format!(
        "{:<8} {:>2} {:<4} {:<14} {:>4} {:>5} {:>7} {:>6} {:>6} {:>6} {:>13} {:>13} {:>9} {:>7}\n",
        "order", "K", "mode", "corpus", "reqs", "steps", "tok/stp", "accept", "empty", "dlen",
        "spec µs p50/99", "app µs p50/99", "mem KiB", "B/tok"
    );
    for r in rows {
        let mode = match r.mode {
            DraftMode::Path => "path",
            DraftMode::Tree => "tree",
        };
        s += &format!(
            "{:<8} {:>2} {:<4} {:<14} {:>4} {:>5} {:>7.3} {:>6.3} {:>5.1}% {:>6.2} {:>6.2}/{:<6.2} {:>6.2}/{:<6.2} {:>9.1} {:>7.1}\n",
            r.order,
            r.k,
            mode,
            r.corpus,
            r.requests,
            r.steps,
            r.tokens_per_step,
            r.accept_rate,
            100.0 * r.empty_fraction,
            r.mean_draft_len,
            r.speculate_us_p50,
            r.speculate_us_p99,
            r.append_us_p50,
            r.append_us_p99,
            r.global_memory_bytes as f64 / 1024.0,
            r.bytes_per_cached_token,
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(corpus: &str, prompt: &[u32], out: &[u32]) -> TraceRequest {
        TraceRequest {
            idx: 0,
            corpus: corpus.into(),
            prompt_ids: prompt.to_vec(),
            output_ids: out.to_vec(),
        }
    }

    #[test]
    fn counts_steps_and_acceptance() {
        // The second request repeats the first one's output: drafted from the global tree.
        let out = [5, 6, 7, 8, 9, 10];
        let trace = vec![req("a", &[1, 2], &out), req("b", &[1, 2], &out)];
        let cfg = SuffixConfig {
            max_tree_depth: 8,
            max_spec_factor: 4.0,
            ..SuffixConfig::default()
        };
        let warm = evaluate(&trace, &cfg, 4, DraftMode::Path, Order::Corpus).unwrap();
        let cold = evaluate(&trace, &cfg, 4, DraftMode::Path, Order::Cold).unwrap();
        assert_eq!(warm.len(), 3);
        assert_eq!(warm[0].steps, 6); // nothing to draft from: one token per step
        assert_eq!(warm[0].tokens_per_step, 1.0);
        assert!(warm[1].tokens_per_step > 1.5, "{:?}", warm[1]);
        assert_eq!(cold[1].steps, 6); // cold cache: request b learns nothing from a
        assert_eq!(warm[2].requests, 2);
        assert!(warm[2].global_cached_tokens == 12 && warm[2].global_memory_bytes > 0);
    }
}
