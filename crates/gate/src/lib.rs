//! wring-gate: may a candidate model (quantized, converted, …) replace a reference model?
//!
//! Both models are teacher-forced on the same token streams (corpus prompts followed by the
//! REFERENCE model's greedy continuation) and their next-token distributions are compared at
//! every continuation position. The verdict is the study's: PASS iff max |Δ logprob| ≤ 0.5
//! and |ppl_rel| ≤ 0.1 (configurable). A noise floor (the reference against itself under
//! another batch composition, optionally another precision) is measured on the same streams.

pub mod degenerate;
pub mod exec;
pub mod metrics;
pub mod report;
pub mod streams;
pub mod verdicts;

use anyhow::{ensure, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::time::Instant;

pub use exec::{GateModel, ModelChoice};
pub use metrics::{score_position, summarize, Metrics, PositionScore, Thresholds, Verdict};
pub use report::{GateReport, GreedyAgreement, ModelInfo, NoiseFloor};
use streams::PromptSource;
use wring_model::CpuWeights;

/// Which noise floors to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NoiseFloorKind {
    /// None (not recommended: the verdict is then reported without a floor).
    None,
    /// The reference scored one stream at a time vs all streams of a batch in one step.
    #[default]
    Batch,
    /// Batch, plus the reference with the other CPU weight format (f32 ↔ q8).
    Precision,
}

impl std::str::FromStr for NoiseFloorKind {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "none" => Self::None,
            "batch" => Self::Batch,
            "precision" => Self::Precision,
            _ => anyhow::bail!("unknown noise floor {s:?} (batch, precision, none)"),
        })
    }
}

#[derive(Debug, Clone)]
pub struct GateConfig {
    pub reference: ModelChoice,
    pub candidate: ModelChoice,
    /// `all`, a name or a comma-separated list.
    pub corpus: String,
    pub corpus_dir: PathBuf,
    /// Prompts per corpus.
    pub num_prompts: usize,
    pub max_new_tokens: usize,
    pub max_prompt_tokens: usize,
    /// Streams run together in one step (bounds the KV pool and the logits held at once).
    pub batch_streams: usize,
    pub thresholds: Thresholds,
    pub noise_floor: NoiseFloorKind,
    /// Draw progress bars on stderr.
    pub progress: bool,
}

impl GateConfig {
    /// The study's defaults for a pair of models.
    pub fn new(reference: ModelChoice, candidate: ModelChoice) -> Self {
        Self {
            reference,
            candidate,
            corpus: "all".into(),
            corpus_dir: PathBuf::from("../shared/corpora"),
            num_prompts: 8,
            max_new_tokens: 64,
            max_prompt_tokens: 512,
            batch_streams: 8,
            thresholds: Thresholds::default(),
            noise_floor: NoiseFloorKind::Batch,
            progress: false,
        }
    }
}

/// What is scored, in words (also written to the JSON).
pub fn scored_tokens_description(max_new: usize) -> String {
    format!(
        "the continuation positions of every stream: stream = chat-templated corpus prompt + the reference's greedy continuation of up to {max_new} tokens (ending early at an end-of-sequence token, which is scored); each continuation token t is scored from the prefix before it (prompt + earlier continuation tokens), both models teacher-forced on identical token ids; prompt tokens themselves are not scored"
    )
}

struct Stream {
    corpus: PromptSource,
    prompt: streams::PromptStream,
    continuation: Vec<u32>,
}

impl Stream {
    /// Tokens fed to the models: the prompt and all but the last continuation token.
    fn input(&self) -> Vec<u32> {
        let mut v = self.prompt.prompt_ids.clone();
        v.extend_from_slice(&self.continuation[..self.continuation.len() - 1]);
        v
    }
    /// Input positions whose logits predict the continuation tokens.
    fn rows(&self) -> std::ops::Range<usize> {
        let p = self.prompt.prompt_ids.len();
        p - 1..p - 1 + self.continuation.len()
    }
}

fn scores_of(
    ref_logits: &wring_model::Logits,
    cand_logits: &wring_model::Logits,
    targets: &[u32],
) -> Result<Vec<PositionScore>> {
    ensure!(
        ref_logits.rows == targets.len() && cand_logits.rows == targets.len(),
        "logit rows do not match the scored positions"
    );
    (0..targets.len())
        .map(|i| score_position(ref_logits.row(i), cand_logits.row(i), targets[i]))
        .collect()
}

fn bar(show: bool, len: usize, msg: &str) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(len as u64);
    pb.set_style(
        ProgressStyle::with_template("{msg:>24} [{bar:30}] {pos}/{len} streams ({elapsed})")
            .expect("valid template")
            .progress_chars("=> "),
    );
    pb.set_message(msg.to_string());
    pb
}

fn weights_name(w: CpuWeights) -> String {
    format!("{w:?}").to_lowercase()
}

/// Runs the whole gate.
pub fn run_gate(cfg: &GateConfig) -> Result<GateReport> {
    let t0 = Instant::now();
    ensure!(cfg.num_prompts > 0, "--num-prompts must be at least 1");
    ensure!(
        cfg.max_new_tokens > 0,
        "--max-new-tokens must be at least 1"
    );
    ensure!(
        cfg.max_prompt_tokens > 1,
        "--max-prompt-tokens must be at least 2"
    );
    ensure!(cfg.batch_streams > 0, "--batch-streams must be at least 1");
    ensure!(
        cfg.thresholds.max_logprob_diff >= 0.0 && cfg.thresholds.max_ppl_rel >= 0.0,
        "thresholds must not be negative"
    );
    let corpora = streams::corpora(&cfg.corpus)?;
    let texts = streams::load_prompts(&cfg.corpus_dir, &corpora, cfg.num_prompts)?;
    ensure!(!texts.is_empty(), "the corpora gave no prompts");
    let stream_tokens = cfg.max_prompt_tokens + cfg.max_new_tokens;
    let batch = cfg.batch_streams.min(texts.len());

    let mut reference = GateModel::open(&cfg.reference, stream_tokens, batch)?;
    let mut candidate = GateModel::open(&cfg.candidate, stream_tokens, batch)?;
    ensure!(
        reference.vocab_size == candidate.vocab_size,
        "the reference ({}) has a vocabulary of {} tokens and the candidate ({}) {}: they cannot be compared token by token",
        reference.name,
        reference.vocab_size,
        candidate.name,
        candidate.vocab_size
    );
    let mut other_precision = match cfg.noise_floor {
        NoiseFloorKind::Precision => {
            ensure!(
                cfg.reference.device == wring_model::Device::Cpu,
                "--noise-floor precision switches the CPU weight format (f32 ↔ q8); the reference runs on {}",
                cfg.reference.device
            );
            let mut choice = cfg.reference.clone();
            choice.cpu_weights = match choice.cpu_weights {
                CpuWeights::F32 => CpuWeights::Q8,
                _ => CpuWeights::F32,
            };
            Some(GateModel::open(&choice, stream_tokens, batch)?)
        }
        _ => None,
    };

    // Prompts: the reference's template and tokenizer; the candidate's must agree.
    let mut tokenizer_mismatch = 0;
    let mut streams = Vec::with_capacity(texts.len());
    for (corpus, id, text) in &texts {
        let (ids, text, truncated) = streams::encode_truncated(
            &reference.tokenizer,
            reference.chat_template.as_deref(),
            text,
            cfg.max_prompt_tokens,
        )?;
        // Same rendered text, the candidate's tokenizer (the reference's ids are scored).
        if streams::encode_text(&candidate.tokenizer, &text)
            .ok()
            .as_ref()
            != Some(&ids)
        {
            tokenizer_mismatch += 1;
        }
        streams.push(Stream {
            corpus: *corpus,
            prompt: streams::PromptStream {
                id: id.clone(),
                corpus: corpus.tag().into(),
                prompt_ids: ids,
                truncated,
            },
            continuation: vec![],
        });
    }
    if tokenizer_mismatch > 0 {
        tracing::warn!(
            "{tokenizer_mismatch} prompts tokenize differently with the candidate's tokenizer; the gate scores the reference's token ids for both"
        );
    }

    // 1. Reference continuations (greedy, batched).
    let tg = Instant::now();
    let pb = bar(cfg.progress, streams.len(), "reference continuations");
    for group in streams.chunks_mut(batch) {
        let prompts: Vec<&[u32]> = group
            .iter()
            .map(|s| s.prompt.prompt_ids.as_slice())
            .collect();
        let conts = reference.greedy(&prompts, cfg.max_new_tokens)?;
        for (s, c) in group.iter_mut().zip(conts) {
            s.continuation = c;
        }
        pb.inc(group.len() as u64);
    }
    pb.finish_and_clear();
    let generate_seconds = tg.elapsed().as_secs_f64();

    // 2. Per batch of streams: the reference batched, then its noise floors (one stream at a
    //    time; other precision), then the candidate on the same ids.
    let ts = Instant::now();
    // (corpus, stream index, continuation index, score)
    let mut cand_scores: Vec<(PromptSource, usize, usize, PositionScore)> = vec![];
    let mut batch_floor = vec![];
    let mut batch_floor_bitwise = true;
    let mut precision_floor = vec![];
    let pb = bar(cfg.progress, streams.len(), "teacher-forced scoring");
    for (g, group) in streams.chunks(batch).enumerate() {
        let inputs: Vec<Vec<u32>> = group.iter().map(Stream::input).collect();
        let inputs_ref: Vec<&[u32]> = inputs.iter().map(Vec::as_slice).collect();
        let rows: Vec<_> = group.iter().map(Stream::rows).collect();
        let targets: Vec<u32> = group
            .iter()
            .flat_map(|s| s.continuation.iter().copied())
            .collect();
        let ref_logits = reference.score(&inputs_ref, &rows)?;
        if cfg.noise_floor != NoiseFloorKind::None {
            let mut solo = wring_model::Logits {
                rows: 0,
                vocab: ref_logits.vocab,
                data: Vec::with_capacity(ref_logits.data.len()),
            };
            for (inp, r) in inputs_ref.iter().zip(&rows) {
                let l = reference.score(std::slice::from_ref(inp), std::slice::from_ref(r))?;
                solo.rows += l.rows;
                solo.data.extend_from_slice(&l.data);
            }
            batch_floor_bitwise &= solo.data == ref_logits.data;
            batch_floor.extend(scores_of(&ref_logits, &solo, &targets)?);
        }
        if let Some(other) = other_precision.as_mut() {
            let l = other.score(&inputs_ref, &rows)?;
            precision_floor.extend(scores_of(&ref_logits, &l, &targets)?);
        }
        let cand_logits = candidate.score(&inputs_ref, &rows)?;
        let scores = scores_of(&ref_logits, &cand_logits, &targets)?;
        let mut k = 0;
        for (i, s) in group.iter().enumerate() {
            for j in 0..s.continuation.len() {
                cand_scores.push((s.corpus, g * batch + i, j, scores[k]));
                k += 1;
            }
        }
        pb.inc(group.len() as u64);
    }
    pb.finish_and_clear();
    let score_seconds = ts.elapsed().as_secs_f64();

    // 3. The candidate's own greedy continuations, free-running: next-token distributions can
    //    stay close (step 2) while greedy decoding, which follows the argmax wherever a near-tie
    //    flips, turns into a loop the reference does not make. Scored by `degenerate::is_loop`.
    let tc = Instant::now();
    let pb = bar(cfg.progress, streams.len(), "candidate continuations");
    let mut cand_conts: Vec<Vec<u32>> = Vec::with_capacity(streams.len());
    for group in streams.chunks(batch) {
        let prompts: Vec<&[u32]> = group
            .iter()
            .map(|s| s.prompt.prompt_ids.as_slice())
            .collect();
        cand_conts.extend(candidate.greedy(&prompts, cfg.max_new_tokens)?);
        pb.inc(group.len() as u64);
    }
    pb.finish_and_clear();
    let decode = |ids: &[u32]| reference.tokenizer.decode(ids, true).unwrap_or_default();
    let pairs: Vec<(String, bool, &[u32], &[u32])> = streams
        .iter()
        .zip(&cand_conts)
        .map(|(s, c)| {
            (
                s.prompt.id.clone(),
                s.corpus.is_conversational(),
                s.continuation.as_slice(),
                c.as_slice(),
            )
        })
        .collect();
    let greedy = GreedyAgreement::of(&pairs, &decode);
    let generate_seconds = generate_seconds + tc.elapsed().as_secs_f64();

    let all: Vec<PositionScore> = cand_scores.iter().map(|c| c.3).collect();
    let over = all
        .iter()
        .filter(|s| s.delta_logprob().abs() > cfg.thresholds.max_logprob_diff)
        .count();
    let worst = cand_scores
        .iter()
        .max_by(|a, b| {
            a.3.delta_logprob()
                .abs()
                .total_cmp(&b.3.delta_logprob().abs())
        })
        .map(|&(_, i, j, sc)| report::WorstPosition {
            stream: streams[i].prompt.id.clone(),
            continuation_index: j,
            token: sc.target,
            token_text: reference
                .tokenizer
                .decode(&[sc.target], false)
                .unwrap_or_default(),
            logprob_ref: sc.logprob_ref,
            logprob_cand: sc.logprob_cand,
        });
    let metrics = summarize(&all)?;
    let mut verdict = cfg.thresholds.judge(&metrics);
    verdict.add_loops(
        greedy.loops_introduced.len(),
        cfg.thresholds.max_loops_introduced,
    );
    let mut per_corpus = vec![];
    for c in &corpora {
        let these: Vec<PositionScore> = cand_scores
            .iter()
            .filter(|x| x.0 == *c)
            .map(|x| x.3)
            .collect();
        if these.is_empty() {
            continue;
        }
        let m = summarize(&these)?;
        per_corpus.push(report::CorpusResult {
            corpus: c.label().to_string(),
            streams: streams.iter().filter(|s| s.corpus == *c).count(),
            verdict: cfg.thresholds.judge(&m),
            metrics: m,
        });
    }
    let mut noise_floor = vec![];
    if !batch_floor.is_empty() {
        noise_floor.push(NoiseFloor {
            kind: "batch".into(),
            description: format!(
                "reference vs itself: every stream scored alone vs {batch} streams in one step"
            ),
            bitwise_identical: Some(batch_floor_bitwise),
            metrics: summarize(&batch_floor)?,
        });
    }
    if let Some(other) = &other_precision {
        noise_floor.push(NoiseFloor {
            kind: "precision".into(),
            description: format!(
                "reference ({} CPU weights) vs itself with {} CPU weights, same batches",
                weights_name(cfg.reference.cpu_weights),
                weights_name(other.choice.cpu_weights)
            ),
            bitwise_identical: None,
            metrics: summarize(&precision_floor)?,
        });
    }
    let info = |m: &GateModel| ModelInfo {
        model: m.choice.label(),
        name: m.name.clone(),
        device: m.device_name(),
        cpu_weights: (m.choice.device == wring_model::Device::Cpu).then(|| {
            let w = weights_name(m.choice.cpu_weights);
            match m.choice.prefill_attention {
                wring_model::PrefillAttention::Bf16 => {
                    format!("{w} (prompt attention: bf16 tiles)")
                }
                _ => w,
            }
        }),
        load_seconds: m.load_seconds,
    };
    Ok(GateReport {
        verdict: if verdict.pass { "PASS" } else { "FAIL" }.into(),
        checks: verdict,
        thresholds: cfg.thresholds,
        verdict_rule: "PASS iff max_abs_logprob_diff <= max_logprob_diff AND |ppl_rel| <= max_ppl_rel AND greedy.loops_introduced (conversational streams) <= max_loops_introduced".into(),
        greedy,
        reference: info(&reference),
        candidate: info(&candidate),
        scored_tokens: scored_tokens_description(cfg.max_new_tokens),
        corpora: corpora.iter().map(|c| c.tag().to_string()).collect(),
        streams: streams.len(),
        prompt_tokens: streams.iter().map(|s| s.prompt.prompt_ids.len()).sum(),
        truncated_prompts: streams.iter().filter(|s| s.prompt.truncated).count(),
        max_prompt_tokens: cfg.max_prompt_tokens,
        max_new_tokens: cfg.max_new_tokens,
        scored_positions: metrics.positions,
        eos_stopped_streams: streams
            .iter()
            .filter(|s| {
                s.continuation
                    .last()
                    .is_some_and(|t| reference.eos_token_ids.contains(t))
            })
            .count(),
        tokenizer_mismatch_prompts: tokenizer_mismatch,
        positions_over_logprob_threshold: over,
        worst_position: worst,
        metrics,
        per_corpus,
        noise_floor,
        generate_seconds,
        score_seconds,
        total_seconds: t0.elapsed().as_secs_f64(),
    })
}
