//! Draft proposers. The engine tells a proposer about a request's prompt, then only
//! about tokens actually emitted, and asks for up to K draft tokens per step.

use std::collections::HashMap;

/// Up to K draft tokens for one sequence, with the proposer's own estimate of the
/// probability that each prefix is accepted (None when it has none).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DraftProposal {
    pub tokens: Vec<u32>,
    pub probs: Option<Vec<f32>>,
}

/// A proposer that keeps no per-request state may leave `start`, `append` and `finish` to
/// their defaults (they do nothing).
pub trait Proposer: Send {
    fn name(&self) -> &'static str;
    fn start(&mut self, _id: u64, _prompt: &[u32]) -> anyhow::Result<()> {
        Ok(())
    }
    /// Tokens emitted for `id` (never rejected drafts).
    fn append(&mut self, _id: u64, _tokens: &[u32]) -> anyhow::Result<()> {
        Ok(())
    }
    /// The request ended; `completed` ones may feed shared state (the global tree).
    fn finish(&mut self, _id: u64, _completed: bool) {}
    /// Drafts for each (id, max_k).
    fn propose(&mut self, reqs: &[(u64, usize)]) -> Vec<DraftProposal>;
    /// Clears shared state (admin reset).
    fn reset_global(&mut self) {}
    /// Work on shared state the proposer deferred (the suffix drafter's global tree),
    /// which the engine runs on another thread while the model computes; the engine
    /// joins it before the next `propose`.
    fn take_background(&mut self) -> Option<Box<dyn FnOnce() + Send>> {
        None
    }
}

/// Speculation off.
#[derive(Debug, Default)]
pub struct NoProposer;

impl Proposer for NoProposer {
    fn name(&self) -> &'static str {
        "none"
    }
    fn propose(&mut self, reqs: &[(u64, usize)]) -> Vec<DraftProposal> {
        vec![DraftProposal::default(); reqs.len()]
    }
}

/// Prompt lookup: find the latest earlier occurrence of the context's last n tokens
/// (largest n first) and propose what followed it.
#[derive(Debug)]
pub struct NgramProposer {
    min_n: usize,
    max_n: usize,
    contexts: HashMap<u64, Vec<u32>>,
}

impl NgramProposer {
    pub fn new(min_n: usize, max_n: usize) -> Self {
        assert!(min_n >= 1 && min_n <= max_n);
        Self {
            min_n,
            max_n,
            contexts: HashMap::new(),
        }
    }

    /// The lookup on one context.
    pub fn lookup(&self, ctx: &[u32], k: usize) -> Vec<u32> {
        if k == 0 {
            return Vec::new();
        }
        for n in (self.min_n..=self.max_n).rev() {
            if ctx.len() <= n {
                continue;
            }
            let pattern = &ctx[ctx.len() - n..];
            // Latest start i < len - n whose n-gram matches and has a continuation.
            for i in (0..ctx.len() - n).rev() {
                if &ctx[i..i + n] == pattern {
                    let from = i + n;
                    let to = (from + k).min(ctx.len());
                    return ctx[from..to].to_vec();
                }
            }
        }
        Vec::new()
    }
}

impl Proposer for NgramProposer {
    fn name(&self) -> &'static str {
        "ngram"
    }
    fn start(&mut self, id: u64, prompt: &[u32]) -> anyhow::Result<()> {
        if self.contexts.contains_key(&id) {
            anyhow::bail!("ngram proposer: request {id} started twice");
        }
        self.contexts.insert(id, prompt.to_vec());
        Ok(())
    }
    fn append(&mut self, id: u64, tokens: &[u32]) -> anyhow::Result<()> {
        self.contexts
            .get_mut(&id)
            .ok_or_else(|| anyhow::anyhow!("ngram proposer: unknown request {id}"))?
            .extend_from_slice(tokens);
        Ok(())
    }
    fn finish(&mut self, id: u64, _completed: bool) {
        self.contexts.remove(&id);
    }
    fn propose(&mut self, reqs: &[(u64, usize)]) -> Vec<DraftProposal> {
        reqs.iter()
            .map(|&(id, k)| DraftProposal {
                tokens: self
                    .contexts
                    .get(&id)
                    .map(|c| self.lookup(c, k))
                    .unwrap_or_default(),
                probs: None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ngram_proposes_the_continuation_of_the_latest_longest_match() {
        let p = NgramProposer::new(1, 3);
        // "1 2 3 9 9 | 1 2 3 7 8 | 1 2 3" -> latest 3-gram match continues "7 8 1".
        let ctx = [1, 2, 3, 9, 9, 1, 2, 3, 7, 8, 1, 2, 3];
        assert_eq!(p.lookup(&ctx, 3), vec![7, 8, 1]);
        assert_eq!(p.lookup(&ctx, 1), vec![7]);
        assert_eq!(p.lookup(&ctx, 0), Vec::<u32>::new());
        assert!(p.lookup(&[5, 6, 7], 4).is_empty(), "no repeat, no draft");
        // Falls back to shorter n-grams.
        assert_eq!(p.lookup(&[4, 5, 6, 5], 2), vec![6, 5]);
    }

    #[test]
    fn ngram_tracks_requests_and_rejects_unknown_ids() {
        let mut p = NgramProposer::new(2, 2);
        p.start(1, &[1, 2, 3]).unwrap();
        assert!(p.start(1, &[1]).is_err());
        p.append(1, &[1, 2]).unwrap();
        assert_eq!(p.propose(&[(1, 4), (9, 4)])[0].tokens, vec![3, 1, 2]);
        assert!(p.propose(&[(9, 4)])[0].tokens.is_empty());
        p.finish(1, true);
        assert!(p.append(1, &[1]).is_err());
    }
}
