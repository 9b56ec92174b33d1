//! Collectives between CPU ranks in one process (tensor parallelism on the CPU backend:
//! the reference the GPU ranks are checked against, and what CI runs).
//!
//! All-reduce: every rank copies its values into its slot, waits for the others, then
//! sums the slots in rank order 0, 1, …, N−1, so every rank gets the same bits and a
//! rerun gets them again. A second barrier keeps a fast rank from overwriting its slot
//! (the next collective) while a slow one still reads it.
//!
//! Nothing waits forever: a rank that fails, panics or leaves aborts the group, every
//! waiting rank then returns an error at once, and a wait longer than the group's
//! timeout aborts it too.

use anyhow::{anyhow, Result};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

struct State {
    /// Ranks that reached the current barrier.
    arrived: usize,
    /// Barriers completed (a waiter is released when it changes).
    generation: u64,
    slots: Vec<Vec<f32>>,
    /// Why the group was aborted.
    aborted: Option<String>,
}

struct Group {
    ranks: usize,
    timeout: Duration,
    state: Mutex<State>,
    changed: Condvar,
}

impl Group {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A rank that panicked while holding the lock aborted the group (Drop): the
        // state is still consistent enough to read that.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn abort(&self, why: &str) {
        let mut s = self.lock();
        if s.aborted.is_none() {
            s.aborted = Some(why.to_string());
        }
        self.changed.notify_all();
    }
}

/// One rank's handle on its group.
pub struct HostComm {
    group: Arc<Group>,
    rank: usize,
}

/// Aborts a group from outside its ranks (a coordinator that saw one rank fail).
#[derive(Clone)]
pub struct HostAbort(Arc<Group>);

impl HostAbort {
    pub fn abort(&self, why: &str) {
        self.0.abort(why);
    }
}

impl HostComm {
    /// A group of `ranks` ranks whose waits give up after `timeout`: one handle per
    /// rank (index = rank) and the group's abort handle.
    pub fn group(ranks: usize, timeout: Duration) -> (Vec<HostComm>, HostAbort) {
        let group = Arc::new(Group {
            ranks,
            timeout,
            state: Mutex::new(State {
                arrived: 0,
                generation: 0,
                slots: vec![Vec::new(); ranks],
                aborted: None,
            }),
            changed: Condvar::new(),
        });
        let comms = (0..ranks)
            .map(|rank| HostComm {
                group: group.clone(),
                rank,
            })
            .collect();
        (comms, HostAbort(group))
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn ranks(&self) -> usize {
        self.group.ranks
    }

    fn aborted(&self, s: &State) -> Result<()> {
        match &s.aborted {
            Some(why) => Err(anyhow!("tensor-parallel group aborted: {why}")),
            None => Ok(()),
        }
    }

    /// Waits until every rank has arrived (or the group is aborted or times out).
    fn barrier(&self) -> Result<()> {
        let g = &*self.group;
        let mut s = g.lock();
        self.aborted(&s)?;
        s.arrived += 1;
        if s.arrived == g.ranks {
            s.arrived = 0;
            s.generation += 1;
            g.changed.notify_all();
            return Ok(());
        }
        let gen = s.generation;
        let deadline = Instant::now() + g.timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let why = format!(
                    "rank {} waited {:.0} s for the other ranks at a collective",
                    self.rank,
                    g.timeout.as_secs_f64()
                );
                if s.aborted.is_none() {
                    s.aborted = Some(why);
                }
                g.changed.notify_all();
                return self.aborted(&s);
            }
            s = g
                .changed
                .wait_timeout(s, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
            // A barrier that completed counts even if a rank left right after it.
            if s.generation != gen {
                return Ok(());
            }
            self.aborted(&s)?;
        }
    }

    /// Sums `data` over the ranks (rank order), the same result on every rank.
    pub fn all_reduce_sum(&self, data: &mut [f32]) -> Result<()> {
        if self.group.ranks == 1 {
            return Ok(());
        }
        {
            let mut s = self.group.lock();
            self.aborted(&s)?;
            let slot = &mut s.slots[self.rank];
            slot.clear();
            slot.extend_from_slice(data);
        }
        self.barrier()?;
        {
            let s = self.group.lock();
            self.aborted(&s)?;
            if let Some(r) = s.slots.iter().position(|v| v.len() != data.len()) {
                let why = format!(
                    "rank {r} contributed {} values to an all-reduce of {}",
                    s.slots[r].len(),
                    data.len()
                );
                drop(s);
                self.group.abort(&why);
                return Err(anyhow!("tensor-parallel group aborted: {why}"));
            }
            data.copy_from_slice(&s.slots[0]);
            for slot in &s.slots[1..] {
                for (d, v) in data.iter_mut().zip(slot) {
                    *d += v;
                }
            }
        }
        self.barrier()
    }

    /// Aborts the group: every rank waiting now or later gets an error.
    pub fn abort(&self, why: &str) {
        self.group.abort(why);
    }
}

impl Drop for HostComm {
    /// A rank that leaves (its runner dropped, its thread unwinding) can no longer take
    /// part in a collective: the others must not wait for it.
    fn drop(&mut self) {
        if self.group.ranks > 1 {
            let why = if std::thread::panicking() {
                format!("rank {} panicked", self.rank)
            } else {
                format!("rank {} left the group", self.rank)
            };
            self.group.abort(&why);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<T: Send>(n: usize, f: impl Fn(HostComm) -> T + Sync) -> Vec<T> {
        let (comms, _) = HostComm::group(n, Duration::from_secs(30));
        std::thread::scope(|sc| {
            let hs: Vec<_> = comms.into_iter().map(|c| sc.spawn(|| f(c))).collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[test]
    fn all_reduce_sums_in_rank_order_on_every_rank() {
        let out = run(3, |c| {
            let mut v: Vec<f32> = (0..5).map(|i| (c.rank() * 10 + i) as f32 * 0.1).collect();
            for _ in 0..20 {
                c.all_reduce_sum(&mut v).unwrap();
            }
            v
        });
        // Every rank the same bits: each step's rank-ordered sum.
        let mut vals: Vec<Vec<f32>> = (0..3)
            .map(|r| (0..5).map(|i| (r * 10 + i) as f32 * 0.1).collect())
            .collect();
        for _ in 0..20 {
            let mut sum = vals[0].clone();
            for v in &vals[1..] {
                sum.iter_mut().zip(v).for_each(|(s, x)| *s += x);
            }
            vals = vec![sum; 3];
        }
        assert!(out.iter().all(|v| v == &vals[0]));
    }

    #[test]
    fn a_rank_that_leaves_releases_the_others() {
        let (mut comms, _) = HostComm::group(2, Duration::from_secs(60));
        let leaver = comms.pop().unwrap();
        let waiter = comms.pop().unwrap();
        let t0 = Instant::now();
        let h = std::thread::spawn(move || waiter.all_reduce_sum(&mut [1.0, 2.0]));
        std::thread::sleep(Duration::from_millis(50));
        drop(leaver);
        let e = h.join().unwrap().unwrap_err().to_string();
        assert!(e.contains("rank 1 left the group"), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn a_missing_rank_times_out_instead_of_hanging() {
        let (comms, _) = HostComm::group(2, Duration::from_millis(200));
        let e = comms[0].all_reduce_sum(&mut [1.0]).unwrap_err().to_string();
        assert!(e.contains("waited"), "{e}");
        // The group stays aborted: the other rank fails at once too.
        assert!(comms[1].all_reduce_sum(&mut [1.0]).is_err());
    }

    #[test]
    fn mismatched_sizes_abort_the_group() {
        let out = run(2, |c| {
            let mut v = vec![1.0; 3 + c.rank()];
            c.all_reduce_sum(&mut v).map_err(|e| e.to_string())
        });
        assert!(out.iter().all(|r| r.is_err()), "{out:?}");
    }
}
