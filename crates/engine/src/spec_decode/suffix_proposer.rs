//! The suffix-tree drafter (wring-suffix) behind the `Proposer` trait.

use wring_suffix::{SuffixConfig, SuffixDrafter};

use super::config::SuffixParams;
use super::proposer::{DraftProposal, Proposer};

pub struct SuffixProposer {
    drafter: SuffixDrafter,
}

impl SuffixProposer {
    pub fn new(p: &SuffixParams, vocab_size: usize) -> anyhow::Result<Self> {
        let cfg = SuffixConfig {
            max_tree_depth: p.max_depth,
            max_spec_factor: p.max_spec_factor,
            min_token_prob: p.min_token_prob,
            max_cached_tokens: p.cache_tokens,
            vocab_size: u32::try_from(vocab_size).ok(),
            ..SuffixConfig::default()
        };
        let mut drafter = SuffixDrafter::try_new(cfg)
            .map_err(|e| anyhow::anyhow!("suffix drafter configuration: {e}"))?;
        // Tree updates cost several µs a token once the global tree is large (every
        // suffix of the last 64 tokens walks a shared path); deferred, they run beside
        // the model's step instead of between steps. `WRING_SUFFIX_DEFERRED=off` keeps
        // them between steps (for side-by-side measurements).
        if std::env::var("WRING_SUFFIX_DEFERRED").as_deref() != Ok("off") {
            drafter.enable_deferred_global();
        }
        Ok(Self { drafter })
    }

    pub fn drafter(&self) -> &SuffixDrafter {
        &self.drafter
    }
}

impl Proposer for SuffixProposer {
    fn name(&self) -> &'static str {
        "suffix"
    }
    fn start(&mut self, id: u64, prompt: &[u32]) -> anyhow::Result<()> {
        self.drafter
            .start_request(id, prompt)
            .map_err(|e| anyhow::anyhow!("suffix drafter: {e}"))
    }
    fn append(&mut self, id: u64, tokens: &[u32]) -> anyhow::Result<()> {
        self.drafter
            .append(id, tokens)
            .map_err(|e| anyhow::anyhow!("suffix drafter: {e}"))
    }
    fn finish(&mut self, id: u64, completed: bool) {
        let r = if completed {
            self.drafter.stop_request(id)
        } else {
            self.drafter.abort_request(id)
        };
        if let Err(e) = r {
            tracing::warn!("suffix drafter: finishing request {id}: {e}");
        }
    }
    fn propose(&mut self, reqs: &[(u64, usize)]) -> Vec<DraftProposal> {
        self.drafter
            .speculate_batch(reqs)
            .into_iter()
            .map(|r| match r {
                Ok(d) => DraftProposal {
                    probs: Some(d.probs),
                    tokens: d.tokens,
                },
                Err(e) => {
                    tracing::warn!("suffix drafter: {e}");
                    DraftProposal::default()
                }
            })
            .collect()
    }
    fn reset_global(&mut self) {
        self.drafter.reset_global();
    }
    fn take_background(&mut self) -> Option<Box<dyn FnOnce() + Send>> {
        // Below this many tokens the work costs about what starting a thread for it does.
        const BACKGROUND_FROM_TOKENS: usize = 24;
        let work = self.drafter.take_global_work()?;
        if work.tokens() < BACKGROUND_FROM_TOKENS {
            work.run();
            return None;
        }
        Some(Box::new(move || work.run()))
    }
}
