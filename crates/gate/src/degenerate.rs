//! Degenerate output: a greedy continuation that repeats itself instead of answering.
//!
//! Definition (token ids, so it holds for any language or script): a continuation of at
//! least [`MIN_TOKENS`] tokens is a **loop** when at least half of its tokens lie inside a
//! *repeated* n-gram (n = [`NGRAM`]): an occurrence of a 4-token span that already occurred
//! earlier in the same continuation. "L'Étoile, la France, la France, la France, …" covers
//! nearly all of its tokens with repeats; an ordinary answer of a few sentences covers
//! almost none (names and phrases recur, but not most of the text). Code can repeat more
//! than prose, so the threshold is a majority, not a trace.

use std::collections::HashSet;

/// Span length of the repeats that count.
pub const NGRAM: usize = 4;
/// Shorter continuations are never called loops (too little text to judge).
pub const MIN_TOKENS: usize = 16;
/// Fraction of tokens inside repeated spans from which a continuation is a loop.
pub const LOOP_COVERAGE: f64 = 0.5;

/// The fraction of `tokens` covered by an n-gram (n = [`NGRAM`]) that occurred earlier.
pub fn repeated_coverage(tokens: &[u32]) -> f64 {
    if tokens.len() < NGRAM {
        return 0.0;
    }
    let mut seen: HashSet<&[u32]> = HashSet::new();
    let mut covered = vec![false; tokens.len()];
    for (i, w) in tokens.windows(NGRAM).enumerate() {
        if !seen.insert(w) {
            covered[i..i + NGRAM].iter_mut().for_each(|c| *c = true);
        }
    }
    covered.iter().filter(|&&c| c).count() as f64 / tokens.len() as f64
}

/// Whether `tokens` is a degenerate loop (see the module docs).
pub fn is_loop(tokens: &[u32]) -> bool {
    tokens.len() >= MIN_TOKENS && repeated_coverage(tokens) >= LOOP_COVERAGE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_phrase_is_a_loop_and_an_answer_is_not() {
        let mut looped: Vec<u32> = vec![1, 2, 3, 4, 5];
        for _ in 0..10 {
            looped.extend([6, 7, 8]);
        }
        assert!(is_loop(&looped), "{}", repeated_coverage(&looped));
        let answer: Vec<u32> = (0..60).collect();
        assert_eq!(repeated_coverage(&answer), 0.0);
        assert!(!is_loop(&answer));
        // One recurring phrase in an otherwise varied answer is not a loop.
        let mut recurring: Vec<u32> = (100..140).collect();
        recurring.extend([100, 101, 102, 103, 104]);
        recurring.extend(200..220);
        assert!(!is_loop(&recurring), "{}", repeated_coverage(&recurring));
        // Too short to judge.
        assert!(!is_loop(&[9; 10]));
        assert!(is_loop(&[9; 16]));
    }
}
