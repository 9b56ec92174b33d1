//! `--step-log`: one JSONL line per engine step — its sequences, tokens, prompt tokens, logit
//! rows and where its time went — so a serving run's steps can be studied one by one (which
//! steps carry prompts, how many tokens, what they cost) instead of through averages.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Instant;

pub(crate) struct StepLog {
    out: BufWriter<File>,
    path: String,
    started: Instant,
    next_step: u64,
}

/// One step, as written.
#[derive(serde::Serialize)]
pub(crate) struct StepLine {
    /// Milliseconds since the engine started, at the step's end.
    pub t_ms: f64,
    pub seqs: usize,
    /// Sequences that were decoding or verifying (the rest carry prompt tokens).
    pub decoding: usize,
    pub tokens: usize,
    pub prompt_tokens: usize,
    pub logit_rows: usize,
    /// The model's forward, the host's work around it, and the two together.
    pub model_ms: f64,
    pub host_ms: f64,
    /// "eager", "capture" or "replay" where the backend captures step graphs (CUDA).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub graph: Option<&'static str>,
}

impl StepLog {
    /// Creates (truncates) `path`; fails at start-up rather than losing lines later.
    pub fn create(path: &Path) -> anyhow::Result<Self> {
        let f = File::create(path)
            .map_err(|e| anyhow::anyhow!("cannot create step log {}: {e}", path.display()))?;
        Ok(Self {
            out: BufWriter::new(f),
            path: path.display().to_string(),
            started: Instant::now(),
            next_step: 0,
        })
    }

    /// Appends one step; flushed every 64 steps and whenever a step carried prompt tokens,
    /// so the file lags the engine by at most a few dozen decode steps.
    pub fn record(&mut self, mut line: StepLine) {
        line.t_ms = self.started.elapsed().as_secs_f64() * 1e3;
        let flush = line.prompt_tokens > 0 || self.next_step.is_multiple_of(64);
        self.next_step += 1;
        let res = serde_json::to_writer(&mut self.out, &line)
            .map_err(std::io::Error::from)
            .and_then(|_| self.out.write_all(b"\n"))
            .and_then(|_| if flush { self.out.flush() } else { Ok(()) });
        if let Err(e) = res {
            // Serving goes on; the log is a by-product.
            tracing::warn!("writing step log {} failed: {e}", self.path);
        }
    }
}

impl Drop for StepLog {
    fn drop(&mut self) {
        let _ = self.out.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(graph: Option<&'static str>) -> serde_json::Value {
        let l = StepLine {
            t_ms: 1.0,
            seqs: 2,
            decoding: 1,
            tokens: 40,
            prompt_tokens: 39,
            logit_rows: 2,
            model_ms: 1.5,
            host_ms: 0.2,
            graph,
        };
        serde_json::to_value(&l).unwrap()
    }

    #[test]
    fn a_line_names_how_the_step_ran_only_where_the_backend_has_graphs() {
        assert_eq!(line(Some("capture"))["graph"], "capture");
        assert!(
            line(None).get("graph").is_none(),
            "the CPU backend's lines stay as they were"
        );
        assert_eq!(line(None)["prompt_tokens"], 39);
    }
}
