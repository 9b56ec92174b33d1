//! Multi-head latent attention (DeepSeek-V2/V3, `transformers`' `DeepseekV3Attention`): the
//! weights one layer hands to [`Backend::latent_attention`](crate::Backend::latent_attention),
//! its shape, and the host-side layout helpers the CPU backend composes it from.
//!
//! Per token `x` (already normed):
//!
//! - `q = q_b · rms_norm(q_a · x)` (or `q = q_proj · x` without a q LoRA rank), each head
//!   `[nope | rope]` (`qk_nope_head_dim`, `qk_rope_head_dim`);
//! - `kv_a · x = [c | k_rope]`: the latent `c` (`kv_lora_rank`) and one rope key shared by
//!   every head; `kv_b · rms_norm(c)` gives each head `[k_nope | v]`;
//! - RoPE on the rope parts of q and k only, then per head `q·k = q_nope·k_nope +
//!   q_rope·k_rope`, times `1/√(nope + rope)` and YaRN's mscale² where the config scales
//!   RoPE (`score_factor`), softmax over the causal context, times `v`.
//!
//! The layout here materialises each head's K and V in the ordinary paged KV cache: a cache
//! head is [`MlaShape::cache_dim`] = `max(nope + rope, v)` wide, K is `[k_nope | k_rope |
//! 0…]`, V `[v | 0…]`, q `[q_nope | q_rope | 0…]`, and the zero columns add nothing to a dot
//! product or to the output columns that are kept. The latent cache of DeepSeek's own
//! kernels (`kv_lora_rank + qk_rope_head_dim` values a token, with `kv_b` absorbed into q
//! and o) is not built.

/// The dimensions of one MLA layer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MlaShape {
    pub n_heads: usize,
    /// `q_lora_rank`, None: q is one projection of the hidden state.
    pub q_lora_rank: Option<usize>,
    pub kv_lora_rank: usize,
    pub nope: usize,
    pub rope: usize,
    pub v: usize,
    /// The RMSNorms' epsilon (q_a_layernorm, kv_a_layernorm).
    pub eps: f32,
    /// Scores are `q·k / √(nope + rope)` times this: YaRN's mscale² where the config
    /// scales RoPE (`mscale_all_dim`), else 1.
    pub score_factor: f32,
    /// YaRN's `attention_factor`: the rotated rope parts of q and k are multiplied by it
    /// (as `transformers` scales cos and sin); 1 without YaRN.
    pub rope_scale: f32,
}

impl MlaShape {
    /// Width of one query or key head (`nope + rope`).
    pub fn qk_dim(&self) -> usize {
        self.nope + self.rope
    }

    /// Width of one cached K or V head: the wider of a key and a value.
    pub fn cache_dim(&self) -> usize {
        self.qk_dim().max(self.v)
    }

    /// Factors on the nope and rope parts of q that make an attention kernel scoring
    /// `q·k / √cache_dim` score `q·k / √(nope + rope) · score_factor` (the rope part also
    /// carrying `rope_scale²`, the factor of both its rotated q and k). Exactly 1 where
    /// nothing changes.
    pub fn q_factors(&self) -> (f32, f32) {
        let widen = (self.cache_dim() as f64 / self.qk_dim() as f64).sqrt();
        let nope = self.score_factor as f64 * widen;
        let rope = nope * (self.rope_scale as f64).powi(2);
        (nope as f32, rope as f32)
    }
}

/// How a layer projects its queries.
pub enum MlaQuery<V, M> {
    /// `q_proj`: `[heads·(nope+rope)][hidden]`.
    Direct(M),
    /// `q_b · rms_norm(q_a · x, norm)`: q_a `[q_lora][hidden]`, q_b
    /// `[heads·(nope+rope)][q_lora]`.
    LowRank { a: M, norm: V, b: M },
}

/// The weights of one MLA layer on a backend (the output projection stays the model's).
pub struct MlaLayer<V, M> {
    pub q: MlaQuery<V, M>,
    /// `kv_a_proj_with_mqa`: `[kv_lora + rope][hidden]`.
    pub kv_a: M,
    /// `kv_a_layernorm`: `[kv_lora]`.
    pub kv_norm: V,
    /// `kv_b_proj`: `[heads·(nope + v)][kv_lora]`.
    pub kv_b: M,
    pub shape: MlaShape,
}

/// Columns `from..from + width` of every row of `[rows][cols]` data.
pub fn columns(data: &[f32], cols: usize, from: usize, width: usize) -> Vec<f32> {
    data.chunks_exact(cols)
        .flat_map(|r| &r[from..from + width])
        .copied()
        .collect()
}

/// Of every head (`[rows][heads·head]`), its columns `from..from + width`:
/// `[rows][heads·width]`.
pub fn head_columns(
    data: &[f32],
    heads: usize,
    head: usize,
    from: usize,
    width: usize,
) -> Vec<f32> {
    let mut out = Vec::with_capacity(data.len() / head.max(1) * width);
    for h in data.chunks_exact(head) {
        out.extend_from_slice(&h[from..from + width]);
    }
    debug_assert_eq!(out.len() % (heads * width).max(1), 0);
    out
}

/// One token's q, K and V in cache layout (`[heads][cache_dim]` each, zero-padded) from
/// its projections: `q` `[heads][nope+rope]` with the rope part rotated, `q_rope` the
/// rotated rope parts `[heads][rope]`, `kv` `[heads][nope+v]`, `k_rope` the rotated shared
/// rope key `[rope]`; q's parts multiplied by `q_factors`.
pub fn assemble_row(
    s: &MlaShape,
    q: &[f32],
    q_rope: &[f32],
    kv: &[f32],
    k_rope: &[f32],
    out: (&mut [f32], &mut [f32], &mut [f32]),
) {
    let (d, qk, kvw) = (s.cache_dim(), s.qk_dim(), s.nope + s.v);
    let (fn_, fr) = s.q_factors();
    let (oq, ok, ov) = out;
    for h in 0..s.n_heads {
        let (qh, kh, vh) = (
            &mut oq[h * d..(h + 1) * d],
            &mut ok[h * d..(h + 1) * d],
            &mut ov[h * d..(h + 1) * d],
        );
        for i in 0..s.nope {
            qh[i] = q[h * qk + i] * fn_;
        }
        for i in 0..s.rope {
            qh[s.nope + i] = q_rope[h * s.rope + i] * fr;
        }
        qh[qk..].fill(0.0);
        kh[..s.nope].copy_from_slice(&kv[h * kvw..h * kvw + s.nope]);
        kh[s.nope..qk].copy_from_slice(k_rope);
        kh[qk..].fill(0.0);
        vh[..s.v].copy_from_slice(&kv[h * kvw + s.nope..(h + 1) * kvw]);
        vh[s.v..].fill(0.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(nope: usize, rope: usize, v: usize) -> MlaShape {
        MlaShape {
            n_heads: 2,
            q_lora_rank: None,
            kv_lora_rank: 4,
            nope,
            rope,
            v,
            eps: 1e-6,
            score_factor: 1.0,
            rope_scale: 1.0,
        }
    }

    #[test]
    fn heads_are_padded_to_the_wider_of_key_and_value() {
        let s = shape(3, 2, 4);
        assert_eq!((s.qk_dim(), s.cache_dim()), (5, 5));
        // The plain scale on a cache as wide as a key changes nothing.
        assert_eq!(s.q_factors(), (1.0, 1.0));
        let q: Vec<f32> = (0..10).map(|i| i as f32).collect();
        let q_rope = head_columns(&q, 2, 5, 3, 2);
        assert_eq!(q_rope, vec![3.0, 4.0, 8.0, 9.0]);
        let kv: Vec<f32> = (0..14).map(|i| 100.0 + i as f32).collect();
        let k_rope = [-1.0, -2.0];
        let (mut oq, mut ok, mut ov) = (vec![9.0; 10], vec![9.0; 10], vec![9.0; 10]);
        assemble_row(&s, &q, &q_rope, &kv, &k_rope, (&mut oq, &mut ok, &mut ov));
        assert_eq!(oq, q);
        assert_eq!(
            ok,
            vec![100.0, 101.0, 102.0, -1.0, -2.0, 107.0, 108.0, 109.0, -1.0, -2.0]
        );
        assert_eq!(
            ov,
            vec![103.0, 104.0, 105.0, 106.0, 0.0, 110.0, 111.0, 112.0, 113.0, 0.0]
        );
        // A value wider than a key pads q and K instead.
        let s = shape(2, 2, 6);
        assert_eq!(s.cache_dim(), 6);
        let (f, _) = s.q_factors();
        assert!((f - (6f32 / 4.0).sqrt()).abs() < 1e-6);
    }
}
