//! Our K controller: the K (from the runner's captured shapes) that maximises
//! expected emitted tokens per second of the whole step.

use super::cost_model::StepCostModel;
use super::policy::MAX_K;

/// K values the adaptive policy picks from when the runner captures no step shapes
/// (the CPU): 0 = plain decode.
pub const FALLBACK_KS: [usize; 6] = [0, 1, 4, 6, 8, 12];

/// Acceptance estimates of one sequence's draft (running probabilities: entry j is
/// the chance that the first j + 1 drafts are all accepted; non-increasing).
pub type DraftScores<'a> = &'a [f32];

/// One adaptive sequence of the step: its draft's estimates and its context length
/// (tokens in the KV cache: what each of its query rows attends to).
#[derive(Debug, Clone, Copy)]
pub struct DraftSeq<'a> {
    pub scores: DraftScores<'a>,
    pub context: usize,
}

/// Work in the step besides the adaptive sequences' own rows (prefill chunks,
/// sequences under another K policy). It produces no tokens of theirs and runs
/// whatever K they get, so it is not charged to them; it only shares the step's fixed
/// cost with them, in proportion to rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepLoad {
    pub seqs: usize,
    pub rows: usize,
}

/// Picks K to maximise the adaptive sequences' expected emitted tokens per second of
/// the step time they cause, from the drafts' acceptance estimates and the measured
/// step-cost model. A drafted row is bought only when its expected tokens per second
/// of its own cost beat the rate the sequences already get: where a row costs about
/// what a decode row does (a compute-bound step of many sequences), only drafts that
/// are almost surely accepted pay, and none is bought when none does (plain decode).
#[derive(Debug, Clone)]
pub struct AdaptiveK {
    candidates: Vec<usize>,
}

impl AdaptiveK {
    pub fn new(candidates: &[usize]) -> Self {
        let mut c = candidates.to_vec();
        c.sort_unstable();
        c.dedup();
        Self { candidates: c }
    }

    /// Candidates from the query lengths the runner has captured graphs for (K = q − 1,
    /// so every verify step replays one; plus K = 0), or [`FALLBACK_KS`] when it
    /// captures none.
    pub fn from_query_lens(lens: Option<&[usize]>) -> Self {
        match lens {
            None => Self::new(&FALLBACK_KS),
            Some(lens) => {
                let ks: Vec<usize> = std::iter::once(0)
                    .chain(lens.iter().filter(|&&q| q >= 1).map(|&q| q - 1))
                    .filter(|&k| k <= MAX_K)
                    .collect();
                Self::new(&ks)
            }
        }
    }

    /// Sorted, without duplicates; always holds 0.
    pub fn candidates(&self) -> &[usize] {
        &self.candidates
    }

    pub fn max_k(&self) -> usize {
        self.candidates.last().copied().unwrap_or(0)
    }

    /// Expected tokens a sequence emits with K slots: 1 plus the expected accepted.
    pub fn expected_tokens(scores: DraftScores, k: usize) -> f64 {
        1.0 + scores.iter().take(k).map(|&p| p as f64).sum::<f64>()
    }

    /// Seconds of the step the adaptive sequences cause at plain decode: their share
    /// of the fixed cost (by rows, beside `other`) and their own decode rows.
    pub fn plain_decode_secs(seqs: &[DraftSeq], other: StepLoad, cost: &StepCostModel) -> f64 {
        let b = seqs.len();
        if b == 0 {
            return 0.0;
        }
        let share = b as f64 / (b + other.rows) as f64;
        let [_, per_seq, ..] = cost.coefficients();
        let own: f64 = seqs
            .iter()
            .map(|s| per_seq + cost.row_cost(s.context, 0))
            .sum();
        (cost.fixed() * share + own).max(1e-9)
    }

    /// Whether drafting can pay for a sequence of context `context` at all this step: a
    /// first draft accepted with probability `best_p` (the most any draft of this drafter
    /// is expected to reach), costing its row plus `draft_secs` of drafter time, must
    /// beat the rate plain decode gives (`plain_rate`, tokens per second). When it
    /// cannot, the drafter is not asked.
    pub fn can_pay(
        best_p: f64,
        context: usize,
        draft_secs: f64,
        plain_rate: f64,
        cost: &StepCostModel,
    ) -> bool {
        best_p > plain_rate * (cost.row_cost(context, 1) + draft_secs)
    }

    /// One K for every adaptive sequence of the step (padded steps: every sequence
    /// costs 1 + K rows; unpadded: 1 + its draft length). A K > 0 whose rows exceed
    /// `row_budget` is not considered (its verify rows would not fit the step).
    pub fn choose(
        &self,
        seqs: &[DraftSeq],
        other: StepLoad,
        pad: bool,
        row_budget: usize,
        cost: &StepCostModel,
    ) -> usize {
        if seqs.is_empty() {
            return 0;
        }
        if pad && other == StepLoad::default() {
            if let Some(k) = self.choose_by_shape(seqs, row_budget, cost) {
                return k;
            }
        }
        let base = Self::plain_decode_secs(seqs, other, cost);
        let mut best = (f64::NEG_INFINITY, 0usize);
        for &k in &self.candidates {
            let mut tokens = 0.0;
            let mut secs = base;
            let mut rows = 0;
            for s in seqs {
                let q = if pad {
                    1 + k
                } else {
                    1 + s.scores.len().min(k)
                };
                tokens += Self::expected_tokens(s.scores, k);
                secs += (1..q).map(|j| cost.row_cost(s.context, j)).sum::<f64>();
                rows += q;
            }
            if k > 0 && rows > row_budget {
                continue;
            }
            let rate = tokens / secs;
            // Strictly better only: ties keep the smaller K.
            if rate > best.0 * (1.0 + 1e-9) {
                best = (rate, k);
            }
        }
        best.1
    }

    /// A padded step with nothing beside it is one shape per K (on a GPU, one replayed
    /// graph): the K whose expected tokens per second of that shape's measured time
    /// ([`StepCostModel::padded_step`]) is highest. None when a candidate's shape was not
    /// measured (the linear model prices the step then).
    fn choose_by_shape(
        &self,
        seqs: &[DraftSeq],
        row_budget: usize,
        cost: &StepCostModel,
    ) -> Option<usize> {
        let b = seqs.len();
        let contexts: usize = seqs.iter().map(|s| s.context).sum();
        let mut best = (f64::NEG_INFINITY, 0usize);
        for &k in &self.candidates {
            if k > 0 && b * (1 + k) > row_budget {
                continue;
            }
            let secs = cost.padded_step(b, 1 + k, contexts)?;
            let tokens: f64 = seqs
                .iter()
                .map(|s| Self::expected_tokens(s.scores, k))
                .sum();
            let rate = tokens / secs;
            // Strictly better only: ties keep the smaller K.
            if rate > best.0 * (1.0 + 1e-9) {
                best = (rate, k);
            }
        }
        Some(best.1)
    }

    /// A K for each adaptive sequence of an unpadded step (at most [`Self::max_k`] and
    /// its draft's length), maximising their expected tokens per second: drafted rows
    /// are bought best first (expected tokens per second of the row's cost) while they
    /// raise the rate, and while the step's rows stay within `row_budget`. The result is
    /// the optimum of that ratio, since each sequence's estimates fall with position.
    pub fn choose_each(
        &self,
        seqs: &[DraftSeq],
        other: StepLoad,
        row_budget: usize,
        cost: &StepCostModel,
    ) -> Vec<usize> {
        let mut ks = vec![0usize; seqs.len()];
        if seqs.is_empty() {
            return ks;
        }
        let max_k = self.max_k();
        // (value per second, sequence, position)
        let mut rows: Vec<(f64, usize, usize)> = Vec::new();
        for (i, s) in seqs.iter().enumerate() {
            for (j, &p) in s.scores.iter().take(max_k).enumerate() {
                let w = cost.row_cost(s.context, j + 1).max(1e-12);
                rows.push((p as f64 / w, i, j));
            }
        }
        rows.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)).then(x.2.cmp(&y.2)));
        let mut tokens = seqs.len() as f64;
        let mut secs = Self::plain_decode_secs(seqs, other, cost);
        let mut used = seqs.len();
        for (ratio, i, j) in rows {
            if used >= row_budget || ratio <= (tokens / secs) * (1.0 + 1e-9) {
                break;
            }
            // Positions of one sequence come in order (their ratios fall with j); a
            // draft whose estimates rise again is cut where they do.
            if ks[i] != j {
                continue;
            }
            ks[i] = j + 1;
            tokens += seqs[i].scores[j] as f64;
            secs += cost.row_cost(seqs[i].context, j + 1);
            used += 1;
        }
        ks
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec_decode::k_policy::StepShape;

    const ANY_BUDGET: usize = usize::MAX;

    fn seq(scores: &[f32]) -> DraftSeq<'_> {
        DraftSeq { scores, context: 0 }
    }

    #[test]
    fn adaptive_prefers_long_k_only_when_drafts_are_good() {
        // Cost: 10 ms per step + 1 ms per row.
        let cost = StepCostModel::from_coefficients(0.010, 0.0, 0.001);
        let a = AdaptiveK::new(&FALLBACK_KS);
        let none_else = StepLoad::default();
        let good = vec![0.95f32; 12];
        let bad = vec![0.05f32; 12];
        assert_eq!(
            a.choose(&[seq(&good)], none_else, true, ANY_BUDGET, &cost),
            12
        );
        assert_eq!(
            a.choose(&[seq(&bad)], none_else, true, ANY_BUDGET, &cost),
            0
        );
        // With no drafts at all, unpadded, every K costs the same: keep K = 0.
        let none: Vec<f32> = vec![];
        assert_eq!(
            a.choose(&[seq(&none)], none_else, false, ANY_BUDGET, &cost),
            0
        );
        // A steep per-row cost makes long drafts not worth it.
        let steep = StepCostModel::from_coefficients(0.001, 0.0, 0.01);
        let mid = vec![0.7f32, 0.5, 0.3, 0.2, 0.1, 0.05];
        let k = a.choose(&[seq(&mid)], none_else, true, ANY_BUDGET, &steep);
        assert!(k == 0 || k == 1, "{k}");
        assert!((AdaptiveK::expected_tokens(&mid, 2) - 2.2).abs() < 1e-6);
    }

    #[test]
    fn prefill_sharing_the_step_does_not_make_drafts_cheap() {
        // 1 ms per row and nothing fixed: alone, K = 1 with a 0.5 draft gives
        // 1.5 tokens / 2 ms < 1 token / 1 ms, so plain decode wins. Beside a 100-token
        // prefill chunk the extra row still costs 1 ms of the step (the chunk runs
        // whatever K is), so plain decode still wins. The old pricing charged the chunk's
        // time to the decode tokens, 1.5 / 102 ms > 1 / 101 ms, and drafted.
        let cost = StepCostModel::from_coefficients(0.0, 0.0, 0.001);
        let a = AdaptiveK::new(&[0, 1]);
        let half = [0.5f32];
        let prefill = StepLoad { seqs: 1, rows: 100 };
        for pad in [true, false] {
            assert_eq!(
                a.choose(&[seq(&half)], StepLoad::default(), pad, 10, &cost),
                0
            );
            assert_eq!(a.choose(&[seq(&half)], prefill, pad, 10, &cost), 0);
            assert_eq!(a.choose_each(&[seq(&half)], prefill, 10, &cost), vec![0]);
        }
        // A large fixed cost is shared with the chunk by rows, so it buys drafts less
        // beside a prefill than alone: 20 ms fixed, 1 ms a row, a 0.1 draft pays alone
        // (1.1 / 22 ms > 1 / 21 ms) but not beside 100 prefill rows (the sequence's
        // share of the fixed cost is 0.2 ms: 1.1 / 2.2 ms < 1 / 1.2 ms).
        let fixed = StepCostModel::from_coefficients(0.020, 0.0, 0.001);
        let tenth = [0.1f32];
        assert_eq!(
            a.choose_each(&[seq(&tenth)], StepLoad::default(), 10, &fixed),
            vec![1]
        );
        assert_eq!(a.choose_each(&[seq(&tenth)], prefill, 10, &fixed), vec![0]);
    }

    #[test]
    fn a_compute_bound_batch_drafts_nothing() {
        // results/2026-12-02-cpu-spec-row-price: a CPU step of 32 sequences, 13 ms fixed + 1.3 ms a row (rows
        // cost what decode rows cost). Plain decode gives 32 / 54.6 ms; a drafted row
        // pays only if accepted with probability > 1.3 × 32 / 54.6 ≈ 0.76. Drafts
        // accepted 35–55 % of the time (what the corpora measured) buy no row, so the
        // step is plain decode; one sequence alone drafts them.
        let cost = StepCostModel::from_coefficients(0.013, 0.0, 0.0013);
        let a = AdaptiveK::new(&FALLBACK_KS);
        let typical = [0.55f32, 0.35, 0.2, 0.1, 0.05];
        let many: Vec<DraftSeq> = (0..32).map(|_| seq(&typical)).collect();
        assert!(a
            .choose_each(&many, StepLoad::default(), ANY_BUDGET, &cost)
            .iter()
            .all(|&k| k == 0));
        assert_eq!(
            a.choose(&many, StepLoad::default(), false, ANY_BUDGET, &cost),
            0
        );
        assert_eq!(
            a.choose(&many, StepLoad::default(), true, ANY_BUDGET, &cost),
            0
        );
        let alone = a.choose_each(&[seq(&typical)], StepLoad::default(), ANY_BUDGET, &cost);
        assert!(alone[0] >= 2, "{alone:?}");
        // Nothing can pay: the drafter is not even asked.
        let plain = 32.0 / AdaptiveK::plain_decode_secs(&many, StepLoad::default(), &cost);
        assert!(!AdaptiveK::can_pay(0.7, 0, 0.0, plain, &cost));
        let one = 1.0 / AdaptiveK::plain_decode_secs(&many[..1], StepLoad::default(), &cost);
        assert!(AdaptiveK::can_pay(0.7, 0, 0.0, one, &cost));
        // Drafter time counts against it too.
        assert!(!AdaptiveK::can_pay(0.7, 0, 0.2, one, &cost));
    }

    #[test]
    fn each_sequence_gets_its_own_k() {
        let cost = StepCostModel::from_coefficients(0.013, 0.0, 0.0013);
        let a = AdaptiveK::new(&FALLBACK_KS);
        let sure = [0.99f32, 0.98, 0.97, 0.96, 0.95, 0.94, 0.93, 0.92];
        let weak = [0.3f32, 0.1];
        let mut seqs: Vec<DraftSeq> = (0..8).map(|_| seq(&weak)).collect();
        seqs.push(seq(&sure));
        let ks = a.choose_each(&seqs, StepLoad::default(), ANY_BUDGET, &cost);
        assert_eq!(&ks[..8], &[0; 8]);
        assert_eq!(ks[8], 8);
        // The step's rows stay within the budget: 9 decode rows + 3 drafted.
        let ks = a.choose_each(&seqs, StepLoad::default(), 12, &cost);
        assert_eq!(ks.iter().sum::<usize>(), 3, "{ks:?}");
        // Attention over a long context makes a row dearer: a sequence thousands of
        // tokens long drafts less than a short one with the same estimates.
        let att = StepCostModel::from_terms([0.010, 0.0, 0.001, 0.0, 1e-6]);
        let mid = [0.8f32, 0.6, 0.45, 0.3];
        let short = DraftSeq {
            scores: &mid,
            context: 10,
        };
        let long = DraftSeq {
            scores: &mid,
            context: 4000,
        };
        let ks = a.choose_each(
            &[short, long, short, long],
            StepLoad::default(),
            ANY_BUDGET,
            &att,
        );
        assert!(ks[0] > ks[1] && ks[0] == ks[2] && ks[1] == ks[3], "{ks:?}");
    }

    #[test]
    fn a_k_whose_rows_do_not_fit_the_budget_is_never_picked() {
        let cost = StepCostModel::from_coefficients(0.010, 0.0, 0.001);
        let a = AdaptiveK::new(&FALLBACK_KS);
        let good = vec![0.95f32; 12];
        let two = [seq(&good), seq(&good)];
        // Two sequences, 20 rows left: 2 x (1 + 8) fits, 2 x (1 + 12) does not.
        let k = a.choose(&two, StepLoad::default(), true, 20, &cost);
        assert_eq!(k, 8);
        // Nothing fits: plain decode.
        assert_eq!(a.choose(&two, StepLoad::default(), true, 3, &cost), 0);
        assert_eq!(
            a.choose_each(&two, StepLoad::default(), 2, &cost),
            vec![0, 0]
        );
    }

    #[test]
    fn candidates_come_from_the_captured_query_lengths() {
        let a = AdaptiveK::from_query_lens(Some(&[9, 1, 2, 5, 5]));
        assert_eq!(a.candidates(), &[0, 1, 4, 8]);
        assert_eq!(a.max_k(), 8);
        // Only one captured length: K = 0 is still there.
        assert_eq!(AdaptiveK::from_query_lens(Some(&[7])).candidates(), &[0, 6]);
        // Lengths past the largest K any policy may use are ignored.
        let long = AdaptiveK::from_query_lens(Some(&[1, MAX_K + 1, MAX_K + 2]));
        assert_eq!(long.candidates(), &[0, MAX_K]);
        // No graphs: today's list.
        assert_eq!(AdaptiveK::from_query_lens(None).candidates(), &FALLBACK_KS);
    }

    #[test]
    fn padded_k_follows_the_measured_step_shapes() {
        // 32 sequences whose drafts are accepted 90 % / 80 % / ... Per row the line says
        // K = 12 pays; the measured shapes say 32 x 13 costs 2.8 x a decode step and
        // 32 x 5 only 1.3 x (an 8B model's verify steps), so K = 4 wins.
        let step = |b: usize, q: usize| {
            let mut s = StepShape::default();
            for _ in 0..b {
                s = s.plus(StepShape::verify(0, q));
            }
            s
        };
        let mut pts = vec![];
        for b in [1usize, 8, 16, 32] {
            for (q, x) in [(1, 1.0), (5, 1.3), (7, 1.7), (9, 2.1), (13, 2.8)] {
                let base = 0.010 + 0.0002 * b as f64;
                pts.push((
                    step(b, q),
                    base * if b == 32 {
                        x
                    } else {
                        1.0 + (x - 1.0) * b as f64 / 32.0
                    },
                ));
            }
        }
        let cost = StepCostModel::fit_calibration(&pts);
        let a = AdaptiveK::new(&[0, 4, 6, 8, 12]);
        let falling: Vec<f32> = (0..12).map(|i| 0.9f32.powi(i + 1)).collect();
        let many: Vec<DraftSeq> = (0..32).map(|_| seq(&falling)).collect();
        assert_eq!(
            a.choose(&many, StepLoad::default(), true, ANY_BUDGET, &cost),
            4
        );
        // One sequence: its verify rows cost almost nothing, K = 12 pays.
        assert_eq!(
            a.choose(&many[..1], StepLoad::default(), true, ANY_BUDGET, &cost),
            12
        );
        // Beside a prefill chunk the step is not one measured shape: the linear model.
        let prefill = StepLoad { seqs: 1, rows: 64 };
        let k = a.choose(&many, prefill, true, ANY_BUDGET, &cost);
        assert!(a.candidates().contains(&k));
    }
}
