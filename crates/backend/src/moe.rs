//! Mixture-of-experts feed-forward layers (Qwen3-MoE, Mixtral): the weights one layer
//! hands to [`Backend::moe_ffn`](crate::Backend::moe_ffn) and the routing rule every
//! backend must reproduce ([`route`]).
//!
//! A token's router logits (`x · routerᵀ`, one per expert) go through a softmax over all
//! experts; the `top_k` largest probabilities pick its experts (ties to the lower expert
//! index), and their probabilities, divided by their sum when `renormalize` is set, are
//! the weights of those experts' SwiGLU outputs in the token's sum. This is Hugging Face
//! `transformers`' rule for both architectures: Mixtral always renormalises (a softmax
//! over the selected logits), Qwen3-MoE when its config says `norm_topk_prob`.

/// How a layer routes tokens to experts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeRouting {
    /// Experts per token.
    pub top_k: usize,
    /// Divide the selected experts' probabilities by their sum.
    pub renormalize: bool,
}

/// One expert's SwiGLU MLP: `down · (silu(gate · x) * (up · x))`.
pub struct Expert<M> {
    /// The gate rows, then the up rows (`[2·I][hidden]`, as [`Backend::gate_up_silu`]'s
    /// weight).
    ///
    /// [`Backend::gate_up_silu`]: crate::Backend::gate_up_silu
    pub gate_up: M,
    /// `[hidden][I]`.
    pub down: M,
}

/// The weights of one mixture-of-experts feed-forward layer on a backend.
pub struct MoeLayer<V, M> {
    /// The router, `[experts][hidden]` row-major, uploaded as a vector so it keeps f32
    /// precision whatever format the backend stores matrices in (a quantized router
    /// would move tokens between experts).
    pub router: V,
    pub experts: Vec<Expert<M>>,
    pub routing: MoeRouting,
}

/// The experts of one token and their weights, in descending order of weight, from its
/// router logits (one per expert). Deterministic: a pure function of `logits`.
pub fn route(logits: &[f32], routing: MoeRouting) -> Vec<(usize, f32)> {
    let k = routing.top_k.min(logits.len());
    if k == 0 {
        return Vec::new();
    }
    // Softmax over every expert in f32 (NaN logits count as the smallest).
    let max = logits
        .iter()
        .copied()
        .filter(|x| !x.is_nan())
        .fold(f32::NEG_INFINITY, f32::max);
    let exps: Vec<f32> = logits
        .iter()
        .map(|&x| if x.is_nan() { 0.0 } else { (x - max).exp() })
        .collect();
    let sum: f32 = exps.iter().sum();
    let probs: Vec<f32> = exps.iter().map(|&e| e / sum).collect();
    // Top k by probability, ties to the lower index.
    let mut order: Vec<usize> = (0..probs.len()).collect();
    order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]).then(a.cmp(&b)));
    order.truncate(k);
    let mut picked: Vec<(usize, f32)> = order.into_iter().map(|e| (e, probs[e])).collect();
    if routing.renormalize {
        let total: f32 = picked.iter().map(|p| p.1).sum();
        if total > 0.0 {
            picked.iter_mut().for_each(|p| p.1 /= total);
        }
    }
    picked
}

/// The tokens each expert serves: for expert `e`, `(token, weight)` in token order.
/// `logits` is `[tokens][experts]`.
pub fn tokens_per_expert(
    logits: &[f32],
    experts: usize,
    routing: MoeRouting,
) -> Vec<Vec<(usize, f32)>> {
    let mut per: Vec<Vec<(usize, f32)>> = vec![Vec::new(); experts];
    for (t, row) in logits.chunks_exact(experts.max(1)).enumerate() {
        for (e, w) in route(row, routing) {
            per[e].push((t, w));
        }
    }
    per
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_of_the_softmax_renormalised_or_not() {
        let logits = [0.5f32, 2.0, -1.0, 2.0, 1.0];
        let r = route(
            &logits,
            MoeRouting {
                top_k: 2,
                renormalize: false,
            },
        );
        // Experts 1 and 3 tie: the lower index first.
        assert_eq!(r.iter().map(|p| p.0).collect::<Vec<_>>(), vec![1, 3]);
        let z: f32 = logits.iter().map(|x| x.exp()).sum();
        assert!((r[0].1 - 2f32.exp() / z).abs() < 1e-6);
        let r = route(
            &logits,
            MoeRouting {
                top_k: 3,
                renormalize: true,
            },
        );
        assert_eq!(r.iter().map(|p| p.0).collect::<Vec<_>>(), vec![1, 3, 4]);
        let sel = 2f32.exp() * 2.0 + 1f32.exp();
        assert!((r[2].1 - 1f32.exp() / sel).abs() < 1e-6, "{r:?}");
        assert!((r.iter().map(|p| p.1).sum::<f32>() - 1.0).abs() < 1e-6);
    }

    #[test]
    fn every_token_lands_with_each_of_its_experts_in_token_order() {
        let routing = MoeRouting {
            top_k: 2,
            renormalize: true,
        };
        let logits = [
            3.0f32, 2.0, 1.0, 0.0, 0.0, 1.0, 2.0, 3.0, 5.0, 0.0, 0.0, 4.0,
        ];
        let per = tokens_per_expert(&logits, 4, routing);
        let who: Vec<Vec<usize>> = per
            .iter()
            .map(|v| v.iter().map(|p| p.0).collect())
            .collect();
        assert_eq!(who, vec![vec![0, 2], vec![0], vec![1], vec![1, 2]]);
    }
}
