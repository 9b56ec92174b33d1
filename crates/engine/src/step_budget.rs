//! Fair steps: how many prefill tokens may join a step so that the step stays near a
//! time target, from the step times measured so far.
//!
//! One long prompt prefilled in one step stalls every decoding stream for that long
//! (2,000 tokens ≈ 11 s on a 2-core CPU). With a target, the engine sizes each prefill
//! chunk so the whole step (the running streams' decode/verify rows plus the chunk)
//! is predicted to take about the target. The prediction is a least-squares fit of
//! the recent steps, `seconds = a + c·tokens + d·attended`, where `attended` is the
//! number of (query, key) pairs attention computes (Σ over query rows of its context
//! length): the per-token cost of a prefill chunk grows with its position, and this
//! term is what lets a chunk late in a long prompt shrink before it overshoots.
//!
//! A step with no decode/verify rows (a prompt prefilled alone) uses a longer target,
//! [`PREFILL_ALONE_TARGET`]: nobody's next token waits on it.
//!
//! Rules that keep it safe: decode/verify rows are never cut (they are scheduled
//! first, under the hard cap only); the prefill is never starved: where the target
//! cannot be met (a slow or loaded machine, many streams) it still gets as much step
//! time as the decode rows take, and at least [`MIN_PREFILL_TOKENS`]; a chunk never
//! exceeds twice the largest chunk measured so far (no extrapolation far past the
//! data; the first chunk is [`FIRST_CHUNK_TOKENS`]); and `max_num_batched_tokens`
//! stays the hard cap of the whole step. Without a target the budget is the cap.

use crate::least_squares::nonnegative_fit;
use std::collections::VecDeque;
use std::time::Duration;

/// The first chunk before anything is measured.
pub const FIRST_CHUNK_TOKENS: usize = 32;
/// The smallest prefill chunk a step offers when prefill is waiting, whatever the
/// prediction: a long prompt always advances.
pub const MIN_PREFILL_TOKENS: usize = 8;

/// The step-time target of a step with no decode/verify rows (a prompt prefilled alone): no
/// stream's next token waits on it, so it may run longer and prefill in larger, more
/// efficient chunks; the bound keeps a request that arrives meanwhile waiting ~0.5 s at
/// most. On the 2-core CPU a lone 2,000-token prompt took 14.1–15.3 s to its first token
/// with 120 ms steps, 11.0–11.3 s with 500 ms ones, 9.5–12.4 s unchunked (results/2026-12-01-cpu-prefill-alone).
pub const PREFILL_ALONE_TARGET: Duration = Duration::from_millis(500);

/// Steps kept for the fit: enough to span a long prefill's changing positions,
/// few enough that a change in load (other processes on the machine) shows quickly.
const WINDOW: usize = 48;

/// The work of one step, as the cost model sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepWork {
    /// Query tokens (rows) of the step.
    pub tokens: usize,
    /// Σ over query rows of the number of positions the row attends to.
    pub attended: f64,
}

impl StepWork {
    /// The work of a step from its query positions (row at position p attends p + 1 keys).
    pub fn from_positions(positions: &[u32]) -> Self {
        Self {
            tokens: positions.len(),
            attended: positions.iter().map(|&p| p as f64 + 1.0).sum(),
        }
    }

    /// A prefill chunk of `n` tokens starting at position `start`.
    pub fn chunk(start: usize, n: usize) -> Self {
        let (s, n) = (start as f64, n as f64);
        Self {
            tokens: n as usize,
            attended: n * s + n * (n + 1.0) / 2.0,
        }
    }

    fn plus(self, o: StepWork) -> StepWork {
        StepWork {
            tokens: self.tokens + o.tokens,
            attended: self.attended + o.attended,
        }
    }
}

#[derive(Debug, Clone)]
pub struct StepBudgeter {
    target_secs: Option<f64>,
    cap: usize,
    /// Recent (work, seconds).
    samples: VecDeque<(StepWork, f64)>,
    /// (a, c, d) of the last fit; None until the samples determine one.
    coef: Option<[f64; 3]>,
    /// The largest prefill chunk measured in a step so far.
    largest_chunk: usize,
    /// Whether the last step that carried prefill ran over the target (before a fit exists,
    /// chunks only grow while steps stay within it).
    last_over: bool,
}

impl StepBudgeter {
    /// `target`: the step-time target (None = always the cap); `cap`: the hard token
    /// budget of a step (`max_num_batched_tokens`).
    pub fn new(target: Option<Duration>, cap: usize) -> Self {
        Self {
            target_secs: target.map(|t| t.as_secs_f64()).filter(|&t| t > 0.0),
            cap,
            samples: VecDeque::with_capacity(WINDOW),
            coef: None,
            largest_chunk: 0,
            last_over: false,
        }
    }

    pub fn cap(&self) -> usize {
        self.cap
    }

    pub fn target(&self) -> Option<Duration> {
        self.target_secs.map(Duration::from_secs_f64)
    }

    /// (a, c, d) of the current fit: seconds per step, per token, per attended pair.
    pub fn coefficients(&self) -> Option<[f64; 3]> {
        self.coef
    }

    /// Records a step that ran `work` (of which `prefill_tokens` were prefill) in `secs`.
    pub fn observe(&mut self, work: StepWork, prefill_tokens: usize, secs: f64) {
        if self.target_secs.is_none() || !(secs.is_finite() && secs > 0.0) || work.tokens == 0 {
            return;
        }
        self.largest_chunk = self.largest_chunk.max(prefill_tokens);
        if prefill_tokens > 0 {
            self.last_over = self.target_secs.is_some_and(|t| secs > t);
        }
        if self.samples.len() == WINDOW {
            self.samples.pop_front();
        }
        self.samples.push_back((work, secs));
        self.coef = fit(&self.samples);
    }

    /// Predicted seconds of a step doing `work` (None before the first fit).
    pub fn predict(&self, work: StepWork) -> Option<f64> {
        let [a, c, d] = self.coef?;
        Some(a + c * work.tokens as f64 + d * work.attended)
    }

    /// Prefill tokens the next step may take besides its decode/verify rows
    /// (`decode`), for a chunk starting at position `start`. Never more than what the
    /// cap leaves after the decode rows.
    pub fn prefill_tokens(&self, decode: StepWork, start: usize) -> usize {
        let room = self.cap.saturating_sub(decode.tokens);
        let Some(target) = self.target_secs else {
            return room;
        };
        let target = if decode.tokens == 0 {
            target.max(PREFILL_ALONE_TARGET.as_secs_f64())
        } else {
            target
        };
        let grow = (2 * self.largest_chunk).max(FIRST_CHUNK_TOKENS);
        let predicted = match self.coef {
            Some(_) => {
                // The largest n whose step is predicted within `limit` (the prediction
                // grows with n: every coefficient is non-negative).
                let largest_within = |limit: f64| {
                    let fits = |n: usize| {
                        self.predict(decode.plus(StepWork::chunk(start, n)))
                            .unwrap()
                            <= limit
                    };
                    let (mut lo, mut hi) = (0usize, room.min(grow));
                    while lo < hi {
                        let mid = lo + (hi - lo).div_ceil(2);
                        if fits(mid) {
                            lo = mid;
                        } else {
                            hi = mid - 1;
                        }
                    }
                    lo
                };
                // Never starved: at least as much time as the decode rows take.
                let fair_share = 2.0 * self.predict(decode).unwrap();
                largest_within(target).max(largest_within(fair_share))
            }
            None if self.last_over => MIN_PREFILL_TOKENS,
            None => grow,
        };
        predicted.clamp(MIN_PREFILL_TOKENS, grow).min(room)
    }
}

/// Non-negative least squares of seconds over (1, tokens, attended). None when the
/// samples cannot determine a fit.
fn fit(samples: &VecDeque<(StepWork, f64)>) -> Option<[f64; 3]> {
    let rows: Vec<([f64; 3], f64)> = samples
        .iter()
        .map(|(w, secs)| ([1.0, w.tokens as f64, w.attended], *secs))
        .collect();
    // Too few steps for three terms: start with the fixed and per-token ones. The ridge
    // keeps a long prefill alone solvable (tokens and attended pairs grow in step).
    nonnegative_fit(&rows, [true, true, samples.len() >= 3], 1e-6)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CPU-like cost: 10 ms per step, 2 ms per token, 1 µs per attended pair.
    fn truth(w: StepWork) -> f64 {
        0.010 + 0.002 * w.tokens as f64 + 1e-6 * w.attended
    }

    /// Runs a 2,000-token prefill beside `streams` decoding sequences at context 300,
    /// returning the chunks and each step's true time.
    fn prefill(b: &mut StepBudgeter, streams: usize, prompt: usize) -> Vec<(usize, f64)> {
        let decode = StepWork::from_positions(&vec![300; streams]);
        let mut done = 0;
        let mut steps = vec![];
        while done < prompt {
            let n = b.prefill_tokens(decode, done).min(prompt - done);
            let work = decode.plus(StepWork::chunk(done, n));
            let secs = truth(work);
            b.observe(work, n, secs);
            steps.push((n, secs));
            done += n;
        }
        steps
    }

    #[test]
    fn without_a_target_the_budget_is_the_cap() {
        let b = StepBudgeter::new(None, 2048);
        assert_eq!(b.prefill_tokens(StepWork::from_positions(&[5, 9]), 0), 2046);
    }

    #[test]
    fn chunks_start_small_grow_and_settle_at_the_target() {
        let mut b = StepBudgeter::new(Some(Duration::from_millis(120)), 2048);
        let steps = prefill(&mut b, 3, 2000);
        // Slow start: the first chunk is small, the next at most double.
        assert_eq!(steps[0].0, FIRST_CHUNK_TOKENS);
        assert!(steps[1].0 <= 2 * FIRST_CHUNK_TOKENS);
        // Once the fit has data, no step overshoots the target by more than 5 % (unless
        // even the minimum chunk does: late in the prompt attention alone costs that much),
        // and steps use most of it (the last, partial chunk aside).
        for &(n, secs) in &steps[3..steps.len() - 1] {
            assert!(
                secs <= 0.126 || n == MIN_PREFILL_TOKENS,
                "chunk {n}: {secs}"
            );
            assert!(secs >= 0.100, "chunk {n}: {secs}");
        }
        // Chunks shrink as attention over the growing prompt costs more.
        let mid = steps.len() / 2;
        assert!(steps[3].0 > steps[steps.len() - 2].0 || steps[3].0 > steps[mid].0);
        let [a, c, d] = b.coefficients().unwrap();
        assert!(
            (a - 0.010).abs() < 1e-3 && (c - 0.002).abs() < 1e-4,
            "{a} {c} {d}"
        );
    }

    #[test]
    fn a_prompt_alone_prefills_in_longer_steps() {
        let mut b = StepBudgeter::new(Some(Duration::from_millis(120)), 2048);
        let alone = prefill(&mut b, 0, 2000);
        let limit = PREFILL_ALONE_TARGET.as_secs_f64();
        for &(n, secs) in &alone[3..alone.len() - 1] {
            assert!(secs <= 1.05 * limit, "chunk {n}: {secs}");
        }
        assert!(
            alone.iter().any(|&(_, secs)| secs > 0.8 * limit),
            "{alone:?}"
        );
        // The same prompt beside one decoding stream keeps the 120 ms steps.
        let mut b = StepBudgeter::new(Some(Duration::from_millis(120)), 2048);
        let beside = prefill(&mut b, 1, 2000);
        assert!(beside[3..beside.len() - 1]
            .iter()
            .all(|&(_, secs)| secs <= 0.126));
        assert!(
            alone.len() * 3 < beside.len(),
            "{} vs {}",
            alone.len(),
            beside.len()
        );
    }

    #[test]
    fn decode_rows_never_starve_the_prefill_and_the_cap_holds() {
        let mut b = StepBudgeter::new(Some(Duration::from_millis(50)), 512);
        // 64 streams already take longer than the target: the prefill still gets about as
        // much step time as the decode rows (never less than the minimum chunk).
        let steps = prefill(&mut b, 64, 400);
        let decode = truth(StepWork::from_positions(&[300; 64]));
        let (_, full) = steps.split_last().unwrap();
        assert!(
            full.iter().all(|&(n, _)| n >= MIN_PREFILL_TOKENS),
            "{steps:?}"
        );
        for &(n, secs) in &full[3..] {
            assert!(
                secs <= 2.05 * decode && secs >= 1.8 * decode,
                "chunk {n}: {secs} vs {decode}"
            );
        }
        // The hard cap bounds decode rows + chunk.
        let decode = StepWork::from_positions(&vec![10; 500]);
        assert_eq!(b.prefill_tokens(decode, 0), 12);
        // A generous target is still capped by the hard budget.
        let mut big = StepBudgeter::new(Some(Duration::from_secs(100)), 256);
        prefill(&mut big, 1, 3000);
        assert_eq!(big.prefill_tokens(StepWork::from_positions(&[3]), 0), 255);
    }

    #[test]
    fn the_fit_follows_a_slower_machine() {
        let mut b = StepBudgeter::new(Some(Duration::from_millis(300)), 2048);
        prefill(&mut b, 2, 1000);
        let before = b.prefill_tokens(StepWork::from_positions(&[100, 100]), 0);
        // The machine gets three times slower (other processes): within a window the
        // chunk follows.
        let decode = StepWork::from_positions(&[100, 100]);
        for _ in 0..WINDOW {
            let n = b.prefill_tokens(decode, 0);
            let work = decode.plus(StepWork::chunk(0, n));
            b.observe(work, n, 3.0 * truth(work));
        }
        let after = b.prefill_tokens(decode, 0);
        assert!(
            after * 2 < before && after >= MIN_PREFILL_TOKENS,
            "{before} → {after}"
        );
        let t = 3.0 * truth(decode.plus(StepWork::chunk(0, after)));
        assert!(t <= 0.315, "{t}");
    }

    #[test]
    fn work_counts_attended_pairs() {
        assert_eq!(
            StepWork::chunk(10, 3),
            StepWork::from_positions(&[10, 11, 12])
        );
        assert_eq!(StepWork::from_positions(&[0]).attended, 1.0);
    }
}
