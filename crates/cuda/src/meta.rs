//! Per-step metadata staged into one fixed device buffer before anything is launched.
//! Layout (u32 each): tokens[T] positions[T] token_seq[T] logit_rows[L] seq_bt_off[S]
//! seq_q_start[S + 1] block_tables[..]. Offsets depend only on (T, L, S), so a step padded
//! to a graph key always finds its arrays at the same addresses.

use crate::graphs::GraphKey;
use anyhow::{ensure, Result};
use wring_backend::StepInput;

/// Sequences added to a step, writing their K/V to blocks past the real pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PadRun {
    /// Inserted after this many of the step's real sequences.
    pub after_seqs: usize,
    pub seqs: usize,
    pub query_len: usize,
}

/// How many logit rows a padded step computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PadLogits {
    /// Only the rows the step asked for (an eager step padded to its token bucket).
    Real,
    /// One per token (a uniform graph: its captured shape).
    AllTokens,
    /// This many (a chunk graph: its rows' tokens and the chunk's last); the rows asked for
    /// come first, the rest repeat token 0.
    Fixed(usize),
}

/// How a step is padded: runs of extra sequences, the logit rows, where pads write K/V.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Padding {
    pub runs: Vec<PadRun>,
    pub logits: PadLogits,
    pub scratch_first_block: u32,
}

impl Padding {
    /// A graph key's padding of `step` (which must have that key).
    pub fn for_key(key: GraphKey, step: &StepInput, scratch_first_block: u32) -> Self {
        let real = step.seqs.len();
        if key.chunk == 0 {
            return Self {
                runs: vec![PadRun {
                    after_seqs: real,
                    seqs: key.bucket - real,
                    query_len: key.query_len,
                }],
                logits: PadLogits::AllTokens,
                scratch_first_block,
            };
        }
        // Rows, their pads, the chunk, then one pad sequence filling the chunk's bucket.
        let rows = real - 1;
        let chunk = step.seqs[rows].query_len;
        Self {
            runs: vec![
                PadRun {
                    after_seqs: rows,
                    seqs: key.bucket - rows,
                    query_len: key.query_len,
                },
                PadRun {
                    after_seqs: real,
                    seqs: 1,
                    query_len: key.chunk - chunk,
                },
            ],
            logits: PadLogits::Fixed(key.logit_rows()),
            scratch_first_block,
        }
    }

    /// An eager step padded by one sequence of `extra` tokens after its own.
    pub fn eager(step: &StepInput, extra: usize, scratch_first_block: u32) -> Self {
        Self {
            runs: vec![PadRun {
                after_seqs: step.seqs.len(),
                seqs: 1,
                query_len: extra,
            }],
            logits: PadLogits::Real,
            scratch_first_block,
        }
    }
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

/// Fills `stage` (host, u32) with the step's metadata, with the sequences of `pad`
/// inserted where it says. `stage` must hold at least the returned `len`.
pub fn stage_step(
    step: &StepInput,
    block_size: usize,
    pad: Option<&Padding>,
    stage: &mut [u32],
) -> Result<StepLayout> {
    let real_seqs = step.seqs.len();
    let runs = pad.map_or(&[][..], |p| &p.runs[..]);
    ensure!(
        runs.iter().all(|r| r.after_seqs <= real_seqs),
        "padding after sequence {} of {real_seqs}",
        runs.iter().map(|r| r.after_seqs).max().unwrap_or(0)
    );
    let seqs = real_seqs + runs.iter().map(|r| r.seqs).sum::<usize>();
    let t = step.tokens.len() + runs.iter().map(|r| r.seqs * r.query_len).sum::<usize>();
    let real_l = step.logit_rows.len();
    let l = match pad.map(|p| p.logits) {
        None | Some(PadLogits::Real) => real_l,
        Some(PadLogits::AllTokens) => t,
        Some(PadLogits::Fixed(n)) => n,
    };
    ensure!(
        l >= real_l,
        "padding to {l} logit rows below the {real_l} asked for"
    );
    let bt_len: usize = step
        .seqs
        .iter()
        .map(|s| s.context_len.div_ceil(block_size))
        .sum::<usize>()
        + runs
            .iter()
            .map(|r| r.seqs * r.query_len.div_ceil(block_size))
            .sum::<usize>();
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
    let mut w = Writer {
        stage,
        lay: &lay,
        bt: lay.off_block_tables,
        ti: 0,
        si: 0,
    };
    let scratch = pad.map_or(0, |p| p.scratch_first_block);
    // Where each real sequence's first token lands (for the logit rows).
    let mut staged_start = Vec::with_capacity(real_seqs);
    for (real, s) in step.seqs.iter().enumerate() {
        w.pads(runs, real, scratch, block_size);
        staged_start.push(w.ti);
        let need = s.context_len.div_ceil(block_size);
        w.sequence(s.block_table[..need].iter().copied());
        for j in 0..s.query_len {
            let src = s.query_start + j;
            w.token(step.tokens[src], step.positions[src]);
        }
    }
    w.pads(runs, real_seqs, scratch, block_size);
    let (ti, si) = (w.ti, w.si);
    debug_assert_eq!((ti, si), (t, seqs));
    stage[lay.off_seq_q_start + seqs] = ti as u32;
    for (i, &r) in step.logit_rows.iter().enumerate() {
        // The sequence holding token r (sequences are contiguous, in order).
        let s = step.seqs.partition_point(|q| q.query_start <= r) - 1;
        let staged = staged_start[s] + (r - step.seqs[s].query_start);
        stage[lay.off_logit_rows + i] = staged as u32;
    }
    for i in real_l..l {
        stage[lay.off_logit_rows + i] = 0;
    }
    lay.host_tokens = stage[..t].to_vec();
    Ok(lay)
}

/// Writes sequences and their tokens into the staging buffer in order.
struct Writer<'a> {
    stage: &'a mut [u32],
    lay: &'a StepLayout,
    /// Next block-table entry, token and sequence.
    bt: usize,
    ti: usize,
    si: usize,
}

impl Writer<'_> {
    /// Starts the next sequence with these blocks.
    fn sequence(&mut self, blocks: impl ExactSizeIterator<Item = u32>) {
        let lay = self.lay;
        self.stage[lay.off_seq_bt_off + self.si] = (self.bt - lay.off_block_tables) as u32;
        self.stage[lay.off_seq_q_start + self.si] = self.ti as u32;
        let n = blocks.len();
        for (slot, b) in self.stage[self.bt..self.bt + n].iter_mut().zip(blocks) {
            *slot = b;
        }
        self.bt += n;
        self.si += 1;
    }

    /// A token of the sequence started last.
    fn token(&mut self, id: u32, position: u32) {
        let lay = self.lay;
        self.stage[lay.off_tokens + self.ti] = id;
        self.stage[lay.off_positions + self.ti] = position;
        self.stage[lay.off_token_seq + self.ti] = (self.si - 1) as u32;
        self.ti += 1;
    }

    /// The pad sequences inserted after `after` real ones: token 0 at positions 0..,
    /// K/V in the scratch blocks.
    fn pads(&mut self, runs: &[PadRun], after: usize, scratch: u32, block_size: usize) {
        for r in runs.iter().filter(|r| r.after_seqs == after) {
            let need = r.query_len.div_ceil(block_size) as u32;
            for _ in 0..r.seqs {
                self.sequence((0..need).map(|b| scratch + b));
                for j in 0..r.query_len {
                    self.token(0, j as u32);
                }
            }
        }
    }
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
                prompt_len: 0,
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
        let key = GraphKey::uniform(4, 1);
        let (s3, s2) = (decode_step(3), decode_step(2));
        let la = stage_step(&s3, 16, Some(&Padding::for_key(key, &s3, 500)), &mut a).unwrap();
        let lb = stage_step(&s2, 16, Some(&Padding::for_key(key, &s2, 500)), &mut b).unwrap();
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
        let s3 = decode_step(3);
        let pad = Padding::eager(&s3, 29, 500);
        let la = stage_step(&s3, 16, Some(&pad), &mut a).unwrap();
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

    /// `rows` decode rows then one prompt chunk of `chunk` tokens at positions 0.., its
    /// last token a logit row.
    fn chunk_step(rows: usize, chunk: usize) -> StepInput {
        let mut s = decode_step(rows);
        s.seqs.push(SeqInput {
            query_start: rows,
            query_len: chunk,
            context_len: chunk,
            block_table: (0..chunk.div_ceil(16) as u32).map(|b| 200 + b).collect(),
            prompt_len: 0,
        });
        s.tokens.extend((0..chunk as u32).map(|i| 1000 + i));
        s.positions.extend(0..chunk as u32);
        s.logit_rows.push(rows + chunk - 1);
        s
    }

    #[test]
    fn a_chunk_graph_layout_depends_only_on_its_key() {
        let opts = crate::options::CudaOptions {
            chunk_graph_max: 1024,
            ..Default::default()
        };
        let (a_step, b_step) = (chunk_step(3, 50), chunk_step(4, 55));
        let key = crate::graphs::key_for(&a_step, &opts).expect("a chunk key");
        assert_eq!(key, crate::graphs::key_for(&b_step, &opts).unwrap());
        assert_eq!((key.bucket, key.query_len, key.chunk), (4, 1, 96));
        let (mut a, mut b) = (vec![0u32; 2000], vec![0u32; 2000]);
        let la = stage_step(
            &a_step,
            16,
            Some(&Padding::for_key(key, &a_step, 500)),
            &mut a,
        )
        .unwrap();
        let lb = stage_step(
            &b_step,
            16,
            Some(&Padding::for_key(key, &b_step, 500)),
            &mut b,
        )
        .unwrap();
        for l in [&la, &lb] {
            // 4 rows (real, then pads), the chunk, the chunk's pad; 4 + 1 logit rows.
            assert_eq!((l.tokens, l.seqs, l.logit_rows), (4 + 96, 6, 5));
            assert_eq!(l.off_block_tables, la.off_block_tables);
        }
        assert_eq!((la.real_logit_rows, lb.real_logit_rows), (4, 5));
        // Step a: the chunk starts after the 4 padded rows; its pad fills the bucket.
        let starts = &a[la.off_seq_q_start..la.off_seq_q_start + 7];
        assert_eq!(starts, &[0, 1, 2, 3, 4, 54, 100]);
        assert_eq!(&a[4..6], &[1000, 1001], "chunk tokens after the row pad");
        assert_eq!(a[la.off_positions + 3], 0, "the row pad at position 0");
        // Logit rows: the 3 real rows, then the chunk's last token (staged index 53).
        assert_eq!(
            &a[la.off_logit_rows..la.off_logit_rows + 5],
            &[0, 1, 2, 53, 0]
        );
        // Step b: 4 real rows, the chunk at 4.., its last token at 58.
        assert_eq!(
            &b[lb.off_logit_rows..lb.off_logit_rows + 5],
            &[0, 1, 2, 3, 58]
        );
        // The chunk's blocks are its own; the pads' are scratch.
        let chunk_bt = lb.off_block_tables + b[lb.off_seq_bt_off + 4] as usize;
        assert_eq!(&b[chunk_bt..chunk_bt + 4], &[200, 201, 202, 203]);
        let pad_bt = lb.off_block_tables + b[lb.off_seq_bt_off + 5] as usize;
        assert_eq!(b[pad_bt], 500);
    }

    #[test]
    fn chunk_keys_need_uniform_rows_one_chunk_and_its_last_logit_row_at_most() {
        let opts = crate::options::CudaOptions {
            chunk_graph_max: 1024,
            ..Default::default()
        };
        let key = |s: &StepInput| crate::graphs::key_for(s, &opts);
        // A prompt alone: no rows.
        let alone = chunk_step(0, 100);
        assert_eq!(key(&alone).map(|k| (k.bucket, k.chunk)), Some((0, 128)));
        // The chunk's pad keeps at least 17 tokens (it runs on the prefill kernel).
        assert_eq!(key(&chunk_step(2, 47)).map(|k| k.chunk), Some(64));
        assert_eq!(key(&chunk_step(2, 48)).map(|k| k.chunk), Some(96));
        // A chunk that is not the prompt's last asks for no logit row: same key.
        let mut middle = chunk_step(5, 40);
        middle.logit_rows.pop();
        assert_eq!(key(&middle), key(&chunk_step(5, 40)));
        // Every row of the chunk a logit row (prompt logprobs): none.
        let mut all = chunk_step(2, 40);
        all.logit_rows = (0..all.tokens.len()).collect();
        assert_eq!(key(&all), None);
        // Chunks past WRING_CUDA_CHUNK_GRAPHS: none.
        assert_eq!(key(&chunk_step(2, 1100)), None);
        let off = crate::options::CudaOptions {
            chunk_graph_max: 0,
            ..Default::default()
        };
        assert_eq!(crate::graphs::key_for(&chunk_step(2, 40), &off), None);
        // Two chunks: none.
        let mut two = chunk_step(0, 40);
        two.seqs.push(SeqInput {
            query_start: 40,
            query_len: 20,
            context_len: 20,
            block_table: vec![300, 301],
            prompt_len: 0,
        });
        two.tokens.extend(0..20);
        two.positions.extend(0..20);
        assert_eq!(key(&two), None);
        // A uniform step keeps its uniform key.
        assert_eq!(key(&decode_step(3)), Some(GraphKey::uniform(4, 1)));
    }

    #[test]
    fn too_small_staging_is_an_error() {
        let mut a = vec![0u32; 5];
        assert!(stage_step(&decode_step(3), 16, None, &mut a).is_err());
    }
}
