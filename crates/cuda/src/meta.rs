//! Per-step metadata staged into one fixed device buffer before anything is launched.
//! Layout (u32 each): tokens[T] positions[T] token_seq[T] logit_rows[L] seq_bt_off[S]
//! seq_q_start[S + 1] block_tables[..]. Offsets depend only on (T, L, S), so a padded uniform step of a
//! given graph key always finds its arrays at the same addresses.

use anyhow::{ensure, Result};
use wring_backend::StepInput;

/// Where a padded batch's extra sequences write their K/V: blocks past the real pool.
/// A graph's padding gives every token a logit row (the captured shape); an eager step's
/// (one extra sequence up to its token bucket) adds none.
#[derive(Debug, Clone, Copy)]
pub struct Padding {
    pub seqs: usize,
    pub query_len: usize,
    pub scratch_first_block: u32,
    pub logits_for_all: bool,
}

/// The step as the kernels see it (after padding).
#[derive(Debug, Clone, Default)]
pub struct StepLayout {
    pub tokens: usize,
    /// Sequences (after padding).
    pub seqs: usize,
    /// Logit rows computed (padded for graphs).
    pub logit_rows: usize,
    /// Logit rows the caller asked for (the first ones of `logit_rows`).
    pub real_logit_rows: usize,
    /// u32 offsets of each array inside the metadata buffer.
    pub off_tokens: usize,
    pub off_positions: usize,
    pub off_token_seq: usize,
    pub off_logit_rows: usize,
    pub off_seq_bt_off: usize,
    /// First query token of each sequence, and the step's token count at the end.
    pub off_seq_q_start: usize,
    pub off_block_tables: usize,
    /// Total u32s used.
    pub len: usize,
    /// Token ids, kept on the host to range-check them against the vocabulary.
    pub host_tokens: Vec<u32>,
}

/// Fills `stage` (host, u32) with the step's metadata, padding it to `pad.seqs`
/// sequences when given. `stage` must hold at least the returned `len`.
pub fn stage_step(
    step: &StepInput,
    block_size: usize,
    pad: Option<Padding>,
    stage: &mut [u32],
) -> Result<StepLayout> {
    let real_seqs = step.seqs.len();
    let (seqs, extra_tokens) = match pad {
        Some(p) => {
            ensure!(p.seqs >= real_seqs, "padding below the batch size");
            (p.seqs, (p.seqs - real_seqs) * p.query_len)
        }
        None => (real_seqs, 0),
    };
    let t = step.tokens.len() + extra_tokens;
    let real_l = step.logit_rows.len();
    let l = if pad.is_some_and(|p| p.logits_for_all) {
        t
    } else {
        real_l
    };
    let bt_len: usize = step
        .seqs
        .iter()
        .map(|s| s.context_len.div_ceil(block_size))
        .sum::<usize>()
        + pad.map_or(0, |p| (seqs - real_seqs) * p.query_len.div_ceil(block_size));
    let mut lay = StepLayout {
        tokens: t,
        logit_rows: l,
        real_logit_rows: real_l,
        off_tokens: 0,
        off_positions: t,
        off_token_seq: 2 * t,
        off_logit_rows: 3 * t,
        seqs,
        off_seq_bt_off: 3 * t + l,
        off_seq_q_start: 3 * t + l + seqs,
        off_block_tables: 3 * t + l + 2 * seqs + 1,
        len: 3 * t + l + 2 * seqs + 1 + bt_len,
        host_tokens: Vec::with_capacity(t),
    };
    ensure!(
        lay.len <= stage.len(),
        "step metadata needs {} entries but the staging buffer holds {}",
        lay.len,
        stage.len()
    );
    let mut bt = lay.off_block_tables;
    let mut ti = 0;
    for (si, s) in step.seqs.iter().enumerate() {
        stage[lay.off_seq_bt_off + si] = (bt - lay.off_block_tables) as u32;
        stage[lay.off_seq_q_start + si] = ti as u32;
        let need = s.context_len.div_ceil(block_size);
        stage[bt..bt + need].copy_from_slice(&s.block_table[..need]);
        bt += need;
        for j in 0..s.query_len {
            let src = s.query_start + j;
            stage[lay.off_tokens + ti] = step.tokens[src];
            stage[lay.off_positions + ti] = step.positions[src];
            stage[lay.off_token_seq + ti] = si as u32;
            ti += 1;
        }
    }
    if let Some(p) = pad {
        let need = p.query_len.div_ceil(block_size);
        for si in real_seqs..seqs {
            stage[lay.off_seq_bt_off + si] = (bt - lay.off_block_tables) as u32;
            stage[lay.off_seq_q_start + si] = ti as u32;
            for b in 0..need {
                stage[bt + b] = p.scratch_first_block + b as u32;
            }
            bt += need;
            for j in 0..p.query_len {
                stage[lay.off_tokens + ti] = 0;
                stage[lay.off_positions + ti] = j as u32;
                stage[lay.off_token_seq + ti] = si as u32;
                ti += 1;
            }
        }
    }
    stage[lay.off_seq_q_start + seqs] = ti as u32;
    for (i, &r) in step.logit_rows.iter().enumerate() {
        stage[lay.off_logit_rows + i] = r as u32;
    }
    for i in real_l..l {
        stage[lay.off_logit_rows + i] = 0;
    }
    lay.host_tokens = stage[..t].to_vec();
    Ok(lay)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wring_backend::SeqInput;

    fn decode_step(n: usize) -> StepInput {
        let mut s = StepInput::default();
        for i in 0..n {
            s.seqs.push(SeqInput {
                query_start: i,
                query_len: 1,
                context_len: 20 + i,
                block_table: vec![10 + 2 * i as u32, 11 + 2 * i as u32, 99],
            });
            s.tokens.push(7 + i as u32);
            s.positions.push(19 + i as u32);
            s.logit_rows.push(i);
        }
        s
    }

    #[test]
    fn padded_layout_depends_only_on_the_bucket() {
        let mut a = vec![0u32; 1000];
        let mut b = vec![0u32; 1000];
        let pad = Some(Padding {
            seqs: 4,
            query_len: 1,
            scratch_first_block: 500,
            logits_for_all: true,
        });
        let la = stage_step(&decode_step(3), 16, pad, &mut a).unwrap();
        let lb = stage_step(&decode_step(2), 16, pad, &mut b).unwrap();
        assert_eq!((la.tokens, la.logit_rows), (4, 4));
        assert_eq!(la.off_block_tables, lb.off_block_tables);
        assert_eq!(la.real_logit_rows, 3);
        // Real sequence 1: two blocks needed for 21 tokens; the third id is not copied.
        assert_eq!(a[la.off_seq_bt_off + 1], 2);
        assert_eq!(
            &a[la.off_block_tables + 2..la.off_block_tables + 4],
            &[12, 13]
        );
        // The padded sequence writes to the scratch block at position 0.
        assert_eq!(a[la.len - 1], 500);
        assert_eq!(a[la.off_positions + 3], 0);
        assert_eq!(a[la.off_token_seq + 3], 3);
        // Each sequence's first query token, then the token count.
        assert_eq!(
            &a[la.off_seq_q_start..la.off_seq_q_start + 5],
            &[0, 1, 2, 3, 4]
        );
    }

    #[test]
    fn an_eager_pad_adds_one_scratch_sequence_and_no_logit_rows() {
        let mut a = vec![0u32; 1000];
        let pad = Some(Padding {
            seqs: 4,
            query_len: 29,
            scratch_first_block: 500,
            logits_for_all: false,
        });
        let la = stage_step(&decode_step(3), 16, pad, &mut a).unwrap();
        assert_eq!((la.tokens, la.seqs, la.logit_rows), (32, 4, 3));
        assert_eq!(
            a[la.off_seq_q_start + 3],
            3,
            "the pad sequence starts after the real tokens"
        );
        assert_eq!(a[la.off_seq_q_start + 4], 32);
        assert_eq!(a[la.off_positions + 31], 28);
        assert_eq!(a[la.off_token_seq + 31], 3);
        // 29 tokens in blocks of 16: two scratch blocks.
        assert_eq!(&a[la.len - 2..la.len], &[500, 501]);
    }

    #[test]
    fn too_small_staging_is_an_error() {
        let mut a = vec![0u32; 5];
        assert!(stage_step(&decode_step(3), 16, None, &mut a).is_err());
    }
}
