//! Tensor parallelism as data: which rows and columns of every weight one rank holds.
//!
//! Megatron-style: q|k|v and gate|up are split by output rows (column-parallel), o and
//! down by input columns (row-parallel, each followed by one all-reduce), the embedding
//! and the LM head by vocabulary rows (rank r holds ids `r·V/N .. (r+1)·V/N`).
//!
//! Heads are split along KV-group boundaries, so every rank runs ordinary grouped-query
//! attention over whole groups. When the KV heads do not divide evenly the groups are
//! split as evenly as possible (SmolLM2-135M, 3 KV heads at TP=2: 2 + 1 groups) rather
//! than refused: the ranks then do unequal work, which only costs speed. When there are
//! fewer KV heads than ranks each KV head is replicated over the ranks that share its
//! group, and that group's query heads are split among them (each rank needs at least
//! one query head). The intermediate size and the vocabulary are split as evenly as
//! possible too.

use crate::config::ModelConfig;
use anyhow::{bail, ensure, Result};
use std::ops::Range;

/// Rank `rank` of `ranks` tensor-parallel ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardPlan {
    pub rank: usize,
    pub ranks: usize,
}

/// The part of the model one rank holds, as index ranges into the unsharded model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankShard {
    pub rank: usize,
    pub ranks: usize,
    /// Query heads.
    pub heads: Range<usize>,
    /// KV heads (shared with other ranks when there are fewer KV heads than ranks).
    pub kv_heads: Range<usize>,
    /// Rows of gate/up, columns of down.
    pub intermediate: Range<usize>,
    /// Token ids of the embedding and LM head rows.
    pub vocab: Range<usize>,
}

/// Part `i` of `n` nearly equal contiguous parts of `0..len` (sizes differ by at most one).
pub fn even_part(len: usize, n: usize, i: usize) -> Range<usize> {
    i * len / n..(i + 1) * len / n
}

impl ShardPlan {
    /// The one rank of an unsharded model.
    pub const SINGLE: ShardPlan = ShardPlan { rank: 0, ranks: 1 };

    /// What this rank holds of `cfg`, or why `cfg` cannot be split `ranks` ways.
    pub fn shard(&self, cfg: &ModelConfig) -> Result<RankShard> {
        let n = self.ranks;
        ensure!(n >= 1, "the tensor-parallel size must be at least 1");
        ensure!(self.rank < n, "rank {} of {n} does not exist", self.rank);
        let (heads, kv) = (cfg.num_heads, cfg.num_kv_heads);
        ensure!(
            kv > 0 && heads.is_multiple_of(kv),
            "{heads} attention heads do not form groups over {kv} KV heads"
        );
        let group = heads / kv;
        let (q_range, kv_range) = if kv >= n {
            // Whole KV groups per rank.
            let g = even_part(kv, n, self.rank);
            (g.start * group..g.end * group, g)
        } else {
            // Fewer KV heads than ranks: the ranks are divided among the KV heads, and the
            // ranks sharing a KV head split its group's query heads.
            if n.div_ceil(kv) > group {
                bail!(
                    "tensor-parallel size {n} is too large for {heads} attention heads in {kv} KV groups of {group}: \
                     a KV head would be shared by {} ranks, and each rank needs at least one of its {group} query heads",
                    n.div_ceil(kv)
                );
            }
            let k = (0..kv)
                .find(|&k| even_part(n, kv, k).contains(&self.rank))
                .expect("every rank lies in one KV head's part");
            let sharing = even_part(n, kv, k);
            let q = even_part(group, sharing.len(), self.rank - sharing.start);
            (k * group + q.start..k * group + q.end, k..k + 1)
        };
        ensure!(
            cfg.intermediate_size >= n && cfg.vocab_size >= n,
            "tensor-parallel size {n} exceeds the intermediate size ({}) or the vocabulary ({})",
            cfg.intermediate_size,
            cfg.vocab_size
        );
        Ok(RankShard {
            rank: self.rank,
            ranks: n,
            heads: q_range,
            kv_heads: kv_range,
            intermediate: even_part(cfg.intermediate_size, n, self.rank),
            vocab: even_part(cfg.vocab_size, n, self.rank),
        })
    }

    /// Every rank's shard of `cfg` at tensor-parallel size `ranks`.
    pub fn all(cfg: &ModelConfig, ranks: usize) -> Result<Vec<RankShard>> {
        (0..ranks)
            .map(|rank| ShardPlan { rank, ranks }.shard(cfg))
            .collect()
    }
}

impl RankShard {
    /// The whole model (one rank).
    pub fn whole(cfg: &ModelConfig) -> RankShard {
        ShardPlan::SINGLE
            .shard(cfg)
            .expect("a model always fits one rank")
    }

    /// Rows (or columns) of the query projection this rank holds.
    pub fn q_dims(&self, head_dim: usize) -> Range<usize> {
        self.heads.start * head_dim..self.heads.end * head_dim
    }

    /// Rows of the key (and value) projection this rank holds.
    pub fn kv_dims(&self, head_dim: usize) -> Range<usize> {
        self.kv_heads.start * head_dim..self.kv_heads.end * head_dim
    }

    /// The attention shape this rank runs.
    pub fn n_heads(&self) -> usize {
        self.heads.len()
    }

    pub fn n_kv_heads(&self) -> usize {
        self.kv_heads.len()
    }
}

/// The most KV heads any rank holds at tensor-parallel size `ranks` (sizes every rank's
/// KV pool: all ranks have the same number of blocks).
pub fn max_kv_heads_per_rank(cfg: &ModelConfig, ranks: usize) -> Result<usize> {
    Ok(ShardPlan::all(cfg, ranks)?
        .iter()
        .map(RankShard::n_kv_heads)
        .max()
        .unwrap_or(cfg.num_kv_heads))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(name: &str) -> ModelConfig {
        ModelConfig::named_shape(name).unwrap()
    }

    /// Every query head lands on exactly one rank, each rank's heads use only its KV
    /// heads, and the intermediate and vocabulary ranges tile their dimension.
    fn check_tiles(cfg: &ModelConfig, n: usize) -> Vec<RankShard> {
        let shards = ShardPlan::all(cfg, n).unwrap();
        let group = cfg.num_heads / cfg.num_kv_heads;
        let mut next = (0, 0, 0);
        for s in &shards {
            assert_eq!(s.heads.start, next.0, "{s:?}");
            assert_eq!(s.intermediate.start, next.1, "{s:?}");
            assert_eq!(s.vocab.start, next.2, "{s:?}");
            next = (s.heads.end, s.intermediate.end, s.vocab.end);
            assert!(!s.heads.is_empty() && !s.kv_heads.is_empty());
            // Uniform local groups: local query head j uses local KV head j / local group.
            assert!(s.n_heads().is_multiple_of(s.n_kv_heads()), "{s:?}");
            let local_group = s.n_heads() / s.n_kv_heads();
            for (j, h) in s.heads.clone().enumerate() {
                assert_eq!(h / group, s.kv_heads.start + j / local_group, "{s:?}");
            }
        }
        assert_eq!(next, (cfg.num_heads, cfg.intermediate_size, cfg.vocab_size));
        shards
    }

    #[test]
    fn llama_8b_splits_evenly() {
        let cfg = shape("llama-3.1-8b");
        for n in [1, 2, 4, 8] {
            for s in check_tiles(&cfg, n) {
                assert_eq!(s.n_heads(), 32 / n);
                assert_eq!(s.n_kv_heads(), 8 / n);
                assert_eq!(s.intermediate.len(), 14336 / n);
            }
        }
        let s = ShardPlan { rank: 1, ranks: 2 }.shard(&cfg).unwrap();
        assert_eq!(s.vocab, 64128..128256);
        assert_eq!(s.q_dims(128), 2048..4096);
    }

    #[test]
    fn uneven_kv_groups_split_as_evenly_as_possible() {
        // SmolLM2-135M: 9 heads in 3 KV groups of 3.
        let cfg = shape("smollm2-135m");
        let s = check_tiles(&cfg, 2);
        assert_eq!((s[0].heads.clone(), s[0].kv_heads.clone()), (0..3, 0..1));
        assert_eq!((s[1].heads.clone(), s[1].kv_heads.clone()), (3..9, 1..3));
        let s = check_tiles(&cfg, 3);
        assert!(s.iter().all(|s| s.n_heads() == 3 && s.n_kv_heads() == 1));
    }

    #[test]
    fn fewer_kv_heads_than_ranks_replicates_them() {
        let cfg = shape("smollm2-135m");
        let s = check_tiles(&cfg, 4);
        // KV head 2 is shared by ranks 2 and 3, which split its 3 query heads.
        assert_eq!((s[0].kv_heads.clone(), s[1].kv_heads.clone()), (0..1, 1..2));
        assert_eq!((s[2].kv_heads.clone(), s[3].kv_heads.clone()), (2..3, 2..3));
        assert_eq!((s[2].heads.clone(), s[3].heads.clone()), (6..7, 7..9));
        let s = check_tiles(&cfg, 9);
        assert!(s.iter().all(|s| s.n_heads() == 1));
        // 70B at TP=16: 8 KV heads, each shared by 2 ranks.
        let s = check_tiles(&shape("llama-3.1-70b"), 16);
        assert!(s.iter().all(|s| s.n_heads() == 4 && s.n_kv_heads() == 1));
        assert_eq!(max_kv_heads_per_rank(&shape("smollm2-135m"), 2).unwrap(), 2);
    }

    #[test]
    fn too_many_ranks_is_a_clear_error() {
        let e = ShardPlan { rank: 0, ranks: 10 }
            .shard(&shape("smollm2-135m"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("too large for 9 attention heads"), "{e}");
        assert!(ShardPlan { rank: 2, ranks: 2 }
            .shard(&shape("smollm2-135m"))
            .is_err());
        assert!(ShardPlan { rank: 0, ranks: 0 }
            .shard(&shape("smollm2-135m"))
            .is_err());
    }
}
