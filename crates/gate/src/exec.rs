//! Running a model over whole token streams: greedy continuation of prompts and teacher-forced
//! scoring, with each stream's KV in its own range of the runner's block pool.

use anyhow::{bail, ensure, Context, Result};
use std::sync::Arc;

use crate::metrics::argmax;
use wring_model::{
    load_model, ChatTemplate, CpuWeights, Device, LoadedModel, Logits, ModelRunner, ModelSpec,
    PrefillAttention, RunnerOptions, SeqInput, StepInput, Tokenizer,
};

/// Which model and how it runs.
#[derive(Debug, Clone)]
pub struct ModelChoice {
    pub spec: ModelSpec,
    pub device: Device,
    pub cpu_weights: CpuWeights,
    /// Prompt rows' attention precision on the CPU (f32 or bf16).
    pub prefill_attention: PrefillAttention,
    /// On CUDA, the weight format to quantise to at load (`RunnerOptions::gpu_weights`).
    pub gpu_weights: Option<String>,
}

impl ModelChoice {
    /// What the JSON and the summary call it: the path/id given, or the default model.
    pub fn label(&self) -> String {
        self.spec
            .model
            .clone()
            .unwrap_or_else(|| wring_model::DEFAULT_MODEL_NAME.to_string())
    }
}

/// A loaded model bound to a runner whose KV pool holds `max_streams` streams of
/// `max_stream_tokens` tokens each.
pub struct GateModel {
    pub name: String,
    pub choice: ModelChoice,
    pub tokenizer: Arc<Tokenizer>,
    pub chat_template: Option<Arc<ChatTemplate>>,
    pub eos_token_ids: Vec<u32>,
    pub vocab_size: usize,
    pub load_seconds: f64,
    runner: Box<dyn ModelRunner>,
    blocks_per_stream: usize,
    max_streams: usize,
}

impl GateModel {
    pub fn open(
        choice: &ModelChoice,
        max_stream_tokens: usize,
        max_streams: usize,
    ) -> Result<Self> {
        let t0 = std::time::Instant::now();
        let label = choice.label();
        let model =
            load_model(&choice.spec).with_context(|| format!("cannot load model {label}"))?;
        Self::from_loaded(model, choice, max_stream_tokens, max_streams, t0)
    }

    fn from_loaded(
        model: LoadedModel,
        choice: &ModelChoice,
        max_stream_tokens: usize,
        max_streams: usize,
        t0: std::time::Instant,
    ) -> Result<Self> {
        ensure!(max_streams > 0, "at least one stream per batch is needed");
        ensure!(
            max_stream_tokens <= model.max_context(),
            "streams of up to {max_stream_tokens} tokens exceed {}'s context of {} tokens; lower --max-prompt-tokens or --max-new-tokens",
            model.name,
            model.max_context()
        );
        let block_size = 16;
        let blocks_per_stream = max_stream_tokens.div_ceil(block_size);
        let opts = RunnerOptions {
            device: choice.device,
            kv_cache_bytes: model.kv_block_bytes(choice.device, block_size)
                * blocks_per_stream
                * max_streams,
            block_size,
            max_num_seqs: max_streams,
            max_model_len: max_stream_tokens,
            cpu_weights: choice.cpu_weights,
            cpu_prefill_attention: choice.prefill_attention,
            tensor_parallel_size: 1,
            gpu_memory_utilization: None,
            max_step_tokens: 8192,
            gpu_weights: choice.gpu_weights.clone(),
        };
        let (name, tokenizer, chat_template, eos_token_ids, vocab_size) = (
            model.name.clone(),
            model.tokenizer.clone(),
            model.chat_template.clone(),
            model.eos_token_ids.clone(),
            model.config.vocab_size,
        );
        let runner = wring_runtime::open_runner(model, &opts)
            .with_context(|| format!("cannot start {name} on {}", choice.device))?;
        ensure!(
            runner.num_blocks() >= blocks_per_stream * max_streams,
            "the runner has {} KV blocks, {} are needed",
            runner.num_blocks(),
            blocks_per_stream * max_streams
        );
        Ok(Self {
            name,
            choice: choice.clone(),
            tokenizer,
            chat_template,
            eos_token_ids,
            vocab_size,
            load_seconds: t0.elapsed().as_secs_f64(),
            runner,
            blocks_per_stream,
            max_streams,
        })
    }

    pub fn device_name(&self) -> String {
        self.runner.device_name()
    }

    pub fn max_streams(&self) -> usize {
        self.max_streams
    }

    fn block_table(&self, slot: usize) -> Vec<u32> {
        let b = (slot * self.blocks_per_stream) as u32;
        (b..b + self.blocks_per_stream as u32).collect()
    }

    fn check_batch(&self, n: usize, longest: usize) -> Result<()> {
        if n > self.max_streams {
            bail!(
                "{n} streams in one batch, the KV pool holds {}",
                self.max_streams
            );
        }
        if longest > self.blocks_per_stream * self.runner.block_size() {
            bail!(
                "a stream of {longest} tokens exceeds the {} tokens sized for",
                self.blocks_per_stream * self.runner.block_size()
            );
        }
        Ok(())
    }

    /// Teacher-forced forward of `streams` as fresh sequences in ONE step; for stream `i`,
    /// returns the logits of its positions `rows[i]` (indices into the stream), stream by
    /// stream, in order.
    pub fn score(&mut self, streams: &[&[u32]], rows: &[std::ops::Range<usize>]) -> Result<Logits> {
        ensure!(streams.len() == rows.len(), "one row range per stream");
        let longest = streams.iter().map(|s| s.len()).max().unwrap_or(0);
        self.check_batch(streams.len(), longest)?;
        let mut step = StepInput::default();
        for (slot, (s, r)) in streams.iter().zip(rows).enumerate() {
            ensure!(!s.is_empty(), "empty stream");
            ensure!(
                r.end <= s.len(),
                "row range {r:?} outside a stream of {}",
                s.len()
            );
            let start = step.tokens.len();
            step.seqs.push(SeqInput {
                query_start: start,
                query_len: s.len(),
                context_len: s.len(),
                block_table: self.block_table(slot),
                // Up to the first scored position: the prompt, as a server prefills it.
                prompt_len: r.start + 1,
            });
            step.tokens.extend_from_slice(s);
            step.positions.extend(0..s.len() as u32);
            step.logit_rows.extend(r.clone().map(|i| start + i));
        }
        step.validate(self.runner.num_blocks(), self.runner.block_size())?;
        let logits = self.runner.forward(&step)?;
        ensure!(
            logits.rows == step.logit_rows.len(),
            "the runner returned {} logit rows, {} were asked for",
            logits.rows,
            step.logit_rows.len()
        );
        Ok(logits)
    }

    /// Greedy next tokens of `step`'s logit rows (on the device when the backend can).
    fn greedy_step(&mut self, step: &StepInput) -> Result<Vec<u32>> {
        if let Some(ids) = self.runner.forward_greedy(step)? {
            return Ok(ids);
        }
        let l = self.runner.forward(step)?;
        Ok((0..l.rows).map(|i| argmax(l.row(i))).collect())
    }

    /// Greedy continuations of `prompts` (together in one batch), each up to `max_new` tokens,
    /// stopping after an end-of-sequence token (which is kept).
    pub fn greedy(&mut self, prompts: &[&[u32]], max_new: usize) -> Result<Vec<Vec<u32>>> {
        ensure!(max_new > 0, "--max-new-tokens must be at least 1");
        let longest = prompts.iter().map(|p| p.len()).max().unwrap_or(0);
        self.check_batch(prompts.len(), longest + max_new)?;
        let mut step = StepInput::default();
        for (slot, p) in prompts.iter().enumerate() {
            ensure!(!p.is_empty(), "empty prompt");
            step.seqs.push(SeqInput {
                query_start: step.tokens.len(),
                query_len: p.len(),
                context_len: p.len(),
                block_table: self.block_table(slot),
                prompt_len: p.len(),
            });
            step.tokens.extend_from_slice(p);
            step.positions.extend(0..p.len() as u32);
            step.logit_rows.push(step.tokens.len() - 1);
        }
        let first = self.greedy_step(&step)?;
        let mut out: Vec<Vec<u32>> = first.into_iter().map(|t| vec![t]).collect();
        loop {
            let live: Vec<usize> = (0..prompts.len())
                .filter(|&i| {
                    out[i].len() < max_new
                        && !self
                            .eos_token_ids
                            .contains(out[i].last().expect("one token"))
                })
                .collect();
            if live.is_empty() {
                return Ok(out);
            }
            let mut step = StepInput::default();
            for (k, &i) in live.iter().enumerate() {
                let len = prompts[i].len() + out[i].len();
                step.seqs.push(SeqInput {
                    query_start: k,
                    query_len: 1,
                    context_len: len,
                    block_table: self.block_table(i),
                    prompt_len: prompts[i].len(),
                });
                step.tokens.push(*out[i].last().expect("one token"));
                step.positions.push(len as u32 - 1);
                step.logit_rows.push(k);
            }
            let next = self.greedy_step(&step)?;
            for (&i, t) in live.iter().zip(next) {
                out[i].push(t);
            }
        }
    }
}
