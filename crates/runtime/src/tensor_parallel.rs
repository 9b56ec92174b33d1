//! [`TensorParallelRunner`]: one model split over N ranks (`wring_model::shard`), driven
//! as one [`ModelRunner`], so the engine keeps one scheduler and one drafter for all.
//!
//! Each rank is a thread owning its [`ShardRunner`] (on a GPU: its own device, stream and
//! NCCL communicator). Every step goes to every rank; the ranks meet in the backend's
//! collectives (an all-reduce after the o and down projections and after the embedding)
//! and each returns its part of the vocabulary: for greedy steps only the (max logit,
//! token id) of each row, combined here (the first maximum wins, as on one rank); for
//! sampling steps its logit slice, concatenated here. The host-side combine is what a
//! device gather to rank 0 would also end in: the ids or logits must reach the host, and
//! each rank copying its own part over its own link moves no more than that.
//!
//! Nothing waits forever: a rank that fails or panics aborts the group's collectives (so
//! the ranks waiting in one return), a step that does not finish within the timeout
//! (`WRING_TP_TIMEOUT_S`, default 300 s) aborts it too, and from then on every step is
//! an error naming the first failure.

use anyhow::{anyhow, bail, ensure, Context, Result};
use std::ops::Range;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use wring_model::{Logits, ModelRunner, ShardRunner, StepInput};

/// Aborts a group's collectives (every rank waiting in one gets an error).
pub type GroupAbort = Arc<dyn Fn(&str) + Send + Sync>;

/// Builds one rank on its own thread (where a GPU rank binds its device).
pub type RankBuilder = Box<dyn FnOnce() -> Result<Box<dyn ShardRunner>> + Send>;

/// How long a step (or a collective) may take before the group is aborted.
pub fn step_timeout() -> Result<Duration> {
    match std::env::var("WRING_TP_TIMEOUT_S") {
        Err(_) => Ok(Duration::from_secs(300)),
        Ok(v) => {
            let s: f64 = v
                .parse()
                .ok()
                .filter(|s: &f64| *s > 0.0 && s.is_finite())
                .ok_or_else(|| {
                    anyhow!("WRING_TP_TIMEOUT_S={v:?} is not a positive number of seconds")
                })?;
            Ok(Duration::from_secs_f64(s))
        }
    }
}

#[derive(Clone, Copy)]
enum Want {
    /// Per row (max logit, token id).
    Max,
    /// The rank's vocabulary slice of every row.
    Logits,
}

enum Output {
    Max(Vec<(f32, u32)>),
    Logits(Vec<f32>),
}

struct Job {
    seq: u64,
    step: Arc<StepInput>,
    want: Want,
}

type Reply = (usize, u64, Result<Output>);

struct Rank {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

pub struct TensorParallelRunner {
    ranks: Vec<Rank>,
    replies: mpsc::Receiver<Reply>,
    abort: GroupAbort,
    /// Each rank's token ids, in rank order (they tile the vocabulary).
    vocab: Vec<Range<usize>>,
    block_size: usize,
    num_blocks: usize,
    device_name: String,
    captured_query_lens: Option<Vec<usize>>,
    seq: u64,
    timeout: Duration,
    /// Why the group stopped working (every later step fails with it).
    broken: Option<String>,
}

/// The panic message of a caught panic.
fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

/// A rank's thread: builds its runner, reports, then runs steps until the runner drops.
fn rank_main(
    rank: usize,
    build: RankBuilder,
    ready: mpsc::Sender<(usize, Result<RankInfo>)>,
    jobs: mpsc::Receiver<Job>,
    replies: mpsc::Sender<Reply>,
) {
    let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(build)).unwrap_or_else(|p| {
        Err(anyhow!(
            "rank {rank} panicked while loading: {}",
            panic_message(&*p)
        ))
    });
    let mut runner = match built {
        Ok(r) => {
            let info = RankInfo {
                vocab: r.shard().vocab.clone(),
                block_size: r.block_size(),
                num_blocks: r.num_blocks(),
                device_name: r.device_name(),
                captured_query_lens: r.captured_query_lens(),
            };
            let _ = ready.send((rank, Ok(info)));
            r
        }
        Err(e) => {
            let _ = ready.send((rank, Err(e)));
            return;
        }
    };
    drop(ready);
    while let Ok(job) = jobs.recv() {
        let run = std::panic::AssertUnwindSafe(|| match job.want {
            Want::Max => runner.forward_local_max(&job.step).map(Output::Max),
            Want::Logits => runner.forward_local_logits(&job.step).map(Output::Logits),
        });
        let out = std::panic::catch_unwind(run)
            .unwrap_or_else(|p| Err(anyhow!("rank {rank} panicked: {}", panic_message(&*p))));
        if replies.send((rank, job.seq, out)).is_err() {
            break;
        }
    }
}

struct RankInfo {
    vocab: Range<usize>,
    block_size: usize,
    num_blocks: usize,
    device_name: String,
    captured_query_lens: Option<Vec<usize>>,
}

impl TensorParallelRunner {
    /// Starts one thread per builder (rank = index) and waits until every rank has loaded
    /// its shard; the first rank's error otherwise (after the others are stopped).
    pub fn start(builders: Vec<RankBuilder>, abort: GroupAbort, timeout: Duration) -> Result<Self> {
        let n = builders.len();
        ensure!(n >= 1, "a tensor-parallel runner needs at least one rank");
        let (ready_tx, ready_rx) = mpsc::channel();
        let (reply_tx, replies) = mpsc::channel();
        let mut ranks = Vec::with_capacity(n);
        for (rank, build) in builders.into_iter().enumerate() {
            let (jobs_tx, jobs_rx) = mpsc::channel();
            let (ready, reply) = (ready_tx.clone(), reply_tx.clone());
            let thread = std::thread::Builder::new()
                .name(format!("wring-rank-{rank}"))
                .spawn(move || rank_main(rank, build, ready, jobs_rx, reply))
                .context("cannot start a rank thread")?;
            ranks.push(Rank {
                jobs: Some(jobs_tx),
                thread: Some(thread),
            });
        }
        drop((ready_tx, reply_tx));
        let mut runner = Self {
            ranks,
            replies,
            abort,
            vocab: vec![0..0; n],
            block_size: 0,
            num_blocks: 0,
            device_name: String::new(),
            captured_query_lens: None,
            seq: 0,
            timeout,
            broken: None,
        };
        // Loading has no collective, so every rank ends it (well or not) on its own.
        let mut infos: Vec<Option<RankInfo>> = (0..n).map(|_| None).collect();
        let mut first_error = None;
        for _ in 0..n {
            match ready_rx.recv() {
                Ok((rank, Ok(info))) => infos[rank] = Some(info),
                Ok((rank, Err(e))) => {
                    first_error.get_or_insert(e.context(format!("tensor-parallel rank {rank}")));
                }
                Err(_) => {
                    first_error.get_or_insert(anyhow!("a rank thread ended while loading"));
                }
            }
        }
        if let Some(e) = first_error {
            (runner.abort)("a rank failed to load");
            return Err(e);
        }
        let infos: Vec<RankInfo> = infos
            .into_iter()
            .map(|i| i.expect("every rank reported"))
            .collect();
        let first = &infos[0];
        // Ranks that sized their pools from their own GPU's memory may hold different
        // counts: the engine uses the blocks every rank has.
        let num_blocks = infos.iter().map(|i| i.num_blocks).min().unwrap_or(0);
        for (r, i) in infos.iter().enumerate() {
            ensure!(
                i.block_size == first.block_size,
                "rank {r} has KV blocks of {} tokens, rank 0 of {}",
                i.block_size,
                first.block_size
            );
            let expect_start = if r == 0 { 0 } else { infos[r - 1].vocab.end };
            ensure!(
                i.vocab.start == expect_start && !i.vocab.is_empty(),
                "rank {r}'s vocabulary {:?} does not follow rank {}'s",
                i.vocab,
                r.saturating_sub(1)
            );
        }
        runner.block_size = first.block_size;
        runner.captured_query_lens = first.captured_query_lens.clone();
        runner.num_blocks = num_blocks;
        runner.device_name = match n {
            1 => first.device_name.clone(),
            // e.g. "cuda:0 (NVIDIA H200, sm_90) ×2 (tensor parallel)": rank 0's device.
            _ => format!("{} ×{n} (tensor parallel)", first.device_name),
        };
        runner.vocab = infos.into_iter().map(|i| i.vocab).collect();
        Ok(runner)
    }

    pub fn ranks(&self) -> usize {
        self.ranks.len()
    }

    /// Stops the group for good: aborts its collectives and remembers why.
    fn break_group(&mut self, why: String) {
        (self.abort)(&why);
        self.broken.get_or_insert(why);
    }

    /// Runs `step` on every rank; their outputs in rank order.
    fn run(&mut self, step: &StepInput, want: Want) -> Result<Vec<Output>> {
        if let Some(why) = &self.broken {
            bail!("the tensor-parallel group is stopped: {why}");
        }
        // One rank alone would fail on an id outside the vocabulary; sharded, every rank
        // would see "not mine" and embed zeros.
        let vocab = self.vocab.last().map_or(0, |v| v.end);
        if let Some(&bad) = step.tokens.iter().find(|&&t| t as usize >= vocab) {
            bail!("token id {bad} is outside the vocabulary of {vocab}");
        }
        self.seq += 1;
        let seq = self.seq;
        let step = Arc::new(step.clone());
        let n = self.ranks.len();
        for (r, rank) in self.ranks.iter().enumerate() {
            let job = Job {
                seq,
                step: step.clone(),
                want,
            };
            if rank.jobs.as_ref().is_none_or(|j| j.send(job).is_err()) {
                let why = format!("rank {r}'s thread has ended");
                self.break_group(why.clone());
                bail!(why);
            }
        }
        let mut outs: Vec<Option<Output>> = (0..n).map(|_| None).collect();
        let mut first_error: Option<anyhow::Error> = None;
        let mut deadline = Instant::now() + self.timeout;
        let mut done = 0;
        while done < n {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.replies.recv_timeout(left) {
                Ok((_, s, _)) if s != seq => continue,
                Ok((r, _, Ok(out))) => {
                    outs[r] = Some(out);
                    done += 1;
                }
                Ok((r, _, Err(e))) => {
                    done += 1;
                    if first_error.is_none() {
                        // The others may be waiting for this rank in a collective.
                        let why = format!("rank {r} failed: {e:#}");
                        self.break_group(why);
                        first_error = Some(e.context(format!("tensor-parallel rank {r}")));
                        // Give the released ranks a bounded time to come back.
                        deadline = Instant::now() + self.timeout.min(Duration::from_secs(30));
                    }
                }
                Err(_) => {
                    let missing: Vec<usize> = (0..n).filter(|&r| outs[r].is_none()).collect();
                    let why = format!(
                        "ranks {missing:?} did not finish a step within {:.0} s (WRING_TP_TIMEOUT_S)",
                        self.timeout.as_secs_f64()
                    );
                    self.break_group(why.clone());
                    return Err(first_error.unwrap_or_else(|| anyhow!(why)));
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        Ok(outs
            .into_iter()
            .map(|o| o.expect("every rank answered"))
            .collect())
    }
}

impl ModelRunner for TensorParallelRunner {
    fn forward(&mut self, step: &StepInput) -> Result<Logits> {
        let rows = step.logit_rows.len();
        let parts = self.run(step, Want::Logits)?;
        let vocab = self.vocab.last().map_or(0, |v| v.end);
        let mut data = vec![0f32; rows * vocab];
        for (r, part) in parts.iter().enumerate() {
            let Output::Logits(part) = part else {
                bail!("rank {r} answered a logits step with ids")
            };
            let v = &self.vocab[r];
            ensure!(
                part.len() == rows * v.len(),
                "rank {r} returned {} logits for {rows} rows of {} ids",
                part.len(),
                v.len()
            );
            for (row, slice) in part.chunks_exact(v.len().max(1)).enumerate() {
                data[row * vocab + v.start..row * vocab + v.end].copy_from_slice(slice);
            }
        }
        Ok(Logits { rows, vocab, data })
    }

    fn forward_greedy(&mut self, step: &StepInput) -> Result<Option<Vec<u32>>> {
        let rows = step.logit_rows.len();
        let parts = self.run(step, Want::Max)?;
        let mut best: Vec<(f32, u32)> = Vec::new();
        for (r, part) in parts.iter().enumerate() {
            let Output::Max(part) = part else {
                bail!("rank {r} answered a greedy step with logits")
            };
            ensure!(
                part.len() == rows,
                "rank {r} returned {} maxima for {rows} rows",
                part.len()
            );
            if r == 0 {
                best = part.clone();
                continue;
            }
            // Ranks hold ascending ids: a later rank wins only with a larger value, so
            // ties go to the smaller id, and NaN (never larger) never wins.
            for (b, &p) in best.iter_mut().zip(part) {
                if p.0 > b.0 {
                    *b = p;
                }
            }
        }
        Ok(Some(best.into_iter().map(|(_, id)| id).collect()))
    }

    fn block_size(&self) -> usize {
        self.block_size
    }
    fn num_blocks(&self) -> usize {
        self.num_blocks
    }
    fn vocab_size(&self) -> usize {
        self.vocab.last().map_or(0, |v| v.end)
    }
    fn device_name(&self) -> String {
        self.device_name.clone()
    }
    fn captured_query_lens(&self) -> Option<Vec<usize>> {
        self.captured_query_lens.clone()
    }
}

impl Drop for TensorParallelRunner {
    fn drop(&mut self) {
        for rank in &mut self.ranks {
            rank.jobs = None;
        }
        // A stuck rank (the group broke) may never return: leave its thread behind.
        if self.broken.is_none() {
            for rank in &mut self.ranks {
                if let Some(t) = rank.thread.take() {
                    let _ = t.join();
                }
            }
        }
    }
}
