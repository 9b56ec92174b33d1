//! DRY ("Don't Repeat Yourself"), the loop penalty of llama.cpp, koboldcpp and
//! text-generation-webui, written from its public description: a token that would extend
//! a sequence that already occurred earlier in the context is penalised, exponentially in
//! the length of the repeat. Unlike a repetition penalty it leaves single tokens alone
//! (the "4" of "2+2" may repeat a prompt token), so it targets loops only.
//!
//! Matching: let the window be the last `dry_penalty_last_n` context tokens w[0..L]. For
//! each earlier position i < L-1, m(i) is the length of the longest common suffix of
//! w[..=i] and w (the current suffix seen again ending at i), cut at the last sequence
//! breaker; the token w[i+1] that followed that occurrence would extend the repeat to
//! m(i)+1 tokens. Its logit loses `multiplier * base^(n - allowed_length)` where n is the
//! largest such m(i) and n >= allowed_length. All m(i) come from one Z-array over the
//! reversed window, O(L) per step whatever the vocabulary or the repeat lengths.

use std::sync::{Arc, OnceLock};

use wring_model::Tokenizer;

use crate::api::{SamplingParams, DRY_SEQUENCE_BREAKERS};

/// Which token ids are sequence breakers (index = token id); ids past the end are not.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DryBreakers(Vec<bool>);

impl DryBreakers {
    /// The tokens whose text contains any of `breakers`; `texts[id]` is token id's text.
    /// (A breaker spread over several tokens, none containing it whole, is not matched.)
    pub fn from_texts<S: AsRef<str>>(texts: &[String], breakers: &[S]) -> Self {
        Self(
            texts
                .iter()
                .map(|t| breakers.iter().any(|b| t.contains(b.as_ref())))
                .collect(),
        )
    }

    pub fn from_ids(ids: &[u32]) -> Self {
        let mut v = vec![false; ids.iter().map(|&t| t as usize + 1).max().unwrap_or(0)];
        for &t in ids {
            v[t as usize] = true;
        }
        Self(v)
    }

    pub fn contains(&self, token: u32) -> bool {
        self.0.get(token as usize).copied().unwrap_or(false)
    }
}

/// Breaker sets by request, from the model's token texts: decoding the whole vocabulary
/// once (tens of ms) on the first DRY request, the default set once, a custom list by one
/// scan over the texts.
pub struct BreakerCache {
    tokenizer: Arc<Tokenizer>,
    texts: OnceLock<Vec<String>>,
    default: OnceLock<Arc<DryBreakers>>,
}

impl BreakerCache {
    pub fn new(tokenizer: Arc<Tokenizer>) -> Self {
        Self {
            tokenizer,
            texts: OnceLock::new(),
            default: OnceLock::new(),
        }
    }

    /// The breakers `p` asks for; None when DRY is off.
    pub fn for_params(&self, p: &SamplingParams) -> Option<Arc<DryBreakers>> {
        if !p.dry_enabled() {
            return None;
        }
        Some(match &p.dry_sequence_breakers {
            None => self
                .default
                .get_or_init(|| {
                    Arc::new(DryBreakers::from_texts(
                        self.texts(),
                        &DRY_SEQUENCE_BREAKERS,
                    ))
                })
                .clone(),
            Some(b) => Arc::new(DryBreakers::from_texts(self.texts(), b)),
        })
    }

    fn texts(&self) -> &[String] {
        self.texts.get_or_init(|| {
            (0..self.tokenizer.vocab_size() as u32)
                .map(|t| self.tokenizer.decode(&[t], false).unwrap_or_default())
                .collect()
        })
    }
}

/// A request's DRY state: its settings and the context tokens it searches.
#[derive(Debug, Clone)]
pub struct Dry {
    multiplier: f32,
    base: f32,
    allowed: usize,
    /// None: the whole context.
    last_n: Option<usize>,
    breakers: Arc<DryBreakers>,
    context: Vec<u32>,
}

impl Dry {
    /// None when the settings turn DRY off (multiplier 0 or an empty window).
    pub fn new(p: &SamplingParams, prompt: &[u32]) -> Option<Self> {
        if !p.dry_enabled() {
            return None;
        }
        let last_n = usize::try_from(p.dry_penalty_last_n).ok();
        let mut d = Self {
            multiplier: p.dry_multiplier,
            base: p.dry_base,
            allowed: p.dry_allowed_length.max(1) as usize,
            last_n,
            breakers: Arc::default(),
            context: Vec::new(),
        };
        let start = last_n.map_or(0, |n| prompt.len().saturating_sub(n));
        d.context.extend_from_slice(&prompt[start..]);
        Some(d)
    }

    pub fn set_breakers(&mut self, breakers: Arc<DryBreakers>) {
        self.breakers = breakers;
    }

    pub fn push(&mut self, token: u32) {
        self.context.push(token);
        if let Some(n) = self.last_n {
            // Trim in batches: amortised O(1) per token.
            if self.context.len() >= 2 * n.max(1024) {
                self.context.drain(..self.context.len() - n);
            }
        }
    }

    fn window(&self) -> &[u32] {
        let c = &self.context;
        &c[c.len() - self.last_n.map_or(c.len(), |n| n.min(c.len()))..]
    }

    /// (token, longest repeat it would extend), for the tokens that get a penalty, in
    /// token order.
    pub fn repeat_lengths(&self) -> Vec<(u32, usize)> {
        let w = self.window();
        let len = w.len();
        // Tokens since the last breaker: no match may include one.
        let free = w
            .iter()
            .rev()
            .take_while(|&&t| !self.breakers.contains(t))
            .count();
        if len < 2 || free < self.allowed {
            return Vec::new();
        }
        // z[k]: common prefix of r and r[k..], r = w reversed; k = len-1-i gives m(i).
        let r = |k: usize| w[len - 1 - k];
        let mut z = vec![0usize; len];
        let (mut lo, mut hi) = (0usize, 0usize);
        for k in 1..len {
            if k < hi {
                z[k] = (hi - k).min(z[k - lo]);
            }
            // Nothing past `free` counts, so stop comparing there (keeps it linear and short).
            while z[k] < free && k + z[k] < len && r(z[k]) == r(k + z[k]) {
                z[k] += 1;
            }
            if k + z[k] > hi {
                lo = k;
                hi = k + z[k];
            }
        }
        let mut out: Vec<(u32, usize)> = (1..len)
            .filter_map(|k| {
                let m = z[k].min(free);
                let next = w[len - k];
                (m >= self.allowed && !self.breakers.contains(next)).then_some((next, m))
            })
            .collect();
        // Longest first within a token, then keep one entry per token.
        out.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        out.dedup_by_key(|e| e.0);
        out
    }

    /// What a repeat of `n` tokens costs the token that would extend it.
    pub fn penalty(&self, n: usize) -> f32 {
        let e = (n - self.allowed).min(i32::MAX as usize) as i32;
        // Capped so that later scaling by 1/temperature stays finite for any sane temperature.
        (self.multiplier as f64 * (self.base as f64).powi(e)).min(1e30) as f32
    }

    /// Subtracts the penalties of `repeats` (from [`Dry::repeat_lengths`]).
    pub fn apply(&self, repeats: &[(u32, usize)], logits: &mut [f32]) {
        for &(t, n) in repeats {
            if let Some(l) = logits.get_mut(t as usize) {
                *l -= self.penalty(n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(multiplier: f32) -> SamplingParams {
        SamplingParams {
            dry_multiplier: multiplier,
            ..Default::default()
        }
    }

    fn dry(p: &SamplingParams, ctx: &[u32], breakers: &[u32]) -> Dry {
        let mut d = Dry::new(p, ctx).expect("on");
        d.set_breakers(Arc::new(DryBreakers::from_ids(breakers)));
        d
    }

    /// The longest repeat each token would extend, by brute force (the definition).
    fn brute(w: &[u32], allowed: usize, breakers: &DryBreakers) -> Vec<(u32, usize)> {
        let len = w.len();
        let mut best = std::collections::BTreeMap::new();
        for i in 0..len.saturating_sub(1) {
            let mut m = 0;
            while m <= i && w[i - m] == w[len - 1 - m] && !breakers.contains(w[len - 1 - m]) {
                m += 1;
            }
            let next = w[i + 1];
            if m >= allowed && !breakers.contains(next) {
                let e = best.entry(next).or_insert(0);
                *e = (*e).max(m);
            }
        }
        best.into_iter().collect()
    }

    #[test]
    fn a_repeated_ngram_costs_the_token_that_continues_it() {
        // "1 2 3 4 ... 1 2 3": 4 would extend a 3-token repeat, 3 - 2 = 1 past allowed.
        let p = params(0.8);
        let d = dry(&p, &[1, 2, 3, 4, 9, 1, 2, 3], &[]);
        assert_eq!(d.repeat_lengths(), vec![(4, 3)]);
        let mut l = vec![0.0f32; 10];
        d.apply(&d.repeat_lengths(), &mut l);
        let want = 0.8 * 1.75f32;
        assert!((l[4] + want).abs() < 1e-6, "{}", l[4]);
        assert!(l.iter().enumerate().all(|(t, &x)| t == 4 || x == 0.0));
        // One more repeated token: one more factor of the base.
        let mut d = d;
        d.push(4);
        d.push(9);
        assert_eq!(d.repeat_lengths(), vec![(1, 5)]);
        assert!((d.penalty(5) - 0.8 * 1.75f32.powi(3)).abs() < 1e-5);
    }

    #[test]
    fn allowed_length_repeats_go_free() {
        // Suffix "2 3" seen before (then 4): a 2-token repeat.
        let ctx = [2, 3, 4, 7, 2, 3];
        let d = dry(&params(1.0), &ctx, &[]);
        assert_eq!(d.repeat_lengths(), vec![(4, 2)]);
        assert_eq!(d.penalty(2), 1.0, "n == allowed: multiplier * base^0");
        let p = SamplingParams {
            dry_allowed_length: 3,
            ..params(1.0)
        };
        assert!(dry(&p, &ctx, &[]).repeat_lengths().is_empty());
        // A single repeated token (the "4" of "What is 2+2? ... 4") is never penalised by default.
        assert!(dry(&params(1.0), &[5, 6, 8, 5], &[])
            .repeat_lengths()
            .is_empty());
    }

    #[test]
    fn sequence_breakers_stop_matches() {
        let ctx = [1, 2, 3, 4, 9, 1, 2, 3];
        // 2 is a breaker: the match "1 2 3" is cut to "3", too short.
        assert!(dry(&params(1.0), &ctx, &[2]).repeat_lengths().is_empty());
        // A breaker as the last token: nothing to extend.
        assert!(dry(&params(1.0), &[1, 2, 3, 4, 1, 2, 3], &[3])
            .repeat_lengths()
            .is_empty());
        // A breaker that followed the earlier occurrence is not penalised itself.
        assert!(dry(&params(1.0), &ctx, &[4]).repeat_lengths().is_empty());
    }

    #[test]
    fn off_when_the_multiplier_or_the_window_is_zero() {
        assert!(Dry::new(&params(0.0), &[1, 2, 1, 2]).is_none());
        let p = SamplingParams {
            dry_penalty_last_n: 0,
            ..params(0.8)
        };
        assert!(Dry::new(&p, &[1, 2, 1, 2]).is_none());
    }

    #[test]
    fn the_window_limits_what_is_searched() {
        let p = SamplingParams {
            dry_penalty_last_n: 4,
            ..params(1.0)
        };
        // The earlier "1 2 3" lies outside the last 4 tokens.
        assert!(dry(&p, &[1, 2, 3, 4, 9, 1, 2, 3], &[])
            .repeat_lengths()
            .is_empty());
        let p = SamplingParams {
            dry_penalty_last_n: 8,
            ..p
        };
        assert_eq!(
            dry(&p, &[1, 2, 3, 4, 9, 1, 2, 3], &[]).repeat_lengths(),
            vec![(4, 3)]
        );
    }

    #[test]
    fn matches_the_definition_on_loops_and_random_text() {
        let mut seed = 12345u64;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 33) % n) as u32
        };
        let breakers = DryBreakers::from_ids(&[0]);
        for case in 0..300 {
            let len = 2 + (case % 60);
            let alphabet = 2 + (case % 5) as u64;
            let mut w: Vec<u32> = (0..len).map(|_| next(alphabet)).collect();
            if case % 3 == 0 {
                // A loop: a short phrase repeated.
                let phrase: Vec<u32> = (0..1 + case % 4).map(|_| 1 + next(6)).collect();
                w.extend(phrase.iter().cycle().take(3 * phrase.len() + case % 5));
            }
            for allowed in [1, 2, 3] {
                let p = SamplingParams {
                    dry_allowed_length: allowed as u32,
                    ..params(1.0)
                };
                let mut d = Dry::new(&p, &w).unwrap();
                d.set_breakers(Arc::new(breakers.clone()));
                assert_eq!(d.repeat_lengths(), brute(&w, allowed, &breakers), "{w:?}");
            }
        }
    }

    #[test]
    fn breakers_come_from_token_texts() {
        let texts: Vec<String> = ["Paris", ",\n", "la", ":", " France", "**"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let b = DryBreakers::from_texts(&texts, &crate::api::DRY_SEQUENCE_BREAKERS);
        let ids: Vec<u32> = (0..8).filter(|&t| b.contains(t)).collect();
        assert_eq!(ids, vec![1, 3, 5]);
    }
}
