//! The drafter's output.

/// A speculative draft. In path mode the tokens form one chain (`parents[i] == i - 1`);
/// in tree mode `parents` encodes a token tree (`-1` = child of the last context token).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Draft {
    pub tokens: Vec<u32>,
    /// Estimated probability of reaching each token: the product of child/parent counts.
    pub probs: Vec<f32>,
    pub parents: Vec<i32>,
    /// Sum of `probs`: the expected number of accepted tokens under the tree's statistics.
    pub score: f32,
    /// Length of the context suffix the draft was matched on.
    pub match_len: usize,
}

impl Draft {
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    pub(crate) fn clear(&mut self) {
        self.tokens.clear();
        self.probs.clear();
        self.parents.clear();
        self.score = 0.0;
        self.match_len = 0;
    }

    pub(crate) fn push(&mut self, token: u32, parent: i32, prob: f32) {
        self.tokens.push(token);
        self.parents.push(parent);
        self.probs.push(prob);
        self.score += prob;
    }

    /// Number of draft tokens a verifier accepts when the true continuation is `actual`:
    /// the longest root path of the draft (a chain in path mode) that is a prefix of `actual`.
    pub fn accepted_prefix(&self, actual: &[u32]) -> usize {
        let mut at: i32 = -1;
        let mut accepted = 0;
        for &want in actual {
            let next =
                (0..self.tokens.len()).find(|&i| self.parents[i] == at && self.tokens[i] == want);
            match next {
                Some(i) => {
                    at = i as i32;
                    accepted += 1;
                }
                None => break,
            }
        }
        accepted
    }
}
