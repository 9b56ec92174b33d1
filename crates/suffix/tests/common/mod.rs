//! A deliberately naive reference drafter: it keeps plain token sequences and answers every
//! question by brute force over all of them. No suffix tree, no incremental state.
#![allow(dead_code)]

use std::path::PathBuf;

use wring_suffix::{Draft, SuffixConfig};

/// The repository's test data (`tests/data`: golden outputs, a trace, corpus fixtures; see its README).
pub fn test_data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data")
}

/// Plain sequences standing in for one suffix tree.
pub struct Naive<'a> {
    pub seqs: Vec<&'a [u32]>,
    pub depth: usize,
}

impl Naive<'_> {
    /// Number of stored suffixes (each truncated to `depth`) that start with `pat`.
    pub fn count(&self, pat: &[u32]) -> u32 {
        if pat.len() > self.depth {
            return 0;
        }
        let mut n = 0;
        for s in &self.seqs {
            for p in 0..s.len() {
                if p + pat.len() <= s.len() && s[p..p + pat.len()] == *pat {
                    n += 1;
                }
            }
        }
        n
    }

    /// Continuations of `pat` with their counts, by decreasing count.
    pub fn children(&self, pat: &[u32]) -> Vec<(u32, u32)> {
        if pat.len() >= self.depth {
            return Vec::new();
        }
        let mut toks: Vec<u32> = Vec::new();
        for s in &self.seqs {
            for p in 0..s.len() {
                if p + pat.len() < s.len() && s[p..p + pat.len()] == *pat {
                    toks.push(s[p + pat.len()]);
                }
            }
        }
        toks.sort_unstable();
        toks.dedup();
        let mut out: Vec<(u32, u32)> = toks
            .into_iter()
            .map(|t| {
                let mut q = pat.to_vec();
                q.push(t);
                (t, self.count(&q))
            })
            .collect();
        out.sort_by_key(|&(_, c)| std::cmp::Reverse(c));
        out
    }

    /// True when `pat` ends inside a compressed edge: one continuation, taken by every suffix.
    fn interior(&self, pat: &[u32]) -> bool {
        if pat.is_empty() {
            return false;
        }
        let ch = self.children(pat);
        ch.len() == 1 && ch[0].1 == self.count(pat)
    }

    /// All path drafts from `pat` under every way of breaking ties between equal counts.
    pub fn path_drafts(&self, pat: &[u32], max_tokens: usize, min_prob: f32) -> Vec<Draft> {
        let mut out = Vec::new();
        let mut cur = Draft::default();
        self.path_rec(pat.to_vec(), 1.0, max_tokens, min_prob, &mut cur, &mut out);
        out
    }

    fn path_rec(
        &self,
        pat: Vec<u32>,
        prob: f32,
        max_tokens: usize,
        min_prob: f32,
        cur: &mut Draft,
        out: &mut Vec<Draft>,
    ) {
        let ch = self.children(&pat);
        if cur.tokens.len() >= max_tokens || prob < min_prob || ch.is_empty() {
            out.push(cur.clone());
            return;
        }
        let n = self.count(&pat);
        let top = ch[0].1;
        for &(t, c) in ch.iter().filter(|&&(_, c)| c == top) {
            let p = if self.interior(&pat) {
                prob
            } else {
                prob * (c as f32 / n as f32)
            };
            if p < min_prob {
                out.push(cur.clone());
                continue;
            }
            let mut next = pat.clone();
            next.push(t);
            let saved = cur.clone();
            let parent = cur.tokens.len() as i32 - 1;
            cur.tokens.push(t);
            cur.parents.push(parent);
            cur.probs.push(p);
            cur.score += p;
            self.path_rec(next, p, max_tokens, min_prob, cur, out);
            *cur = saved;
        }
    }

    /// Best-first token tree from `pat`; returns the emitted probabilities in order (these and
    /// the score do not depend on how ties are broken).
    pub fn tree_probs(&self, pat: &[u32], max_tokens: usize, min_prob: f32) -> (Vec<f32>, f32) {
        // Frontier entries: (path, prob). Always pop the highest prob.
        let mut frontier: Vec<(Vec<u32>, f32, bool)> = vec![(pat.to_vec(), 1.0, true)];
        let (mut probs, mut score) = (Vec::new(), 0.0f32);
        while probs.len() < max_tokens && !frontier.is_empty() {
            let best = (0..frontier.len())
                .max_by(|&a, &b| frontier[a].1.total_cmp(&frontier[b].1).then(b.cmp(&a)))
                .unwrap();
            let (path, prob, is_start) = frontier.remove(best);
            // A start position or an edge interior passes its probability on unchanged.
            if !is_start && !path.is_empty() {
                probs.push(prob);
                score += prob;
                if probs.len() >= max_tokens {
                    break;
                }
            }
            let ch = self.children(&path);
            if self.interior(&path) {
                let mut next = path.clone();
                next.push(ch[0].0);
                frontier.push((next, prob, false));
            } else {
                let n = self.count(&path) as f32;
                for (t, c) in ch {
                    let p = prob * c as f32 / n;
                    if p < min_prob {
                        break;
                    }
                    let mut next = path.clone();
                    next.push(t);
                    frontier.push((next, p, false));
                }
            }
        }
        (probs, score)
    }

    /// Probability the tree-mode expansion assigns to the path `pat + tail`.
    pub fn tree_prob_of(&self, pat: &[u32], tail: &[u32]) -> Option<f32> {
        let mut path = pat.to_vec();
        let mut prob = 1.0f32;
        for &t in tail {
            let ch = self.children(&path);
            let &(_, c) = ch.iter().find(|&&(tt, _)| tt == t)?;
            if !self.interior(&path) {
                prob = prob * c as f32 / self.count(&path) as f32;
            }
            path.push(t);
        }
        Some(prob)
    }
}

/// Draft-length cap, computed like ArcticInference (float steps included).
pub fn max_tokens(cfg: &SuffixConfig, match_len: usize, k: usize) -> usize {
    let v = (match_len as f32 * cfg.max_spec_factor + cfg.max_spec_offset) as f64 + 1e-6;
    (v as i64).clamp(0, k as i64) as usize
}

/// The context suffixes (lengths 1..len-1 of the last `depth` tokens) that occur.
pub fn matched_lengths(naive: &Naive, context: &[u32]) -> Vec<usize> {
    let ctx = &context[context.len().saturating_sub(naive.depth)..];
    let mut out = Vec::new();
    for m in 1..ctx.len() {
        if naive.count(&ctx[ctx.len() - m..]) == 0 {
            break;
        }
        out.push(m);
    }
    out
}

fn ctx_suffix(naive: &Naive, context: &[u32], m: usize) -> Vec<u32> {
    let ctx = &context[context.len().saturating_sub(naive.depth)..];
    ctx[ctx.len() - m..].to_vec()
}

/// Lowest score any tie-breaking can give one tree's path speculation.
pub fn min_path_score(naive: &Naive, cfg: &SuffixConfig, context: &[u32], k: usize) -> f32 {
    let mut best = 0.0f32;
    for m in matched_lengths(naive, context) {
        let pat = ctx_suffix(naive, context, m);
        let drafts = naive.path_drafts(&pat, max_tokens(cfg, m, k), cfg.min_token_prob);
        let lo = drafts.iter().map(|d| d.score).fold(f32::INFINITY, f32::min);
        best = best.max(lo);
    }
    best
}

/// Whether `d` is what one tree's path speculation returns under some tie-breaking.
pub fn path_valid_for(
    naive: &Naive,
    cfg: &SuffixConfig,
    context: &[u32],
    k: usize,
    d: &Draft,
) -> bool {
    let lens = matched_lengths(naive, context);
    if lens.is_empty() {
        return d.tokens.is_empty() && d.match_len == 0;
    }
    if !lens.contains(&d.match_len) {
        return false;
    }
    let pat = ctx_suffix(naive, context, d.match_len);
    let drafts = naive.path_drafts(&pat, max_tokens(cfg, d.match_len, k), cfg.min_token_prob);
    let found = drafts.iter().any(|x| {
        x.tokens == d.tokens && x.probs == d.probs && x.score == d.score && x.parents == d.parents
    });
    if !found {
        return false;
    }
    lens.iter().all(|&m| {
        if m == d.match_len {
            return true;
        }
        let pat = ctx_suffix(naive, context, m);
        let drafts = naive.path_drafts(&pat, max_tokens(cfg, m, k), cfg.min_token_prob);
        let lo = drafts.iter().map(|x| x.score).fold(f32::INFINITY, f32::min);
        if m > d.match_len {
            lo < d.score
        } else {
            lo <= d.score
        }
    })
}

/// Whether `d` is what the drafter (own tree vs global tree, ties to its own) returns in path
/// mode under some tie-breaking.
pub fn drafter_path_valid(
    own: &Naive,
    global: &Naive,
    cfg: &SuffixConfig,
    ctx: &[u32],
    k: usize,
    d: &Draft,
) -> bool {
    (path_valid_for(own, cfg, ctx, k, d) && min_path_score(global, cfg, ctx, k) <= d.score)
        || (path_valid_for(global, cfg, ctx, k, d) && min_path_score(own, cfg, ctx, k) < d.score)
}

/// Tree-mode outcome of one tree: (match_len, emitted probs, score); tie-independent.
pub fn tree_outcome(
    naive: &Naive,
    cfg: &SuffixConfig,
    context: &[u32],
    k: usize,
) -> (usize, Vec<f32>, f32) {
    let mut best = (0, Vec::new(), 0.0f32);
    for m in matched_lengths(naive, context) {
        let pat = ctx_suffix(naive, context, m);
        let (probs, score) = naive.tree_probs(&pat, max_tokens(cfg, m, k), cfg.min_token_prob);
        if score >= best.2 {
            best = (m, probs, score);
        }
    }
    best
}

/// Checks a tree-mode draft against the naive outcome of the winning tree.
pub fn tree_draft_valid(
    naive: &Naive,
    context: &[u32],
    want: &(usize, Vec<f32>, f32),
    d: &Draft,
) -> Result<(), String> {
    if d.match_len != want.0 || d.probs != want.1 || d.score != want.2 {
        return Err(format!(
            "tree draft (m {}, probs {:?}, score {}) != naive (m {}, probs {:?}, score {})",
            d.match_len, d.probs, d.score, want.0, want.1, want.2
        ));
    }
    let pat = ctx_suffix(
        naive,
        context,
        d.match_len.max(1).min(context.len().saturating_sub(1)),
    );
    let mut paths: Vec<Vec<u32>> = Vec::new();
    for i in 0..d.tokens.len() {
        let p = d.parents[i];
        if p >= i as i32 || p < -1 {
            return Err(format!("token {i}: bad parent {p}"));
        }
        let mut tail = if p < 0 {
            Vec::new()
        } else {
            paths[p as usize].clone()
        };
        tail.push(d.tokens[i]);
        if paths.contains(&tail) {
            return Err(format!("token {i}: duplicate path"));
        }
        if naive.tree_prob_of(&pat, &tail) != Some(d.probs[i]) {
            return Err(format!("token {i}: prob {} not the path's", d.probs[i]));
        }
        paths.push(tail);
    }
    Ok(())
}
