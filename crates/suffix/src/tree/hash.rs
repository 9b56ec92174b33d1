//! Child lookup: one hash map per tree from (parent node, first token) to child node.
//! One shared map costs ~13 bytes per edge, far less than a map object per node.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A finaliser-quality mix of one u64 key (murmur3's fmix64). Keys pack (parent, token);
/// a plain multiplicative hash would leave the low bits depending on the token alone.
#[derive(Default, Clone, Copy)]
pub(crate) struct EdgeHasher(u64);

impl Hasher for EdgeHasher {
    fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8)) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

pub(crate) type EdgeMap = HashMap<u64, u32, BuildHasherDefault<EdgeHasher>>;

#[inline]
pub(crate) fn edge_key(parent: u32, token: u32) -> u64 {
    (u64::from(parent) << 32) | u64::from(token)
}
