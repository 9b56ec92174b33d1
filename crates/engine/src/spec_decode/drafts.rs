//! One step's drafts as the verify step carries them: `[B][K]` tokens plus
//! `valid_len[B]` (invariant 2 of ARCHITECTURE.md: slots at or past `valid_len`
//! are pads, rejected whatever token they hold).

use std::collections::HashMap;

/// Token id written into pad slots; its value never matters.
pub const PAD_TOKEN: u32 = 0;

/// Drafts for every decoding sequence of one step, in one order (row b).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepDrafts {
    /// The step's K: draft slots per sequence when padded (the widest row otherwise).
    pub k: usize,
    /// Sequence of each row.
    pub ids: Vec<u64>,
    /// `[B][K]`, row-major: real draft tokens, then `PAD_TOKEN`.
    pub tokens: Vec<u32>,
    /// Real draft tokens per row.
    pub valid_len: Vec<usize>,
    /// Query slots each row carries after its last token: K when padded (fewer only
    /// where the context has no room left), `valid_len` when not.
    pub slots: Vec<usize>,
    /// The drafter's running probabilities for each row's real tokens, when it has them.
    pub(crate) scores: Vec<Option<Vec<f32>>>,
    /// Rows under the dynamic-K policy (their acceptance feeds its controller).
    pub(crate) dynamic: Vec<bool>,
    /// Leading draft tokens of each row that its grammar forced.
    pub(crate) forced: Vec<usize>,
    /// Rows whose draft is the drafter's own (a forced run it drafted too included):
    /// their acceptance teaches the drafter's statistics; a run of forced tokens alone,
    /// accepted by construction, would not.
    pub(crate) from_drafter: Vec<bool>,
    row_of: HashMap<u64, usize>,
}

/// One row as the planner built it.
pub(crate) struct DraftRow {
    pub id: u64,
    pub tokens: Vec<u32>,
    pub slots: usize,
    pub scores: Option<Vec<f32>>,
    pub dynamic: bool,
    /// Leading tokens from the grammar.
    pub forced: usize,
    pub from_drafter: bool,
}

impl StepDrafts {
    /// Lays rows out as `[B][k]`; each row holds at most `k` tokens and slots.
    pub(crate) fn from_rows(k: usize, rows: Vec<DraftRow>) -> Self {
        let mut d = Self {
            k,
            tokens: Vec::with_capacity(rows.len() * k),
            ..Self::default()
        };
        for (b, r) in rows.into_iter().enumerate() {
            debug_assert!(r.tokens.len() <= r.slots && r.slots <= k);
            debug_assert!(r.forced <= r.tokens.len());
            d.row_of.insert(r.id, b);
            d.ids.push(r.id);
            d.valid_len.push(r.tokens.len());
            d.slots.push(r.slots);
            d.tokens.extend_from_slice(&r.tokens);
            d.tokens
                .extend(std::iter::repeat_n(PAD_TOKEN, k - r.tokens.len()));
            d.scores.push(r.scores);
            d.dynamic.push(r.dynamic);
            d.forced.push(r.forced);
            d.from_drafter.push(r.from_drafter);
        }
        d
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Row of sequence `id`, if it has one this step.
    pub fn row_of(&self, id: u64) -> Option<usize> {
        self.row_of.get(&id).copied()
    }

    /// Query slots sequence `id` carries this step (0: plain decode).
    pub fn slots_for(&self, id: u64) -> usize {
        self.row_of(id).map_or(0, |b| self.slots[b])
    }

    /// Row b's real draft tokens.
    pub fn draft(&self, b: usize) -> &[u32] {
        &self.tokens[b * self.k..b * self.k + self.valid_len[b]]
    }

    /// What row b feeds into its query slots: the draft, then pads.
    pub fn slot_tokens(&self, b: usize) -> &[u32] {
        &self.tokens[b * self.k..b * self.k + self.slots[b]]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: u64, tokens: &[u32], slots: usize) -> DraftRow {
        DraftRow {
            id,
            tokens: tokens.to_vec(),
            slots,
            scores: None,
            dynamic: false,
            forced: 0,
            from_drafter: true,
        }
    }

    #[test]
    fn rows_are_padded_to_k_and_looked_up_by_id() {
        let d = StepDrafts::from_rows(3, vec![row(7, &[5, 6], 3), row(9, &[], 3), row(4, &[1], 2)]);
        assert_eq!(
            d.tokens,
            vec![5, 6, PAD_TOKEN, 0, 0, 0, 1, PAD_TOKEN, PAD_TOKEN]
        );
        assert_eq!(d.valid_len, vec![2, 0, 1]);
        assert_eq!(
            (d.draft(0), d.slot_tokens(0)),
            (&[5, 6][..], &[5, 6, 0][..])
        );
        assert_eq!(d.slot_tokens(2), &[1, PAD_TOKEN]);
        assert_eq!((d.slots_for(9), d.slots_for(4), d.slots_for(1)), (3, 2, 0));
        assert_eq!(d.row_of(4), Some(2));
    }
}
