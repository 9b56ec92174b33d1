//! CUDA graphs of whole forward steps, keyed by (batch bucket, query length, chunk bucket):
//! uniform steps (every sequence has one query length) and chunk steps (such rows followed
//! by one prompt chunk, [`key_for`]). A key is
//! captured the second time it is seen (the first eager run warms cuBLAS and the
//! caches), then replayed; a key whose capture fails runs eagerly for good. A key may be
//! captured as several candidates (variants of one step) that are replayed and timed
//! before one is kept (`backend/small_step.rs`).

use crate::options::{chunk_token_bucket, CudaOptions, GraphMode};
use anyhow::{anyhow, Result};
use cudarc::driver::{sys, CudaGraph, CudaStream};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use wring_backend::StepInput;

/// The shape a step is padded to and captured as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GraphKey {
    /// Sequences of `query_len` tokens, after padding (0 for a chunk step without any).
    pub bucket: usize,
    pub query_len: usize,
    /// A chunk step's prompt chunk with its pad sequence, in tokens; 0 for a uniform step.
    pub chunk: usize,
}

impl GraphKey {
    pub fn uniform(bucket: usize, query_len: usize) -> Self {
        Self {
            bucket,
            query_len,
            chunk: 0,
        }
    }

    /// Tokens of the padded step.
    pub fn tokens(&self) -> usize {
        self.bucket * self.query_len + self.chunk
    }

    /// Logit rows the graph computes: every token of a uniform step; every row token of a
    /// chunk step, and the chunk's last.
    pub fn logit_rows(&self) -> usize {
        if self.chunk == 0 {
            self.tokens()
        } else {
            self.bucket * self.query_len + 1
        }
    }
}

/// Chunk graphs held at most (each ~300 nodes; the keys that can occur number ~1,800, the
/// ones a server meets far fewer); later chunk keys run eagerly.
pub const MAX_CHUNK_GRAPHS: usize = 384;

/// Most query tokens of a row in a chunk step (rows of more are chunks themselves).
const CHUNK_STEP_MAX_ROW_Q: usize = 16;

/// The graph key of a step, if it has one:
/// - uniform: every sequence has the same captured query length (decode or verify rows);
/// - chunk: such rows (or none), then one prompt chunk whose logit rows are at most its
///   last token, in a chunk bucket of at most `chunk_graph_max` tokens. The chunk's
///   bucket holds it and a pad sequence of at least 17 tokens (`chunk_token_bucket`), so
///   the pad runs on the prefill attention kernel, never beside the rows.
pub fn key_for(step: &StepInput, opts: &CudaOptions) -> Option<GraphKey> {
    if opts.graphs == GraphMode::Off || step.seqs.is_empty() {
        return None;
    }
    let q = step.seqs[0].query_len;
    if opts.query_lens.contains(&q) && step.seqs.iter().all(|s| s.query_len == q) {
        return Some(GraphKey::uniform(opts.bucket_for(step.seqs.len())?, q));
    }
    let (chunk, rows) = step.seqs.split_last()?;
    let (bucket, query_len) = match rows.first() {
        None => (0, 0),
        Some(first) => {
            let q = first.query_len;
            if q > CHUNK_STEP_MAX_ROW_Q
                || !opts.query_lens.contains(&q)
                || rows.iter().any(|s| s.query_len != q)
            {
                return None;
            }
            (opts.bucket_for(rows.len())?, q)
        }
    };
    let chunk_bucket = chunk_token_bucket(chunk.query_len);
    let row_tokens = rows.len() * query_len;
    let chunk_last = chunk.query_start + chunk.query_len - 1;
    let logit_rows_fit = step
        .logit_rows
        .iter()
        .all(|&r| r < row_tokens || r == chunk_last);
    let key = GraphKey {
        bucket,
        query_len,
        chunk: chunk_bucket,
    };
    (chunk_bucket <= opts.chunk_graph_max
        && logit_rows_fit
        && step.logit_rows.len() <= key.logit_rows()
        && key.tokens() <= opts.max_tokens)
        .then_some(key)
}

/// Where a replayed graph leaves the step's logits.
#[derive(Debug, Clone, Copy)]
pub struct GraphOutput {
    pub ptr: u64,
    pub cols: usize,
}

struct Entry {
    graph: CudaGraph,
    out: GraphOutput,
    /// Nodes (kernel launches, memsets, copies) in the graph.
    nodes: usize,
}

#[derive(Default)]
pub struct Graphs {
    entries: HashMap<GraphKey, Entry>,
    seen: HashMap<GraphKey, u32>,
    failed: HashSet<GraphKey>,
    /// Captured variants of a key waiting to be timed, by index.
    candidates: HashMap<GraphKey, Vec<Option<Entry>>>,
    capturing: Option<GraphKey>,
    replays: u64,
}

// SAFETY: graphs are used by the owning backend from one thread at a time.
unsafe impl Send for Graphs {}

impl Graphs {
    pub fn capturing(&self) -> bool {
        self.capturing.is_some()
    }

    /// (captured, replays, failed).
    pub fn stats(&self) -> (usize, u64, usize) {
        (self.entries.len(), self.replays, self.failed.len())
    }

    /// Counts a sighting of an uncaptured key; true from the second one on (for a chunk key,
    /// while fewer than [`MAX_CHUNK_GRAPHS`] are held).
    pub fn should_capture(&mut self, key: GraphKey) -> bool {
        if self.entries.contains_key(&key) || self.failed.contains(&key) {
            return false;
        }
        if key.chunk > 0 && self.entries.keys().filter(|k| k.chunk > 0).count() >= MAX_CHUNK_GRAPHS
        {
            return false;
        }
        let n = self.seen.entry(key).or_insert(0);
        *n += 1;
        *n >= 2
    }

    pub fn begin(&mut self, stream: &Arc<CudaStream>, key: GraphKey) -> Result<()> {
        stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(|e| {
                self.failed.insert(key);
                anyhow!("cuStreamBeginCapture: {e:?}")
            })?;
        self.capturing = Some(key);
        Ok(())
    }

    /// Ends the capture; on success instantiates and launches the graph once so the
    /// step's output exists. `op_error` is an error an op hit while capturing.
    pub fn end(
        &mut self,
        stream: &Arc<CudaStream>,
        op_error: Option<anyhow::Error>,
        ptr: u64,
        cols: usize,
        before_first_launch: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let key = self
            .capturing
            .take()
            .ok_or_else(|| anyhow!("end_capture without begin_capture"))?;
        // Always end the capture so the stream leaves capture mode, even after an error.
        let ended = stream.end_capture(sys::CUgraphInstantiate_flags(0));
        let result = match (op_error, ended) {
            (Some(e), _) => Err(e.context("an op failed while capturing")),
            (None, Err(e)) => Err(anyhow!("cuStreamEndCapture/instantiate: {e:?}")),
            (None, Ok(None)) => Err(anyhow!("the capture recorded no graph")),
            (None, Ok(Some(graph))) => match before_first_launch()
                .map_err(|e| e.context("before the first launch of the captured graph"))
                .and_then(|()| graph.launch().map_err(|e| anyhow!("{e:?}")))
            {
                Ok(()) => {
                    let out = GraphOutput { ptr, cols };
                    let mut nodes = 0usize;
                    // SAFETY: a null node array asks only for the count.
                    let counted = unsafe {
                        sys::cuGraphGetNodes(graph.cu_graph(), std::ptr::null_mut(), &mut nodes)
                    };
                    if counted != sys::CUresult::CUDA_SUCCESS {
                        nodes = 0;
                    }
                    self.entries.insert(key, Entry { graph, out, nodes });
                    Ok(())
                }
                Err(e) => Err(e.context("first launch of the captured graph")),
            },
        };
        if result.is_err() {
            self.failed.insert(key);
        }
        result.map_err(|e| e.context(format!("graph {key:?}")))
    }

    /// Drops every captured graph (and the failure and sighting records): the next steps
    /// are captured afresh.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.candidates.clear();
        self.seen.clear();
        self.failed.clear();
    }

    /// Moves the graph just captured for `key` aside as candidate `index`, so the key can be
    /// captured again.
    pub fn set_candidate(&mut self, key: GraphKey, index: usize) {
        if let Some(e) = self.entries.remove(&key) {
            let c = self.candidates.entry(key).or_default();
            if c.len() <= index {
                c.resize_with(index + 1, || None);
            }
            c[index] = Some(e);
        }
    }

    /// Replays candidate `index` of `key`.
    pub fn launch_candidate(&mut self, key: GraphKey, index: usize) -> Result<()> {
        let e = self
            .candidates
            .get(&key)
            .and_then(|c| c.get(index))
            .and_then(Option::as_ref)
            .ok_or_else(|| anyhow!("no candidate graph {index} for {key:?}"))?;
        e.graph
            .launch()
            .map_err(|err| anyhow!("replaying candidate graph {index} of {key:?}: {err:?}"))
    }

    /// Keeps candidate `index` as the graph of `key` and drops the others.
    pub fn keep_candidate(&mut self, key: GraphKey, index: usize) {
        if let Some(mut c) = self.candidates.remove(&key) {
            if let Some(e) = c.get_mut(index).and_then(Option::take) {
                self.entries.insert(key, e);
            }
        }
    }

    /// Drops every candidate of `key`.
    pub fn drop_candidates(&mut self, key: GraphKey) {
        self.candidates.remove(&key);
        self.entries.remove(&key);
    }

    /// Nodes of the graph captured for `key` (each a kernel launch or a memory op).
    pub fn nodes(&self, key: GraphKey) -> Option<usize> {
        self.entries.get(&key).map(|e| e.nodes)
    }

    /// Replays the graph of `key` if one was captured.
    pub fn launch(&mut self, key: GraphKey) -> Result<Option<GraphOutput>> {
        let Some(entry) = self.entries.get(&key) else {
            return Ok(None);
        };
        entry
            .graph
            .launch()
            .map_err(|e| anyhow!("replaying CUDA graph {key:?} failed: {e:?}"))?;
        self.replays += 1;
        Ok(Some(entry.out))
    }
}
