//! Zeroed buffers that start on a cache line.
//!
//! A large `Vec` starts 16 bytes past a page boundary (the allocator's header), so
//! every 512-bit load from it spans two cache lines; the attention kernel over such
//! K/V pools measured ~10 % slower (results/2026-12-05-cpu-attention-aligned). An [`Aligned`] buffer is a zeroed `Vec` a little longer than
//! asked, used from its first 64-byte boundary. The `Vec` comes from `calloc`, which
//! maps fresh zero pages and touches none of them, so a large pool costs memory only
//! where it is written (a KV pool is sized for the whole context but mostly unused).
//!
//! Transparent huge pages on these buffers (`madvise(MADV_HUGEPAGE)`) measured slower
//! on the 2-core VM: a 4,096-token prefill took 9.35 s instead of 7.92 s (the kernel's
//! fault-time compaction and 2 MiB zeroing), so they are not asked for.

use std::ops::{Deref, DerefMut};

/// Bytes of the boundary every buffer starts on.
const LINE: usize = 64;

/// `len` zero-initialised values whose first one sits on a 64-byte boundary.
pub struct Aligned<T> {
    buf: Vec<T>,
    start: usize,
    len: usize,
}

impl<T: Copy + Default> Aligned<T> {
    /// `len` zeros on a cache-line boundary: a zeroed `Vec` one line longer, used from
    /// its first line.
    pub fn zeroed(len: usize) -> Self {
        let extra = LINE.div_ceil(size_of::<T>().max(1));
        let buf = vec![T::default(); len + extra];
        let misalign = buf.as_ptr() as usize % LINE;
        let start = if misalign == 0 {
            0
        } else {
            (LINE - misalign) / size_of::<T>()
        };
        Self { buf, start, len }
    }

    /// Makes the buffer at least `len` long, keeping its values only when it already is
    /// (a longer one is allocated afresh, zeroed).
    pub fn ensure_len(&mut self, len: usize) {
        if self.start + len <= self.buf.len() {
            self.len = self.len.max(len);
        } else {
            *self = Self::zeroed(len.next_power_of_two());
        }
    }
}

impl<T> Deref for Aligned<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.buf[self.start..self.start + self.len]
    }
}

impl<T> DerefMut for Aligned<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.buf[self.start..self.start + self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_start_on_a_cache_line_and_read_zero() {
        for len in [0usize, 1, 17, 4096, 3 << 20] {
            let a = Aligned::<f32>::zeroed(len);
            assert_eq!(a.as_ptr() as usize % LINE, 0, "len {len}");
            assert_eq!(a.len(), len);
            assert!(a.iter().all(|&x| x == 0.0));
            let b = Aligned::<u8>::zeroed(len);
            assert_eq!(b.as_ptr() as usize % LINE, 0, "len {len}");
            assert!(b.iter().all(|&x| x == 0));
        }
        let mut s = Aligned::<f32>::zeroed(8);
        s[7] = 3.0;
        s.ensure_len(4);
        assert_eq!(
            (s.len(), s[7]),
            (8, 3.0),
            "a shorter request keeps the values"
        );
        s.ensure_len(1000);
        assert!(s.len() >= 1000 && (s.as_ptr() as usize).is_multiple_of(LINE));
    }
}
