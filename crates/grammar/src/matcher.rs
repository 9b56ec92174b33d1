//! One request's grammar state: the mask of allowed next tokens, advancing by
//! emitted tokens, and checking a speculative draft.

use llguidance::toktrie::SimpleVob;
use llguidance::Matcher;

/// Allowed next tokens, one bit per vocabulary id.
#[derive(Debug, Clone)]
pub struct TokenMask {
    bits: SimpleVob,
    vocab_size: usize,
}

impl TokenMask {
    pub fn allows(&self, token: u32) -> bool {
        (token as usize) < self.vocab_size && self.bits.is_allowed(token)
    }

    /// The mask as packed words: bit `t % 32` of word `t / 32` is set when token `t` is
    /// allowed (ids at or past [`TokenMask::vocab_size`] are not, whatever their bit).
    pub fn words(&self) -> &[u32] {
        self.bits.as_slice()
    }

    /// Ids below this may be allowed.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Allows `token` too (ids at or past [`TokenMask::vocab_size`] stay forbidden).
    pub fn allow(&mut self, token: u32) {
        if (token as usize) < self.vocab_size && (token as usize) < self.bits.len() {
            self.bits.allow_token(token);
        }
    }

    pub fn count(&self) -> usize {
        (0..self.vocab_size as u32)
            .filter(|&t| self.allows(t))
            .count()
    }

    /// Sets every disallowed logit to -inf (the row may be wider than the mask).
    pub fn apply(&self, logits: &mut [f32]) {
        let width = logits.len().min(self.vocab_size);
        let (inside, beyond) = logits.split_at_mut(width);
        // 32 ids per mask word: skip fully allowed words, clear fully forbidden ones.
        for (w, chunk) in inside.chunks_mut(32).enumerate() {
            let word = self.bits.as_slice().get(w).copied().unwrap_or(0);
            if word == u32::MAX && chunk.len() == 32 {
                continue;
            }
            for (i, l) in chunk.iter_mut().enumerate() {
                if word & (1 << i) == 0 {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        beyond.fill(f32::NEG_INFINITY);
    }
}

/// Cloning gives an independent matcher at the same position (the grammar and
/// its lexer caches are shared): one compile serves every sample of a request.
#[derive(Clone)]
pub struct GrammarMatcher {
    inner: Matcher,
    vocab_size: usize,
}

impl std::fmt::Debug for GrammarMatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrammarMatcher")
            .field("vocab_size", &self.vocab_size)
            .field("stopped", &self.inner.is_stopped())
            .field("error", &self.inner.get_error())
            .finish()
    }
}

impl GrammarMatcher {
    pub(crate) fn new(inner: Matcher, vocab_size: usize) -> Self {
        Self { inner, vocab_size }
    }

    /// Tokens allowed at the next position (only the stop tokens once the grammar
    /// is complete and cannot continue).
    pub fn allowed_tokens(&mut self) -> anyhow::Result<TokenMask> {
        let bits = self.inner.compute_mask_or_eos()?;
        Ok(TokenMask {
            bits,
            vocab_size: self.vocab_size,
        })
    }

    /// Advances over emitted tokens; an error if one of them is not allowed.
    pub fn advance(&mut self, tokens: &[u32]) -> anyhow::Result<()> {
        self.inner.consume_tokens(tokens)
    }

    /// How many leading tokens of `draft` the grammar allows from here, without
    /// advancing: a speculative draft token past this point is rejected like any
    /// other mismatch.
    pub fn allowed_prefix_len(&mut self, draft: &[u32]) -> anyhow::Result<usize> {
        self.inner.validate_tokens(draft)
    }

    /// The tokens the grammar forces from here (a fixed JSON key, a closing `"}`: bytes
    /// no other output could have, in their canonical tokenisation), at most `max`, without
    /// advancing. At a forced position the mask [`Self::allowed_tokens`] gives is that one
    /// token, so a draft of them is accepted unless its tokenisation changes once the
    /// first is emitted (llguidance keeps back a last token that later bytes could
    /// lengthen). Empty when nothing is forced, or where the grammar has stopped.
    pub fn forced_tokens(&mut self, max: usize) -> anyhow::Result<Vec<u32>> {
        if max == 0 || self.inner.is_stopped() {
            return Ok(Vec::new());
        }
        // llguidance pushes the forced bytes into its parser (as computing a mask does)
        // and keeps the result for the next mask; the tokens consumed stay the same.
        let mut forced = self.inner.compute_ff_tokens();
        if let Some(e) = self.inner.get_error() {
            anyhow::bail!("computing the forced tokens: {e}");
        }
        forced.truncate(max);
        Ok(forced)
    }

    /// Undoes the last `n` advanced tokens.
    pub fn rollback(&mut self, n: usize) -> anyhow::Result<()> {
        self.inner.rollback(n)
    }

    /// The output so far is a complete sentence of the grammar.
    pub fn is_accepting(&mut self) -> bool {
        self.inner.is_accepting().unwrap_or(false)
    }

    /// The grammar has ended (a stop token was consumed, or nothing can follow).
    pub fn is_finished(&self) -> bool {
        self.inner.is_stopped()
    }

    pub fn error(&self) -> Option<String> {
        self.inner.get_error()
    }
}
