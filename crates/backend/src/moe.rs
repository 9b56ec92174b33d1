//! Mixture-of-experts feed-forward layers (Qwen3-MoE, Mixtral, DeepSeek-V3): the weights
//! one layer hands to [`Backend::moe_ffn`](crate::Backend::moe_ffn) and the routing rule
//! every backend must reproduce ([`route`]).
//!
//! Softmax scoring (Qwen3-MoE, Mixtral): a token's router logits (`x · routerᵀ`, one per
//! expert) go through a softmax over all experts; the `top_k` largest probabilities pick
//! its experts (ties to the lower expert index), and their probabilities, divided by their
//! sum when `renormalize` is set, are the weights of those experts' SwiGLU outputs in the
//! token's sum. This is Hugging Face `transformers`' rule for both architectures: Mixtral
//! always renormalises (a softmax over the selected logits), Qwen3-MoE when its config
//! says `norm_topk_prob`.
//!
//! Sigmoid scoring (DeepSeek-V3, `transformers`' `DeepseekV3TopkRouter`): each expert's
//! score is `sigmoid(logit)`; the choice is made on `score + correction bias` (the layer's
//! `e_score_correction_bias`), first of `top_groups` of the `groups` equal groups of
//! consecutive experts (ranked by the sum of each group's two best biased scores), then of
//! the `top_k` best biased scores inside those groups (ties to the lower index, groups and
//! experts alike). The weights are the chosen experts' unbiased scores, divided by their
//! sum (plus 1e-20) when `renormalize` is set, times `scale` (`routed_scaling_factor`).
//! Shared experts ([`MoeLayer::shared`]) are added to every token after the routed sum.

/// How a router's logits become expert scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MoeScoring {
    /// A softmax over every expert.
    #[default]
    Softmax,
    /// `sigmoid(logit)` per expert, chosen on the score plus the layer's correction bias.
    Sigmoid,
}

/// How a layer routes tokens to experts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoeRouting {
    /// Experts per token.
    pub top_k: usize,
    /// Divide the selected experts' probabilities by their sum.
    pub renormalize: bool,
    pub scoring: MoeScoring,
    /// Equal groups of consecutive experts (1: no groups).
    pub groups: usize,
    /// Groups a token's experts may come from (`groups` when there are no groups).
    pub top_groups: usize,
    /// Factor on every routed weight (DeepSeek's `routed_scaling_factor`; 1 elsewhere).
    pub scale: f32,
}

impl MoeRouting {
    /// Softmax routing over all experts, no groups, no scale (Qwen3-MoE, Mixtral).
    pub fn softmax(top_k: usize, renormalize: bool) -> Self {
        Self {
            top_k,
            renormalize,
            scoring: MoeScoring::Softmax,
            groups: 1,
            top_groups: 1,
            scale: 1.0,
        }
    }

    /// True for [`MoeRouting::softmax`]'s rule (what a backend that runs only that rule
    /// checks before it takes a layer).
    pub fn is_plain_softmax(&self) -> bool {
        self.scoring == MoeScoring::Softmax && self.groups <= 1 && self.scale == 1.0
    }
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
    /// Per expert, added to its score for the choice only (sigmoid scoring; DeepSeek's
    /// `e_score_correction_bias`). None: no bias.
    pub correction_bias: Option<V>,
    /// Experts every token goes through, unweighted, as one MLP (DeepSeek's
    /// `shared_experts`: `n_shared_experts × moe_intermediate_size` wide), added after the
    /// routed experts' sum.
    pub shared: Option<Expert<M>>,
}

impl<V, M> MoeLayer<V, M> {
    /// Whether the layer is plain softmax routing with nothing beside it (the rule a
    /// backend that runs only Qwen3-MoE's and Mixtral's layers takes).
    pub fn is_plain_softmax(&self) -> bool {
        self.routing.is_plain_softmax() && self.correction_bias.is_none() && self.shared.is_none()
    }
}

/// The experts of one token and their weights from its router logits (one per expert)
/// and, for sigmoid scoring, the layer's correction bias: in descending order of weight
/// (softmax) or of biased score (sigmoid). Deterministic: a pure function of its inputs.
pub fn route(logits: &[f32], routing: MoeRouting, bias: Option<&[f32]>) -> Vec<(usize, f32)> {
    let k = routing.top_k.min(logits.len());
    if k == 0 {
        return Vec::new();
    }
    if routing.scoring == MoeScoring::Sigmoid {
        return route_sigmoid(logits, routing, bias, k);
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

/// [`route`] for sigmoid scoring (`k` ≥ 1 experts).
fn route_sigmoid(
    logits: &[f32],
    routing: MoeRouting,
    bias: Option<&[f32]>,
    k: usize,
) -> Vec<(usize, f32)> {
    let n = logits.len();
    let scores: Vec<f32> = logits.iter().map(|&x| 1.0 / (1.0 + (-x).exp())).collect();
    // The biased scores the choice is made on; NaN counts as the smallest.
    let choice: Vec<f32> = scores
        .iter()
        .enumerate()
        .map(|(e, &s)| {
            let c = s + bias.map_or(0.0, |b| b[e]);
            if c.is_nan() {
                f32::NEG_INFINITY
            } else {
                c
            }
        })
        .collect();
    let by_choice = |a: &usize, b: &usize| choice[*b].total_cmp(&choice[*a]).then(a.cmp(b));
    let groups = routing.groups.max(1);
    let mut eligible: Vec<usize> =
        if groups > 1 && routing.top_groups < groups && n.is_multiple_of(groups) {
            // Each group's score: the sum of its two best biased scores.
            let size = n / groups;
            let group_score: Vec<f32> = (0..groups)
                .map(|g| {
                    let mut members: Vec<usize> = (g * size..(g + 1) * size).collect();
                    members.sort_by(by_choice);
                    members.iter().take(2).map(|&e| choice[e]).sum()
                })
                .collect();
            let mut order: Vec<usize> = (0..groups).collect();
            order.sort_by(|&a, &b| group_score[b].total_cmp(&group_score[a]).then(a.cmp(&b)));
            order.truncate(routing.top_groups);
            order.sort_unstable();
            order
                .into_iter()
                .flat_map(|g| g * size..(g + 1) * size)
                .collect()
        } else {
            (0..n).collect()
        };
    eligible.sort_by(by_choice);
    eligible.truncate(k);
    let mut picked: Vec<(usize, f32)> = eligible.into_iter().map(|e| (e, scores[e])).collect();
    if routing.renormalize {
        let total: f32 = picked.iter().map(|p| p.1).sum::<f32>() + 1e-20;
        picked.iter_mut().for_each(|p| p.1 /= total);
    }
    if routing.scale != 1.0 {
        picked.iter_mut().for_each(|p| p.1 *= routing.scale);
    }
    picked
}

/// The tokens each expert serves: for expert `e`, `(token, weight)` in token order.
/// `logits` is `[tokens][experts]`; `bias` the layer's correction bias, if any.
pub fn tokens_per_expert(
    logits: &[f32],
    experts: usize,
    routing: MoeRouting,
    bias: Option<&[f32]>,
) -> Vec<Vec<(usize, f32)>> {
    let mut per: Vec<Vec<(usize, f32)>> = vec![Vec::new(); experts];
    for (t, row) in logits.chunks_exact(experts.max(1)).enumerate() {
        for (e, w) in route(row, routing, bias) {
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
        let r = route(&logits, MoeRouting::softmax(2, false), None);
        // Experts 1 and 3 tie: the lower index first.
        assert_eq!(r.iter().map(|p| p.0).collect::<Vec<_>>(), vec![1, 3]);
        let z: f32 = logits.iter().map(|x| x.exp()).sum();
        assert!((r[0].1 - 2f32.exp() / z).abs() < 1e-6);
        let r = route(&logits, MoeRouting::softmax(3, true), None);
        assert_eq!(r.iter().map(|p| p.0).collect::<Vec<_>>(), vec![1, 3, 4]);
        let sel = 2f32.exp() * 2.0 + 1f32.exp();
        assert!((r[2].1 - 1f32.exp() / sel).abs() < 1e-6, "{r:?}");
        assert!((r.iter().map(|p| p.1).sum::<f32>() - 1.0).abs() < 1e-6);
    }

    #[test]
    fn sigmoid_routing_chooses_groups_then_experts_on_biased_scores() {
        // 8 experts in 4 groups of 2; 2 groups a token, 2 experts, weights × 2.5.
        let routing = MoeRouting {
            top_k: 2,
            renormalize: true,
            scoring: MoeScoring::Sigmoid,
            groups: 4,
            top_groups: 2,
            scale: 2.5,
        };
        let logits = [2.0f32, -1.0, 0.0, 0.5, 1.5, 1.4, -2.0, 3.0];
        let s = |x: f32| 1.0 / (1.0 + (-x).exp());
        // Without a bias the groups {4, 5} and {0, 1} have the best pairs, so expert 7,
        // the best alone, is out of reach.
        let r = route(&logits, routing, None);
        assert_eq!(r.iter().map(|p| p.0).collect::<Vec<_>>(), vec![0, 4]);
        let total = s(2.0) + s(1.5) + 1e-20;
        assert!((r[0].1 - 2.5 * s(2.0) / total).abs() < 1e-6, "{r:?}");
        // A bias on expert 6 lifts its group {6, 7} above {0, 1}; the weights stay the
        // unbiased scores.
        let bias = [0.0f32, 0.0, 0.0, 0.0, 0.0, 0.0, 0.5, 0.0];
        let r = route(&logits, routing, Some(&bias));
        assert_eq!(r.iter().map(|p| p.0).collect::<Vec<_>>(), vec![7, 4]);
        let total = s(3.0) + s(1.5) + 1e-20;
        assert!((r[0].1 - 2.5 * s(3.0) / total).abs() < 1e-6, "{r:?}");
        assert!((r[1].1 - 2.5 * s(1.5) / total).abs() < 1e-6, "{r:?}");
        // Without groups or renormalisation: the best two biased scores, weights × scale.
        let flat = MoeRouting {
            groups: 1,
            top_groups: 1,
            renormalize: false,
            ..routing
        };
        let r = route(&logits, flat, Some(&bias));
        assert_eq!(r.iter().map(|p| p.0).collect::<Vec<_>>(), vec![7, 0]);
        assert!((r[1].1 - 2.5 * s(2.0)).abs() < 1e-6, "{r:?}");
    }

    #[test]
    fn every_token_lands_with_each_of_its_experts_in_token_order() {
        let routing = MoeRouting::softmax(2, true);
        let logits = [
            3.0f32, 2.0, 1.0, 0.0, 0.0, 1.0, 2.0, 3.0, 5.0, 0.0, 0.0, 4.0,
        ];
        let per = tokens_per_expert(&logits, 4, routing, None);
        let who: Vec<Vec<usize>> = per
            .iter()
            .map(|v| v.iter().map(|p| p.0).collect())
            .collect();
        assert_eq!(who, vec![vec![0, 2], vec![0], vec![1], vec![1, 2]]);
    }
}
