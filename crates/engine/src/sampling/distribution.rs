//! The target distribution of one step after temperature, top-k, top-p and min-p.

use rand::Rng;

use crate::api::SamplingParams;

/// Greedy (a point mass on the argmax) or a normalised sparse distribution.
#[derive(Debug, Clone, PartialEq)]
pub enum Distribution {
    Greedy(u32),
    /// (token, probability), probabilities summing to 1, in token order.
    Probs(Vec<(u32, f32)>),
}

/// Index of the largest logit (lowest index wins ties; NaN never wins).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    let mut best_v = f32::NEG_INFINITY;
    for (i, &v) in logits.iter().enumerate() {
        if v > best_v {
            best_v = v;
            best = i;
        }
    }
    best as u32
}

impl Distribution {
    pub fn from_logits(logits: &[f32], p: &SamplingParams) -> Self {
        if p.temperature == 0.0 || p.top_k == 1 {
            return Self::Greedy(argmax(logits));
        }
        let inv_t = 1.0 / p.temperature;
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0.0f64;
        let mut probs: Vec<f32> = logits
            .iter()
            .map(|&l| {
                let e = ((l - max) * inv_t).exp();
                sum += e as f64;
                e
            })
            .collect();
        let inv = (1.0 / sum) as f32;
        probs.iter_mut().for_each(|x| *x *= inv);
        let max_prob = probs.iter().copied().fold(0.0f32, f32::max);

        let mut cand: Vec<(u32, f32)>;
        let needs_sort = (p.top_k > 0 && (p.top_k as usize) < probs.len()) || p.top_p < 1.0;
        if needs_sort {
            // Tokens below this floor cannot reach the top-p nucleus (their total mass
            // is below 1 - top_p), so only the rest need sorting.
            let floor = if p.top_p < 1.0 && p.top_k == 0 {
                (1.0 - p.top_p) / probs.len() as f32
            } else {
                0.0
            };
            cand = probs
                .iter()
                .enumerate()
                .filter(|(_, &x)| x > 0.0 && x >= floor)
                .map(|(i, &x)| (i as u32, x))
                .collect();
            let by_prob = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
            if p.top_k > 0 && (p.top_k as usize) < cand.len() {
                // Linear-time selection, then sort only the k survivors.
                cand.select_nth_unstable_by(p.top_k as usize - 1, by_prob);
                cand.truncate(p.top_k as usize);
            }
            cand.sort_unstable_by(by_prob);
            if p.top_p < 1.0 {
                // Over the top-k set when one is set (renormalised), else over all
                // tokens (whose mass is 1, including any below the floor).
                let total: f32 = if p.top_k > 0 {
                    cand.iter().map(|c| c.1).sum()
                } else {
                    1.0
                };
                let target = p.top_p * total;
                let mut acc = 0.0f32;
                let mut keep = cand.len();
                for (i, c) in cand.iter().enumerate() {
                    acc += c.1;
                    if acc >= target {
                        keep = i + 1;
                        break;
                    }
                }
                cand.truncate(keep.max(1));
            }
            cand.sort_unstable_by_key(|c| c.0);
        } else {
            cand = probs
                .iter()
                .enumerate()
                .filter(|(_, &x)| x > 0.0)
                .map(|(i, &x)| (i as u32, x))
                .collect();
        }
        if p.min_p > 0.0 {
            let thr = p.min_p * max_prob;
            cand.retain(|c| c.1 >= thr);
        }
        let total: f32 = cand.iter().map(|c| c.1).sum();
        if cand.is_empty() || total.is_nan() || total <= 0.0 {
            return Self::Greedy(argmax(logits));
        }
        cand.iter_mut().for_each(|c| c.1 /= total);
        Self::Probs(cand)
    }

    /// Probability of `token` under this distribution.
    pub fn prob(&self, token: u32) -> f32 {
        match self {
            Self::Greedy(t) => (*t == token) as u32 as f32,
            Self::Probs(c) => c
                .binary_search_by_key(&token, |x| x.0)
                .map(|i| c[i].1)
                .unwrap_or(0.0),
        }
    }

    /// Draws a token.
    pub fn sample<R: Rng>(&self, rng: &mut R) -> u32 {
        match self {
            Self::Greedy(t) => *t,
            Self::Probs(c) => draw(c.iter().copied(), 1.0, rng).unwrap_or(c[0].0),
        }
    }

    /// Draws a token from this distribution with `excluded` removed and the rest
    /// renormalised. None when nothing else has mass.
    pub fn sample_excluding<R: Rng>(&self, excluded: u32, rng: &mut R) -> Option<u32> {
        match self {
            Self::Greedy(t) => (*t != excluded).then_some(*t),
            Self::Probs(c) => {
                let rest: f32 = c.iter().filter(|x| x.0 != excluded).map(|x| x.1).sum();
                if rest.is_nan() || rest <= 0.0 {
                    return None;
                }
                draw(c.iter().copied().filter(|x| x.0 != excluded), rest, rng)
            }
        }
    }
}

/// Inverse-CDF draw over (token, weight) pairs whose weights sum to `total`.
fn draw<R: Rng>(
    items: impl Iterator<Item = (u32, f32)> + Clone,
    total: f32,
    rng: &mut R,
) -> Option<u32> {
    let u = rng.gen::<f32>() * total;
    let mut acc = 0.0f32;
    let mut last = None;
    for (t, w) in items {
        if w <= 0.0 {
            continue;
        }
        acc += w;
        last = Some(t);
        if u < acc {
            return Some(t);
        }
    }
    // Rounding left u just past the end: the last token with mass.
    last
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn sp(t: f32) -> SamplingParams {
        SamplingParams {
            temperature: t,
            ..Default::default()
        }
    }

    #[test]
    fn softmax_with_temperature() {
        let d = Distribution::from_logits(&[0.0, (2.0f32).ln()], &sp(1.0));
        assert!((d.prob(1) - 2.0 / 3.0).abs() < 1e-6);
        let d = Distribution::from_logits(&[0.0, (2.0f32).ln()], &sp(0.5));
        assert!((d.prob(1) - 0.8).abs() < 1e-6, "{}", d.prob(1));
    }

    #[test]
    fn top_k_top_p_min_p_truncate_and_renormalise() {
        // probs 0.4 0.3 0.2 0.1
        let l: Vec<f32> = [0.4f32, 0.3, 0.2, 0.1].iter().map(|p| p.ln()).collect();
        let d = Distribution::from_logits(
            &l,
            &SamplingParams {
                top_k: 2,
                ..sp(1.0)
            },
        );
        assert!((d.prob(0) - 4.0 / 7.0).abs() < 1e-5 && d.prob(2) == 0.0);
        let d = Distribution::from_logits(
            &l,
            &SamplingParams {
                top_p: 0.65,
                ..sp(1.0)
            },
        );
        assert!((d.prob(1) - 3.0 / 7.0).abs() < 1e-5 && d.prob(2) == 0.0);
        let d = Distribution::from_logits(
            &l,
            &SamplingParams {
                top_p: 0.75,
                ..sp(1.0)
            },
        );
        assert!((d.prob(2) - 2.0 / 9.0).abs() < 1e-5 && d.prob(3) == 0.0);
        let d = Distribution::from_logits(
            &l,
            &SamplingParams {
                min_p: 0.4,
                ..sp(1.0)
            },
        );
        assert!((d.prob(0) - 4.0 / 9.0).abs() < 1e-5 && d.prob(3) == 0.0 && d.prob(2) > 0.0);
        let d = Distribution::from_logits(
            &l,
            &SamplingParams {
                top_k: 1,
                ..sp(1.0)
            },
        );
        assert_eq!(d, Distribution::Greedy(0));
    }

    #[test]
    fn sampling_frequencies_follow_probabilities() {
        let l: Vec<f32> = [0.5f32, 0.3, 0.2].iter().map(|p| p.ln()).collect();
        let d = Distribution::from_logits(&l, &sp(1.0));
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let mut n = [0usize; 3];
        for _ in 0..30000 {
            n[d.sample(&mut rng) as usize] += 1;
        }
        assert!((n[0] as f32 / 30000.0 - 0.5).abs() < 0.015, "{n:?}");
        assert!((n[2] as f32 / 30000.0 - 0.2).abs() < 0.015, "{n:?}");
        let mut m = [0usize; 3];
        for _ in 0..30000 {
            m[d.sample_excluding(0, &mut rng).unwrap() as usize] += 1;
        }
        assert_eq!(m[0], 0);
        assert!((m[1] as f32 / 30000.0 - 0.6).abs() < 0.015, "{m:?}");
        assert_eq!(Distribution::Greedy(3).sample_excluding(3, &mut rng), None);
    }

    #[test]
    fn argmax_prefers_lowest_index_on_ties_and_ignores_nan() {
        assert_eq!(argmax(&[1.0, 5.0, 5.0]), 1);
        assert_eq!(argmax(&[f32::NAN, 1.0]), 1);
    }
}
