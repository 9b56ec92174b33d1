//! Streaming detokenisation for byte-level BPE (GPT-2's scheme: every byte is spelled
//! by one printable character in the vocabulary). There decoding ids is "concatenate
//! each token's bytes, then read them as UTF-8, invalid sequences replaced", so a
//! stream needs only each token's bytes and the bytes not yet released — no decode of
//! a window of ids per token, which the engine otherwise pays for every emitted token of
//! every sequence on its critical path.

/// Each token's bytes, in one buffer.
pub struct ByteTable {
    bytes: Vec<u8>,
    /// Token `i`'s bytes are `bytes[offsets[i]..offsets[i + 1]]`.
    offsets: Vec<u32>,
    /// Tokens dropped when special tokens are skipped.
    special: Vec<bool>,
}

/// The byte each vocabulary character spells (GPT-2's `bytes_to_unicode`, inverted):
/// printable Latin-1 bytes spell themselves, the other bytes 256, 257, … in byte order.
fn char_to_byte(c: char) -> Option<u8> {
    let printable = |b: u32| {
        (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || (0xae..=0xff).contains(&b)
    };
    let c = c as u32;
    if c < 256 {
        return printable(c).then_some(c as u8);
    }
    // The n-th non-printable byte (in byte order) is spelled by char 256 + n.
    let n = c - 256;
    (0u32..256)
        .filter(|&b| !printable(b))
        .nth(n as usize)
        .map(|b| b as u8)
}

impl ByteTable {
    /// The table of a vocabulary given as (token string, is special) per id; a token
    /// spelled with a character outside the byte alphabet stands for its own UTF-8 bytes
    /// (as the `tokenizers` ByteLevel decoder treats added tokens).
    pub fn new<'a>(tokens: impl Iterator<Item = (Option<&'a str>, bool)>) -> Self {
        let mut table = ByteTable {
            bytes: Vec::new(),
            offsets: vec![0],
            special: Vec::new(),
        };
        for (token, special) in tokens {
            if let Some(t) = token {
                let mapped: Option<Vec<u8>> = t.chars().map(char_to_byte).collect();
                table
                    .bytes
                    .extend(mapped.unwrap_or_else(|| t.as_bytes().to_vec()));
            }
            table.offsets.push(table.bytes.len() as u32);
            table.special.push(special);
        }
        table
    }

    pub fn len(&self) -> usize {
        self.special.len()
    }

    pub fn is_empty(&self) -> bool {
        self.special.is_empty()
    }

    /// Token `id`'s bytes (none for an id outside the vocabulary, or a special token
    /// when those are skipped).
    pub fn token(&self, id: u32, skip_special: bool) -> &[u8] {
        let i = id as usize;
        if i >= self.len() || (skip_special && self.special[i]) {
            return &[];
        }
        &self.bytes[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }
}

/// What a stream has not released yet: the bytes since the last text given out.
#[derive(Default)]
pub struct ByteStream {
    pending: Vec<u8>,
}

impl ByteStream {
    /// Adds a token's bytes; returns the text they complete, or "" while the pending
    /// bytes still end in an incomplete (or invalid) character. A tail that decodes to
    /// U+FFFD is held back exactly as the window-decoding scheme holds it.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let text = String::from_utf8_lossy(&self.pending);
        if text.is_empty() || text.ends_with('\u{FFFD}') {
            return String::new();
        }
        let out = text.into_owned();
        self.pending.clear();
        out
    }

    /// Whatever is still held back, replacement characters and all.
    pub fn flush(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_has_one_spelling() {
        let mut seen = [false; 256];
        for c in (0u32..512).filter_map(char::from_u32) {
            if let Some(b) = char_to_byte(c) {
                assert!(!seen[b as usize], "byte {b} spelled twice");
                seen[b as usize] = true;
            }
        }
        assert!(seen.iter().all(|&s| s));
        assert_eq!(char_to_byte('Ġ'), Some(b' '));
        assert_eq!(char_to_byte('Ċ'), Some(b'\n'));
        assert_eq!(char_to_byte('a'), Some(b'a'));
    }

    #[test]
    fn a_character_split_across_tokens_is_released_whole() {
        // "é" is C3 A9: spelled "Ã" + "©" in the byte alphabet.
        let table = ByteTable::new(
            [
                (Some("Ã"), false),
                (Some("©"), false),
                (Some("<|x|>"), true),
            ]
            .into_iter(),
        );
        let mut s = ByteStream::default();
        assert_eq!(s.push(table.token(0, true)), "");
        assert_eq!(s.push(table.token(1, true)), "é");
        assert_eq!(s.push(table.token(2, true)), "");
        assert_eq!(s.push(table.token(2, false)), "<|x|>");
        assert_eq!(s.push(table.token(0, true)), "");
        assert_eq!(s.flush(), "\u{FFFD}");
    }
}
