//! A small fork-join team for the CPU backend's per-op parallel loops.
//!
//! A decode step runs ~250 parallel ops of a few tens of microseconds each. Through
//! rayon each one hands the caller's work to the pool and blocks the caller on a latch
//! (two thread wake-ups per op when the pool had gone to sleep). Here the calling
//! thread works too: it publishes the job, takes chunks from a shared counter like the
//! helpers, and only waits for chunks a helper is still running. Helpers spin briefly
//! between jobs (the next op of a step comes microseconds later), then park.
//!
//! Chunks are split into one contiguous range per thread, so each core streams its own
//! stretch of a weight matrix (handing out chunks one by one from a shared counter
//! interleaved the two cores' streams and measured no faster than one core: the head
//! matmul took 3.1-3.4 ms on 2 threads vs 1.6-2.0 ms with contiguous halves). A thread
//! takes chunks from the front of its own range and, once that is empty, steals single
//! chunks from the back of the others', so a helper the OS has descheduled (or that
//! never woke) holds up at most the one chunk it took. Which thread runs a chunk never
//! changes what it computes: callers give each chunk a fixed range of outputs.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long an idle helper spins for the next job before it parks.
const SPIN: Duration = Duration::from_micros(200);

/// `state`: generation in bits 32.., CLOSED at bit 31, helpers inside the job below.
const CLOSED: u64 = 1 << 31;
const INSIDE: u64 = CLOSED - 1;

type JobFn = *const (dyn Fn(usize) + Sync);

#[repr(align(128))]
struct Padded(AtomicU64);

const fn pack(lo: usize, hi: usize) -> u64 {
    lo as u64 | (hi as u64) << 32
}

/// Takes one chunk of range `i`: its first (the owner's end) or, for a thief, its last.
fn take(s: &Shared, i: usize, back: bool) -> Option<usize> {
    let r = &s.ranges[i].0;
    let mut cur = r.load(Ordering::Acquire);
    loop {
        let (lo, hi) = ((cur & 0xffff_ffff) as usize, (cur >> 32) as usize);
        if lo >= hi {
            return None;
        }
        let (next, chunk) = if back {
            (pack(lo, hi - 1), hi - 1)
        } else {
            (pack(lo + 1, hi), lo)
        };
        match r.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Some(chunk),
            Err(c) => cur = c,
        }
    }
}

/// Runs the chunks of range `me`, then steals from the other ranges until all are empty.
fn work(s: &Shared, me: usize, f: &(dyn Fn(usize) + Sync)) {
    while let Some(i) = take(s, me, false) {
        f(i);
    }
    let parts = s.parts.load(Ordering::Acquire);
    for k in 1..parts {
        let victim = (me + k) % parts;
        while let Some(i) = take(s, victim, true) {
            f(i);
        }
    }
}

fn noop(_: usize) {}

struct Shared {
    state: AtomicU64,
    /// The job: its closure and the most helpers it takes.
    f: std::cell::UnsafeCell<JobFn>,
    max_helpers: AtomicU64,
    /// Chunks not yet claimed: one `lo..hi` range per participant (caller first), packed
    /// as `lo | hi << 32`, each on its own cache line.
    ranges: Box<[Padded]>,
    /// Participants of the current job (the caller plus at most this many - 1 helpers).
    parts: AtomicUsize,
    sleepers: AtomicUsize,
    /// A chunk panicked on a helper; the caller re-raises it.
    panicked: std::sync::atomic::AtomicBool,
    park: Mutex<()>,
    wake: Condvar,
}

// SAFETY: `f` is written only by the thread holding `Team::busy` while no helper is
// inside a job (the previous one is closed and empty), and read by a helper only
// between a successful enter and its exit, which the writer waits for.
unsafe impl Sync for Shared {}
unsafe impl Send for Shared {}

struct Team {
    shared: &'static Shared,
    helpers: usize,
    busy: Mutex<()>,
}

fn team() -> &'static Team {
    static TEAM: OnceLock<Team> = OnceLock::new();
    TEAM.get_or_init(|| {
        let shared: &'static Shared = Box::leak(Box::new(Shared {
            state: AtomicU64::new(0),
            f: std::cell::UnsafeCell::new(&noop as &(dyn Fn(usize) + Sync) as JobFn),
            max_helpers: AtomicU64::new(0),
            ranges: (0..rayon::current_num_threads().max(1))
                .map(|_| Padded(AtomicU64::new(0)))
                .collect(),
            parts: AtomicUsize::new(0),
            sleepers: AtomicUsize::new(0),
            panicked: std::sync::atomic::AtomicBool::new(false),
            park: Mutex::new(()),
            wake: Condvar::new(),
        }));
        let mut helpers = 0;
        for i in 0..rayon::current_num_threads().saturating_sub(1) {
            let spawned = std::thread::Builder::new()
                .name(format!("wring-cpu-{i}"))
                .spawn(move || helper(shared));
            // Fewer helpers only means less parallelism.
            if spawned.is_err() {
                break;
            }
            helpers += 1;
        }
        Team {
            shared,
            helpers,
            busy: Mutex::new(()),
        }
    })
}

fn helper(s: &'static Shared) {
    let mut seen = s.state.load(Ordering::Acquire) >> 32;
    loop {
        // Wait for a new generation: spin, then park.
        let start = Instant::now();
        let mut spins = 0u32;
        let gen = loop {
            let g = s.state.load(Ordering::SeqCst) >> 32;
            if g != seen {
                break g;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(256) && start.elapsed() > SPIN {
                let mut guard = s.park.lock().unwrap_or_else(|e| e.into_inner());
                s.sleepers.fetch_add(1, Ordering::SeqCst);
                while s.state.load(Ordering::SeqCst) >> 32 == seen {
                    guard = s.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
                }
                s.sleepers.fetch_sub(1, Ordering::SeqCst);
                continue;
            }
            std::hint::spin_loop();
        };
        seen = gen;
        // Enter the job unless it is closed or has its helpers already.
        let mut cur = s.state.load(Ordering::Acquire);
        // The helpers inside before this one: its range is the next after the caller's.
        let slot = loop {
            if cur >> 32 != gen
                || cur & CLOSED != 0
                || cur & INSIDE >= s.max_helpers.load(Ordering::Acquire)
            {
                break None;
            }
            match s
                .state
                .compare_exchange(cur, cur + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break Some((cur & INSIDE) as usize + 1),
                Err(c) => cur = c,
            }
        };
        let Some(slot) = slot else {
            continue;
        };
        // SAFETY: entered job `gen`: the caller rewrites `f` and the ranges only after
        // this helper has left, and keeps the closure alive until then.
        let f = unsafe { &**s.f.get() };
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(s, slot, f)));
        if run.is_err() {
            s.panicked.store(true, Ordering::Release);
        }
        s.state.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Participants of a job on `threads` threads: the caller and the helpers it may use.
fn parts_of(t: &Team, threads: usize) -> usize {
    (threads - 1).min(t.helpers).min(t.shared.ranges.len() - 1) + 1
}

/// How many contiguous shares [`par_for`] splits a job of several chunks into (share `i`
/// of `n` chunks: `i·n/shares..(i+1)·n/shares`), so callers can order their chunks for it.
pub fn shares() -> usize {
    let threads = rayon::current_num_threads();
    if threads <= 1 {
        return 1;
    }
    let t = team();
    if t.helpers == 0 {
        return 1;
    }
    parts_of(t, threads)
}

/// Calls `f(i)` for every `i` in `0..n`, on the calling thread and the team's helpers
/// (as many as `rayon::current_num_threads()` allows: 1 runs everything here). `f` must
/// make the result of chunk `i` independent of which thread runs it.
pub fn par_for(n: usize, f: impl Fn(usize) + Sync) {
    let threads = rayon::current_num_threads();
    if n <= 1 || threads <= 1 {
        (0..n).for_each(f);
        return;
    }
    let t = team();
    let guard = match t.busy.try_lock() {
        Ok(g) if t.helpers > 0 => g,
        // Another thread is using the team (or there is none): run it all here.
        _ => {
            (0..n).for_each(f);
            return;
        }
    };
    let s = t.shared;
    let fref: &(dyn Fn(usize) + Sync) = &f;
    // SAFETY: the lifetime is erased only for the helpers' reads, which all end before
    // this function returns (it waits until no helper is inside the job).
    let fptr: JobFn = unsafe { std::mem::transmute(fref) };
    let prev = s.state.load(Ordering::Acquire);
    debug_assert!(prev & INSIDE == 0);
    // SAFETY: we hold `busy` and the previous job is closed with no helper inside, so
    // no other thread reads `f` now.
    unsafe { *s.f.get() = fptr };
    let parts = parts_of(t, threads);
    let helpers = parts - 1;
    for (i, r) in s.ranges[..parts].iter().enumerate() {
        r.0.store(pack(i * n / parts, (i + 1) * n / parts), Ordering::Release);
    }
    s.parts.store(parts, Ordering::Release);
    s.max_helpers.store(helpers as u64, Ordering::Release);
    let gen = ((prev >> 32) + 1) & 0xffff_ffff;
    s.state.store(gen << 32, Ordering::SeqCst);
    if s.sleepers.load(Ordering::SeqCst) > 0 {
        let _g = s.park.lock().unwrap_or_else(|e| e.into_inner());
        s.wake.notify_all();
    }
    // Closes the job and waits for the helpers inside it, also if `f` panics here.
    struct Close(&'static Shared);
    impl Drop for Close {
        fn drop(&mut self) {
            let mut spins = 0u32;
            while self.0.state.fetch_or(CLOSED, Ordering::AcqRel) & INSIDE != 0 {
                spins += 1;
                if spins > 4096 {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
        }
    }
    let close = Close(s);
    work(s, 0, &f);
    drop(close);
    let panicked = s.panicked.swap(false, Ordering::AcqRel);
    drop(guard);
    assert!(!panicked, "a CPU kernel panicked on a helper thread");
}

/// A raw pointer to a slice that chunks of a [`par_for`] write disjoint parts of.
#[derive(Clone, Copy)]
pub struct SharedMut<T> {
    ptr: *mut T,
    len: usize,
}

// SAFETY: callers only create disjoint subslices from different threads (see `slice`).
unsafe impl<T: Send> Send for SharedMut<T> {}
unsafe impl<T: Send> Sync for SharedMut<T> {}

impl<T> SharedMut<T> {
    pub fn new(s: &mut [T]) -> Self {
        Self {
            ptr: s.as_mut_ptr(),
            len: s.len(),
        }
    }

    /// `&mut s[from..to]`.
    ///
    /// # Safety
    /// No two live slices from concurrent chunks may overlap, and the original slice
    /// must outlive them (it is borrowed for the whole `par_for`).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice(&self, from: usize, to: usize) -> &mut [T] {
        assert!(
            from <= to && to <= self.len,
            "SharedMut: {from}..{to} of {}",
            self.len
        );
        std::slice::from_raw_parts_mut(self.ptr.add(from), to - from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_chunk_runs_once() {
        for n in [0, 1, 2, 7, 100, 1000] {
            let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            for _ in 0..50 {
                par_for(n, |i| {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                });
            }
            assert!(
                hits.iter().all(|h| h.load(Ordering::Relaxed) == 50),
                "n {n}"
            );
        }
    }

    #[test]
    fn concurrent_callers_each_get_all_chunks() {
        let total = AtomicUsize::new(0);
        std::thread::scope(|sc| {
            for _ in 0..3 {
                sc.spawn(|| {
                    for _ in 0..200 {
                        par_for(16, |_| {
                            total.fetch_add(1, Ordering::Relaxed);
                        });
                    }
                });
            }
        });
        assert_eq!(total.load(Ordering::Relaxed), 3 * 200 * 16);
    }
}
