//! Offline replay of recorded generations through the drafter (the `drafter-eval` core and
//! the reference test). Semantics: `../shared/traces/README.md`.

use std::path::Path;
use std::time::Instant;

use crate::{Draft, DraftMode, DrafterError, SuffixDrafter};

/// One recorded request: prompt and the model's real (greedy) output.
#[derive(Clone, Debug, serde::Deserialize, serde::Serialize)]
pub struct TraceRequest {
    #[serde(default)]
    pub idx: usize,
    pub corpus: String,
    pub prompt_ids: Vec<u32>,
    pub output_ids: Vec<u32>,
}

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("cannot read trace {path}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("trace line {line}: {msg}")]
    Malformed { line: usize, msg: String },
    #[error("trace has no requests")]
    Empty,
}

/// Parses JSONL: one request per non-blank line. Any malformed line is an error that names it.
pub fn parse_trace(text: &str) -> Result<Vec<TraceRequest>, TraceError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let malformed = |msg: String| TraceError::Malformed { line: i + 1, msg };
        let req: TraceRequest = serde_json::from_str(line).map_err(|e| malformed(e.to_string()))?;
        if req.prompt_ids.is_empty() {
            return Err(malformed("empty prompt_ids".into()));
        }
        out.push(req);
    }
    if out.is_empty() {
        return Err(TraceError::Empty);
    }
    Ok(out)
}

pub fn load_trace(path: &Path) -> Result<Vec<TraceRequest>, TraceError> {
    let text = std::fs::read_to_string(path).map_err(|source| TraceError::Io {
        path: path.display().to_string(),
        source,
    })?;
    parse_trace(&text)
}

/// One verify step of a replay.
#[derive(Clone, Debug)]
pub struct Step {
    /// Output position the draft was made at.
    pub pos: usize,
    pub draft: Draft,
    /// Draft tokens equal to the true continuation (longest matching root path in tree mode).
    pub accepted: usize,
    /// Tokens appended after the step: accepted + 1 bonus (fewer at the very end).
    pub emitted: usize,
    pub speculate_ns: u64,
    pub append_ns: u64,
}

/// Replays one request: start it, draft/verify/append along its real output, stop it.
pub fn replay_request(
    drafter: &mut SuffixDrafter,
    id: u64,
    req: &TraceRequest,
    k: usize,
    mode: DraftMode,
    mut on_step: impl FnMut(&Step),
) -> Result<(), DrafterError> {
    drafter.start_request(id, &req.prompt_ids)?;
    let out = &req.output_ids;
    let mut pos = 0;
    while pos < out.len() {
        let t0 = Instant::now();
        let draft = drafter.speculate_mode(id, k, mode)?;
        let speculate_ns = t0.elapsed().as_nanos() as u64;
        let accepted = draft.accepted_prefix(&out[pos..]);
        let emitted = (accepted + 1).min(out.len() - pos);
        let t1 = Instant::now();
        drafter.append(id, &out[pos..pos + emitted])?;
        let append_ns = t1.elapsed().as_nanos() as u64;
        on_step(&Step {
            pos,
            draft,
            accepted,
            emitted,
            speculate_ns,
            append_ns,
        });
        pos += emitted;
    }
    drafter.stop_request(id)
}

/// The permutation Python's `random.Random(seed).shuffle` applies to `0..n`, so that the
/// `shuffled` order matches the reference runs exactly.
pub fn python_shuffle(n: usize, seed: u32) -> Vec<usize> {
    let mut rng = Mt19937::from_python_int_seed(seed);
    let mut v: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        v.swap(i, j);
    }
    v
}

/// Mersenne Twister as CPython's `random` uses it.
struct Mt19937 {
    state: [u32; 624],
    index: usize,
}

impl Mt19937 {
    fn init_genrand(seed: u32) -> Self {
        let mut state = [0u32; 624];
        state[0] = seed;
        for i in 1..624 {
            let prev = state[i - 1];
            state[i] = 1_812_433_253u32
                .wrapping_mul(prev ^ (prev >> 30))
                .wrapping_add(i as u32);
        }
        Self { state, index: 624 }
    }

    /// CPython seeds an int through `init_by_array` with its 32-bit words (one word here).
    fn from_python_int_seed(seed: u32) -> Self {
        let key = [seed];
        let mut mt = Self::init_genrand(19_650_218);
        let s = &mut mt.state;
        let (mut i, mut j) = (1usize, 0usize);
        for _ in 0..624.max(key.len()) {
            let prev = s[i - 1];
            s[i] = (s[i] ^ (prev ^ (prev >> 30)).wrapping_mul(1_664_525))
                .wrapping_add(key[j])
                .wrapping_add(j as u32);
            i += 1;
            j += 1;
            if i >= 624 {
                s[0] = s[623];
                i = 1;
            }
            if j >= key.len() {
                j = 0;
            }
        }
        for _ in 0..623 {
            let prev = s[i - 1];
            s[i] =
                (s[i] ^ (prev ^ (prev >> 30)).wrapping_mul(1_566_083_941)).wrapping_sub(i as u32);
            i += 1;
            if i >= 624 {
                s[0] = s[623];
                i = 1;
            }
        }
        s[0] = 0x8000_0000;
        mt
    }

    fn next_u32(&mut self) -> u32 {
        if self.index >= 624 {
            for k in 0..624 {
                let y = (self.state[k] & 0x8000_0000) | (self.state[(k + 1) % 624] & 0x7fff_ffff);
                let mut v = self.state[(k + 397) % 624] ^ (y >> 1);
                if y & 1 != 0 {
                    v ^= 0x9908_b0df;
                }
                self.state[k] = v;
            }
            self.index = 0;
        }
        let mut y = self.state[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// `_randbelow`: rejection sampling on `bit_length(n)` random bits (n < 2^32 here).
    fn below(&mut self, n: u64) -> u64 {
        let bits = 64 - n.leading_zeros();
        loop {
            let r = u64::from(self.next_u32() >> (32 - bits));
            if r < n {
                return r;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shuffle_matches_cpython() {
        // python3 -c "import random; l=list(range(10)); random.Random(0).shuffle(l); print(l)"
        assert_eq!(python_shuffle(10, 0), vec![7, 8, 1, 5, 3, 4, 2, 0, 9, 6]);
    }

    #[test]
    fn malformed_lines_are_named() {
        let good = r#"{"corpus":"a","prompt_ids":[1,2],"output_ids":[3]}"#;
        let text = format!("{good}\n{{not json\n");
        match parse_trace(&text) {
            Err(TraceError::Malformed { line: 2, .. }) => {}
            other => panic!("expected a line-2 error, got {other:?}"),
        }
        let empty_prompt = r#"{"corpus":"a","prompt_ids":[],"output_ids":[3]}"#;
        assert!(matches!(
            parse_trace(empty_prompt),
            Err(TraceError::Malformed { line: 1, .. })
        ));
        assert!(matches!(parse_trace("\n\n"), Err(TraceError::Empty)));
        assert_eq!(parse_trace(good).unwrap().len(), 1);
    }
}
