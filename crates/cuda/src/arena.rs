//! The activation arena: one device allocation carved by a deterministic first-fit
//! free list. The same sequence of allocations and frees always yields the same
//! offsets, so an op sequence replayed as a CUDA graph finds its tensors where the
//! capture left them. Blocks return to the list when their tensor is dropped.

use std::sync::{Arc, Mutex};

const ALIGN: usize = 256;

#[derive(Debug)]
pub struct FreeList {
    capacity: usize,
    /// Free ranges `(offset, len)`, sorted by offset, never adjacent (always merged).
    free: Vec<(usize, usize)>,
    in_use: usize,
    peak: usize,
}

impl FreeList {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            free: vec![(0, capacity)],
            in_use: 0,
            peak: 0,
        }
    }

    /// First fit; None when no free range is large enough.
    pub fn alloc(&mut self, bytes: usize) -> Option<usize> {
        let len = bytes.max(1).div_ceil(ALIGN) * ALIGN;
        let i = self.free.iter().position(|&(_, l)| l >= len)?;
        let (off, l) = self.free[i];
        if l == len {
            self.free.remove(i);
        } else {
            self.free[i] = (off + len, l - len);
        }
        self.in_use += len;
        self.peak = self.peak.max(self.in_use);
        Some(off)
    }

    pub fn free(&mut self, off: usize, bytes: usize) {
        let len = bytes.max(1).div_ceil(ALIGN) * ALIGN;
        self.in_use -= len;
        let i = self.free.partition_point(|&(o, _)| o < off);
        self.free.insert(i, (off, len));
        // Merge with the next, then with the previous range.
        if i + 1 < self.free.len() && off + len == self.free[i + 1].0 {
            self.free[i].1 += self.free[i + 1].1;
            self.free.remove(i + 1);
        }
        if i > 0 && self.free[i - 1].0 + self.free[i - 1].1 == off {
            self.free[i - 1].1 += self.free[i].1;
            self.free.remove(i);
        }
    }

    pub fn in_use(&self) -> usize {
        self.in_use
    }

    pub fn peak(&self) -> usize {
        self.peak
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

/// A block of the arena; returned to the free list on drop.
#[derive(Debug)]
pub struct Block {
    pub ptr: u64,
    off: usize,
    bytes: usize,
    list: Arc<Mutex<FreeList>>,
}

impl Drop for Block {
    fn drop(&mut self) {
        if let Ok(mut l) = self.list.lock() {
            l.free(self.off, self.bytes);
        }
    }
}

/// The free list bound to the device base address.
#[derive(Clone)]
pub struct Arena {
    base: u64,
    list: Arc<Mutex<FreeList>>,
}

impl Arena {
    pub fn new(base: u64, capacity: usize) -> Self {
        Self {
            base,
            list: Arc::new(Mutex::new(FreeList::new(capacity))),
        }
    }

    pub fn alloc(&self, bytes: usize) -> Option<Block> {
        let off = self.list.lock().ok()?.alloc(bytes)?;
        Some(Block {
            ptr: self.base + off as u64,
            off,
            bytes,
            list: self.list.clone(),
        })
    }

    /// (bytes in use, peak bytes, capacity).
    pub fn usage(&self) -> (usize, usize, usize) {
        let l = self.list.lock().expect("arena lock");
        (l.in_use(), l.peak(), l.capacity())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_sequence_gives_same_offsets_and_frees_merge() {
        let arena = Arena::new(1 << 20, 1 << 16);
        let run = || {
            let a = arena.alloc(1000).unwrap();
            let b = arena.alloc(3000).unwrap();
            let pa = a.ptr;
            drop(a);
            let c = arena.alloc(200).unwrap();
            let d = arena.alloc(5000).unwrap();
            (pa, b.ptr, c.ptr, d.ptr)
        };
        let first = run();
        let second = run();
        assert_eq!(first, second);
        assert_eq!(first.2, first.0, "the freed first block is reused first");
        assert_eq!(arena.usage().0, 0, "everything returned");
        let l = arena.list.lock().unwrap();
        assert_eq!(
            l.free,
            vec![(0, 1 << 16)],
            "free ranges merged back into one"
        );
    }

    #[test]
    fn exhaustion_is_none_not_a_panic() {
        let arena = Arena::new(0, 1024);
        let _a = arena.alloc(1024).unwrap();
        assert!(arena.alloc(1).is_none());
    }
}
