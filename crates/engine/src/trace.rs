//! `--trace-out`: one JSONL line per completed request with its exact prompt and output
//! token ids, in the trace format `wring drafter-eval` replays (`../shared/traces/README.md`),
//! so drafters can be scored offline on wring's own generations.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

pub(crate) struct TraceWriter {
    out: BufWriter<File>,
    next_idx: usize,
    path: String,
}

/// One completed request, as written.
#[derive(serde::Serialize)]
struct TraceLine<'a> {
    idx: usize,
    /// The request's workload tag (its corpus when `wring bench` sends it), else "".
    corpus: &'a str,
    source_id: &'a str,
    prompt_ids: &'a [u32],
    output_ids: &'a [u32],
    finish_reason: &'a str,
}

impl TraceWriter {
    /// Creates (truncates) `path`; fails at start-up rather than losing lines later.
    pub fn create(path: &Path) -> anyhow::Result<Self> {
        let f = File::create(path)
            .map_err(|e| anyhow::anyhow!("cannot create trace file {}: {e}", path.display()))?;
        Ok(Self {
            out: BufWriter::new(f),
            next_idx: 0,
            path: path.display().to_string(),
        })
    }

    /// Appends one request and flushes, so the file is complete up to the last finished request.
    pub fn record(
        &mut self,
        workload: Option<&str>,
        request_id: &str,
        prompt_ids: &[u32],
        output_ids: &[u32],
        finish_reason: &str,
    ) {
        let line = TraceLine {
            idx: self.next_idx,
            corpus: workload.unwrap_or(""),
            source_id: request_id,
            prompt_ids,
            output_ids,
            finish_reason,
        };
        self.next_idx += 1;
        let res = serde_json::to_writer(&mut self.out, &line)
            .map_err(std::io::Error::from)
            .and_then(|_| self.out.write_all(b"\n"))
            .and_then(|_| self.out.flush());
        if let Err(e) = res {
            // Serving goes on; the trace is a by-product.
            tracing::warn!("writing trace {} failed: {e}", self.path);
        }
    }
}
