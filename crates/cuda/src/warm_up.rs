//! The step shapes a fresh server would otherwise meet cold (`Backend::warm_up_steps`):
//! each graph key's first sighting runs eagerly and its second is captured (a capture step
//! ~6.2 ms on the 135M, a replay ~1.8 ms), and an eager step of a new token bucket pays
//! cuBLAS's per-shape set-up (2–13 ms on the H200, results/2026-12-03-eager-pad). The step log of
//! results/2026-12-04-chunk-graphs: a fresh server's eager prompt
//! steps cost 5.3 ms against 2.5 ms in a second pass. Which shapes: the rules of
//! `graphs.rs` and `options.rs`, enumerated — nothing here decides a key.

use wring_backend::WarmUpStep;

use crate::graphs::MAX_CHUNK_GRAPHS;
use crate::options::EAGER_PAD_MIN_TOKENS;
use crate::options::{chunk_token_bucket, eager_token_bucket, CudaOptions, GraphMode};
use crate::params::PREFILL_MIN_Q;

/// Chunk graphs warmed only for chunk buckets up to this many tokens (the common prompt
/// steps; a key per row bucket, q and chunk bucket, so larger ones would multiply).
const WARM_CHUNK_MAX: usize = 256;

/// Uniform graph keys (every captured batch bucket × `query_lens` captured), every eager
/// token bucket of a prompt alone, and, with chunk graphs on, rows of each bucket beside
/// the largest chunk of each chunk bucket up to [`WARM_CHUNK_MAX`] tokens.
pub fn warm_up_steps(
    opts: &CudaOptions,
    query_lens: &[usize],
    max_seqs: usize,
    max_tokens: usize,
) -> Vec<WarmUpStep> {
    let max_tokens = max_tokens.min(opts.max_tokens);
    let graphs = opts.graphs == GraphMode::On;
    let qs: Vec<usize> = query_lens
        .iter()
        .copied()
        .filter(|q| opts.query_lens.contains(q))
        .collect();
    let mut steps = Vec::new();
    if graphs {
        for &b in opts.buckets.iter().filter(|&&b| b <= max_seqs) {
            for &q in qs.iter().filter(|&&q| b * q <= max_tokens) {
                steps.push(WarmUpStep {
                    rows: b,
                    query_len: q,
                    chunk: 0,
                });
            }
        }
    }
    if opts.eager_pad {
        let buckets =
            (EAGER_PAD_MIN_TOKENS + 1..=max_tokens).filter(|&t| eager_token_bucket(t) == t);
        steps.extend(buckets.map(|t| WarmUpStep {
            rows: 0,
            query_len: 0,
            chunk: t,
        }));
    }
    if graphs && opts.chunk_graph_max > 0 {
        let chunk_max = opts.chunk_graph_max.min(WARM_CHUNK_MAX);
        let mut chunk_buckets: Vec<usize> = (1..=chunk_max)
            .map(chunk_token_bucket)
            .filter(|&c| c <= chunk_max)
            .collect();
        chunk_buckets.dedup();
        let mut chunk_steps = Vec::new();
        // Larger row buckets first: a loaded server's prompt steps.
        for &b in opts.buckets.iter().rev().filter(|&&b| b < max_seqs) {
            for &q in qs.iter().filter(|&&q| q < PREFILL_MIN_Q) {
                for &c in &chunk_buckets {
                    if b * q + c <= max_tokens {
                        chunk_steps.push(WarmUpStep {
                            rows: b,
                            query_len: q,
                            chunk: c - PREFILL_MIN_Q,
                        });
                    }
                }
            }
        }
        // Leave room for the keys serving meets that no warm-up foresaw.
        chunk_steps.truncate(MAX_CHUNK_GRAPHS / 2);
        steps.extend(chunk_steps);
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;
    use wring_backend::{SeqInput, StepInput};

    /// The step the engine's warm-up builds for a shape (sequences at position 0).
    fn step_of(w: &WarmUpStep) -> StepInput {
        let mut s = StepInput::default();
        let lens = std::iter::repeat_n(w.query_len, w.rows).chain((w.chunk > 0).then_some(w.chunk));
        for (i, q) in lens.enumerate() {
            let start = s.tokens.len();
            s.seqs.push(SeqInput {
                query_start: start,
                query_len: q,
                context_len: q,
                block_table: (0..q.div_ceil(16) as u32)
                    .map(|b| 100 * i as u32 + b)
                    .collect(),
                prompt_len: 0,
            });
            s.tokens.extend(std::iter::repeat_n(7, q));
            s.positions.extend(0..q as u32);
            if i < w.rows {
                s.logit_rows.extend(start..start + q);
            } else {
                s.logit_rows.push(start + q - 1);
            }
        }
        s
    }

    #[test]
    fn every_warmed_shape_is_a_key_or_an_eager_bucket_and_none_repeats() {
        let opts = CudaOptions {
            chunk_graph_max: 1024,
            ..CudaOptions::default()
        };
        let steps = warm_up_steps(&opts, &[1, 5], 32, 2048);
        let mut seen = std::collections::HashSet::new();
        for w in &steps {
            let s = step_of(w);
            match crate::graphs::key_for(&s, &opts) {
                Some(k) => assert!(seen.insert(k), "{w:?}: key {k:?} twice"),
                None => {
                    assert_eq!(w.rows, 0, "{w:?}: rows warmed without a graph");
                    assert_eq!(eager_token_bucket(w.chunk), w.chunk, "{w:?}");
                }
            }
        }
        let uniform = steps.iter().filter(|w| w.chunk == 0).count();
        assert_eq!(uniform, 8 * 2, "buckets 1..32 × q 1 and 5");
        let alone = steps.iter().filter(|w| w.rows == 0).count();
        assert_eq!(alone, 16 + 24, "multiples of 32 to 512, of 64 to 2048");
        let chunks: Vec<_> = steps.iter().filter(|w| w.rows > 0 && w.chunk > 0).collect();
        assert!(chunks.len() <= MAX_CHUNK_GRAPHS / 2);
        assert_eq!(
            chunks[0].rows, 24,
            "the largest row bucket beside a chunk first"
        );
        assert!(chunks
            .iter()
            .all(|w| chunk_token_bucket(w.chunk) <= WARM_CHUNK_MAX));
        // Chunk graphs off (the default): no chunk keys to warm; graphs off: none at all.
        let default = warm_up_steps(&CudaOptions::default(), &[1, 5], 32, 2048);
        assert!(default.iter().all(|w| w.rows == 0 || w.chunk == 0));
        let eager_only = CudaOptions {
            graphs: GraphMode::Off,
            ..CudaOptions::default()
        };
        assert!(warm_up_steps(&eager_only, &[1], 32, 2048)
            .iter()
            .all(|w| w.rows == 0));
    }
}
