//! Matching a context against the tree and reading drafts off it.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::{SeqId, SuffixTree, NIL, ROOT};
use crate::Draft;

/// Speculation parameters for one call.
#[derive(Clone, Copy, Debug)]
pub struct SpecParams {
    pub max_k: usize,
    pub max_spec_factor: f32,
    pub max_spec_offset: f32,
    pub min_token_prob: f32,
    pub tree: bool,
}

impl SpecParams {
    fn max_tokens(&self, match_len: usize) -> usize {
        let scaled = match_len as f32 * self.max_spec_factor + self.max_spec_offset;
        let cap = (scaled as f64 + 1e-6) as i64; // truncation toward zero, as a C cast
        cap.clamp(0, self.max_k as i64) as usize
    }
}

impl SuffixTree {
    /// Where the tree path spelling `pattern` ends: (node, tokens of its label consumed).
    fn find_path(&self, pattern: &[u32]) -> Option<(u32, usize)> {
        self.walk(ROOT, 0, pattern)
    }

    /// Follows `pattern` down from position `idx` of `node`'s label.
    fn walk(&self, mut node: u32, mut idx: usize, pattern: &[u32]) -> Option<(u32, usize)> {
        let mut label: &[u32] = if node == ROOT { &[] } else { self.label(node) };
        for &t in pattern {
            if idx == label.len() {
                node = self.child(node, t)?;
                label = self.label(node);
                idx = 0;
            }
            if label[idx] != t {
                return None;
            }
            idx += 1;
        }
        Some((node, idx))
    }

    /// Drafts a continuation of `context` (its last `max_depth` tokens are used).
    ///
    /// Every context suffix of length 1..len-1 that occurs in the tree yields a candidate
    /// draft; the best score wins and ties go to the longer match (ArcticInference's rule).
    /// Candidates are scored from the longest match down, and a shorter match is skipped once
    /// its length cap cannot beat the best score, since a draft's score never exceeds its
    /// length.
    pub fn speculate(&self, context: &[u32], p: &SpecParams) -> Draft {
        self.speculate_after(context, None, p)
    }

    /// Like `speculate`, where `tail` is an unsealed sequence of this tree whose tokens end
    /// `context`: its window of growing suffixes already holds the matches of the last
    /// tokens, so those need no walk from the root.
    pub fn speculate_after(&self, context: &[u32], tail: Option<SeqId>, p: &SpecParams) -> Draft {
        self.speculate_after_lagged(context, tail, 0, p)
    }

    /// Like `speculate_after`, where `tail`'s tokens end `context` but for its last `lag`
    /// tokens (not appended to this tree yet): the window's matches are followed down by
    /// those tokens, read-only. The draft is the one `speculate` would give on this tree.
    pub fn speculate_after_lagged(
        &self,
        context: &[u32],
        tail: Option<SeqId>,
        lag: usize,
        p: &SpecParams,
    ) -> Draft {
        let full = context;
        let context = &context[context.len().saturating_sub(self.max_depth)..];
        let window = tail
            .and_then(|s| self.window(s))
            .filter(|_| lag < context.len());
        let known = window.map_or(0, |w| w.len());
        debug_assert!(
            window.is_none()
                || tail.is_some_and(|s| self.tokens(s).is_some_and(|t| {
                    let ended = &full[..full.len() - lag];
                    let n = known.min(ended.len());
                    t[t.len() - n..] == ended[ended.len() - n..]
                }))
        );
        let recent = &context[context.len() - lag.min(context.len())..];
        let mut matches: Vec<(u32, usize)> = Vec::with_capacity(context.len());
        for match_len in 1..context.len() {
            // Suffixes longer than the lag that the window knows: its entry ends the
            // suffix without the recent tokens; follow them from there.
            let in_window = match_len
                .checked_sub(lag)
                .filter(|&m| m >= 1 && m <= known)
                .map(|m| window.unwrap()[known - m] & !super::OPEN_ENTRY);
            let found = match in_window {
                Some(node) if lag == 0 => Some((node, self.len(node) as usize)),
                Some(node) => self.walk(node, self.len(node) as usize, recent),
                None => self.find_path(&context[context.len() - match_len..]),
            };
            match found {
                Some(m) => matches.push(m),
                None => break,
            }
        }
        // Candidates are built in one scratch draft; only a new best is kept (swapped out).
        let mut best: Option<Draft> = None;
        let mut scratch = Draft::default();
        let mut heap = BinaryHeap::new();
        for (i, &(node, idx)) in matches.iter().enumerate().rev() {
            let match_len = i + 1;
            let max_tokens = p.max_tokens(match_len);
            if let Some(b) = &best {
                if max_tokens as f32 <= b.score {
                    break; // caps only shrink with shorter matches
                }
                // Nor can a draft run past the depth cap below the matched node.
                let room = self.max_depth.saturating_sub(match_len);
                if max_tokens.min(room) as f32 <= b.score {
                    continue;
                }
            }
            if let Some(b) = &best {
                if self.score_bound(node, idx, max_tokens) <= b.score {
                    continue;
                }
            }
            scratch.clear();
            if p.tree {
                self.draft_tree(
                    &mut scratch,
                    &mut heap,
                    node,
                    idx,
                    max_tokens,
                    p.min_token_prob,
                );
            } else {
                self.draft_path(&mut scratch, node, idx, max_tokens, p.min_token_prob);
            }
            scratch.match_len = match_len;
            match &mut best {
                Some(b) if scratch.score <= b.score => {}
                Some(b) => std::mem::swap(b, &mut scratch),
                None => best = Some(std::mem::take(&mut scratch)),
            }
        }
        best.unwrap_or_default()
    }

    /// An upper bound on the score of any draft of at most `max_tokens` from (`node`, `idx`):
    /// the rest of the current edge has probability 1, every later token at most the best
    /// child's share. Summed in the same f32 order as a draft, so rounding cannot beat it.
    fn score_bound(&self, node: u32, idx: usize, max_tokens: usize) -> f32 {
        let on_edge = (self.len(node) as usize - idx).min(max_tokens);
        let first = self.node(node).first_child;
        let share = if first == NIL {
            0.0
        } else {
            self.node(first).count as f32 / self.node(node).count as f32
        };
        let mut bound = 0.0f32;
        for i in 0..max_tokens {
            if i < on_edge {
                bound += 1.0;
            } else if share > 0.0 {
                bound += share;
            } else {
                break;
            }
        }
        bound
    }

    /// Follows the most frequent continuation while the running probability holds up.
    fn draft_path(
        &self,
        draft: &mut Draft,
        mut node: u32,
        mut idx: usize,
        max_tokens: usize,
        min_prob: f32,
    ) {
        let mut prob = 1.0f32;
        let mut label = self.label(node);
        while draft.tokens.len() < max_tokens && prob >= min_prob {
            if idx < label.len() {
                let parent = draft.tokens.len() as i32 - 1;
                draft.push(label[idx], parent, prob);
                idx += 1;
            } else {
                let child = self.node(node).first_child;
                if child == NIL {
                    break;
                }
                prob *= self.node(child).count as f32 / self.node(node).count as f32;
                node = child;
                label = self.label(node);
                idx = 0;
            }
        }
    }

    /// Best-first expansion: repeatedly takes the most probable frontier token (ties: the one
    /// queued first), up to `max_tokens`.
    fn draft_tree(
        &self,
        draft: &mut Draft,
        heap: &mut BinaryHeap<Frontier>,
        node: u32,
        idx: usize,
        max_tokens: usize,
        min_prob: f32,
    ) {
        heap.clear();
        let mut order = 0u32;
        let mut push = |heap: &mut BinaryHeap<Frontier>, prob, node, idx, parent| {
            heap.push(Frontier {
                prob,
                order,
                node,
                idx: idx as u32,
                parent,
            });
            order += 1;
        };
        push(heap, 1.0, node, idx, -1);
        while draft.tokens.len() < max_tokens {
            let Some(it) = heap.pop() else { break };
            let label = self.label(it.node);
            if (it.idx as usize) < label.len() {
                draft.push(label[it.idx as usize], it.parent, it.prob);
                let me = draft.tokens.len() as i32 - 1;
                push(heap, it.prob, it.node, it.idx as usize + 1, me);
            } else {
                let total = self.node(it.node).count as f32;
                let mut child = self.node(it.node).first_child;
                while child != NIL {
                    let prob = it.prob * self.node(child).count as f32 / total;
                    if prob < min_prob {
                        break;
                    }
                    push(heap, prob, child, 0, it.parent);
                    child = self.node(child).next_sib;
                }
            }
        }
    }
}

struct Frontier {
    prob: f32,
    order: u32,
    node: u32,
    idx: u32,
    parent: i32,
}

impl PartialEq for Frontier {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Frontier {}
impl PartialOrd for Frontier {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Frontier {
    fn cmp(&self, other: &Self) -> Ordering {
        self.prob
            .total_cmp(&other.prob)
            .then_with(|| other.order.cmp(&self.order))
    }
}
