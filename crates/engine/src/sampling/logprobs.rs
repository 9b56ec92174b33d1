//! Logprobs of emitted tokens under the model's raw distribution (vLLM's default:
//! before penalties and temperature). For a constrained request the row is the
//! grammar-masked one, so the log-softmax is over the allowed tokens only.

use crate::api::TokenLogprob;

pub fn token_logprobs(raw_logits: &[f32], token: u32, top_n: usize) -> TokenLogprob {
    let max = raw_logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let lse = max
        + raw_logits
            .iter()
            .map(|&l| ((l - max) as f64).exp())
            .sum::<f64>()
            .ln() as f32;
    let lp = |t: u32| {
        raw_logits
            .get(t as usize)
            .map_or(f32::NEG_INFINITY, |l| l - lse)
    };
    let mut top = Vec::new();
    if top_n > 0 {
        let mut idx: Vec<u32> = (0..raw_logits.len() as u32).collect();
        let n = top_n.min(idx.len());
        let key = |t: &u32| std::cmp::Reverse(ordered(raw_logits[*t as usize]));
        idx.select_nth_unstable_by_key(n - 1, key);
        idx.truncate(n);
        idx.sort_by_key(|t| (key(t), *t));
        // Tokens a grammar forbids (-inf) are never among the top.
        top = idx
            .into_iter()
            .map(|t| (t, lp(t)))
            .filter(|(_, l)| l.is_finite())
            .collect();
    }
    TokenLogprob {
        token_id: token,
        logprob: lp(token),
        top,
    }
}

fn ordered(x: f32) -> i64 {
    // Total order key for f32 (NaN sorts lowest).
    if x.is_nan() {
        return i64::MIN;
    }
    let b = x.to_bits() as i32;
    (if b < 0 { !(b & 0x7fff_ffff) } else { b }) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logprobs_are_normalised_and_top_sorted() {
        let l = [0.0f32, 2.0, 1.0, -3.0];
        let r = token_logprobs(&l, 2, 2);
        let total: f32 = l.iter().map(|x| (x - 2.0f32).exp()).sum();
        assert!((r.logprob - (-1.0 - total.ln())).abs() < 1e-5);
        assert_eq!(r.top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![1, 2]);
        assert!(r.top[0].1 > r.top[1].1);
        assert!(token_logprobs(&[-1.0, -2.0], 0, 0).top.is_empty());
    }
}
