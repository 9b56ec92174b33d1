//! `wring gate`: may a candidate model replace the reference? Teacher-forced comparison on
//! corpus prompts and the reference's own continuations, with a noise floor and a verdict.

use anyhow::Context;
use std::path::PathBuf;
use wring_gate::{GateConfig, ModelChoice, NoiseFloorKind, Thresholds};
use wring_model::{CpuWeights, LoadFormat, ModelSpec, PrefillAttention};

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Streams: each prompt (first user turn from the corpora, chat template applied as the server \
does, cut to --max-prompt-tokens) is followed by the REFERENCE model's greedy continuation of up to \
--max-new-tokens tokens (stopping at end-of-sequence). Both models are teacher-forced on exactly those \
token ids; the metrics cover the continuation tokens, each predicted from the prefix before it.\n\n\
Metrics: token match (candidate argmax = the next token), max |Δ logprob| of the next token, \
ppl_rel = ppl_cand/ppl_ref − 1, KLD(ref‖cand) mean/median/p99/max over full distributions, same-top-token \
rate, Δp = p_cand − p_ref percentiles and RMS. Log-softmax in f64.\n\n\
Free-running: the candidate also continues every prompt greedily on its own; a continuation that loops \
(at least half of its ≥16 tokens inside a 4-token span repeated from earlier in it) where the reference's \
does not is an introduced loop. Teacher forcing alone misses this: near-tied next tokens flip without a \
large |Δ logprob|, and greedy decoding then follows the flip. Loops are judged in conversational streams \
(sharegpt, wildchat, lmsys, everyday); code corpora repeat spans legitimately (arrays, test cases), so \
theirs are reported, not judged.\n\n\
Verdict: PASS iff max |Δ logprob| ≤ --max-logprob-diff AND |ppl_rel| ≤ --max-ppl-rel AND introduced \
loops ≤ --max-loops-introduced.\n\n\
Exit status: 0 PASS, 1 FAIL, 2 error (bad flags, a model or corpus that does not load, …)."
)]
pub struct Args {
    /// Reference model: a .gguf file, a Hugging Face directory, ORG/NAME, or `default`.
    #[arg(long)]
    pub reference: String,
    /// Candidate model (same forms); must share the reference's vocabulary.
    #[arg(long)]
    pub candidate: String,
    /// Corpus: all (the six file-backed corpora and the built-in everyday questions), a name,
    /// or a comma-separated list (sharegpt, humaneval, mbpp, swebench, wildchat, lmsys, mix,
    /// everyday).
    #[arg(long, default_value = "all")]
    pub corpus: String,
    /// Directory with the shared corpora.
    #[arg(long, default_value = "../shared/corpora")]
    pub corpus_dir: PathBuf,
    /// Prompts per corpus.
    #[arg(long, default_value_t = 8)]
    pub num_prompts: usize,
    /// Reference continuation length (tokens scored per stream).
    #[arg(long, default_value_t = 64)]
    pub max_new_tokens: usize,
    /// Longer prompts have their user turn cut to fit (the template is kept).
    #[arg(long, default_value_t = 512)]
    pub max_prompt_tokens: usize,
    /// Streams run together in one forward step.
    #[arg(long, default_value_t = 8)]
    pub batch_streams: usize,
    /// Largest allowed max |Δ logprob| (study default).
    #[arg(long, default_value_t = 0.5)]
    pub max_logprob_diff: f64,
    /// Largest allowed |ppl_cand/ppl_ref − 1| (study default).
    #[arg(long, default_value_t = 0.1)]
    pub max_ppl_rel: f64,
    /// Most streams whose free-running greedy continuation may loop where the reference's does not.
    #[arg(long, default_value_t = 0)]
    pub max_loops_introduced: usize,
    /// Noise floor: batch (reference one stream at a time vs batched), precision (batch, plus
    /// the reference with the other CPU weight format, f32 ↔ q8), none.
    #[arg(long, default_value = "batch")]
    pub noise_floor: NoiseFloorKind,
    /// Write the full result as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// cpu | cuda | cuda:N, for both models.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Device of the reference only (overrides --device), e.g. the f32 CPU reference for a
    /// candidate on cuda.
    #[arg(long)]
    pub reference_device: Option<String>,
    /// Device of the candidate only (overrides --device).
    #[arg(long)]
    pub candidate_device: Option<String>,
    /// CPU weight format of the reference (f32 | q8 | q4).
    #[arg(long, default_value = "f32")]
    pub reference_cpu_weights: CpuWeights,
    /// CPU weight format of the candidate (f32 | q8 | q4).
    #[arg(long, default_value = "f32")]
    pub candidate_cpu_weights: CpuWeights,
    /// Attention precision of the candidate's prompt rows on the CPU: f32 or bf16 (AMX tiles;
    /// needs a CPU with AMX-BF16). With --save-verdict the verdict is recorded as
    /// `<weights>+bf16-prefill-attention`, where `--cpu-prefill-attention auto` reads it.
    #[arg(long, default_value = "f32", value_parser = ["f32", "bf16"])]
    pub candidate_cpu_prefill_attention: String,
    /// CUDA weight format of the candidate (quantised at load, as `wring serve --gpu-weights`):
    /// the candidate must run on cuda (a reference there keeps bf16). With --save-verdict the
    /// verdict is recorded under this format, where `wring tune` reads it.
    #[arg(long, value_parser = ["bf16", "fp8", "int4", "nvfp4"])]
    pub candidate_gpu_weights: Option<String>,
    /// No progress bars.
    #[arg(long)]
    pub quiet: bool,
    /// Record the verdict beside the model (`<model>.wring-gate.json`), where `--cpu-weights auto`
    /// and `wring tune` read it: needs the same model as reference (f32 on the CPU) and candidate
    /// (q8 or q4 on the CPU, or fp8/int4/nvfp4 on cuda with --candidate-gpu-weights).
    #[arg(long)]
    pub save_verdict: bool,
}

fn choice(
    model: &str,
    device: wring_model::Device,
    w: CpuWeights,
    prefill_attention: PrefillAttention,
    gpu_weights: Option<String>,
) -> ModelChoice {
    ModelChoice {
        spec: ModelSpec {
            model: Some(model.to_string()),
            load_format: LoadFormat::Auto,
            model_shape: None,
        },
        device,
        cpu_weights: w,
        prefill_attention,
        gpu_weights,
    }
}

fn gate(a: Args) -> anyhow::Result<bool> {
    let device = |flag: &str, v: &str| {
        v.parse::<wring_model::Device>()
            .with_context(|| format!("{flag} {v:?}"))
    };
    let ref_device = match &a.reference_device {
        Some(d) => device("--reference-device", d)?,
        None => device("--device", &a.device)?,
    };
    let cand_device = match &a.candidate_device {
        Some(d) => device("--candidate-device", d)?,
        None => device("--device", &a.device)?,
    };
    if a.candidate_gpu_weights.is_some() {
        anyhow::ensure!(
            matches!(cand_device, wring_model::Device::Cuda(_)),
            "--candidate-gpu-weights needs the candidate on cuda (--candidate-device cuda)"
        );
    }
    let prefill: PrefillAttention = a.candidate_cpu_prefill_attention.parse()?;
    if prefill == PrefillAttention::Bf16 {
        anyhow::ensure!(
            cand_device == wring_model::Device::Cpu,
            "--candidate-cpu-prefill-attention bf16 is a CPU precision; the candidate runs on {cand_device}"
        );
        anyhow::ensure!(
            wring_runtime::cpu_bf16_attention_available(),
            "--candidate-cpu-prefill-attention bf16 needs a CPU with AMX-BF16 tiles (this one has none, or WRING_CPU_AMX=0): the candidate would run f32"
        );
    }
    let mut cfg = GateConfig::new(
        choice(
            &a.reference,
            ref_device,
            a.reference_cpu_weights,
            PrefillAttention::F32,
            None,
        ),
        choice(
            &a.candidate,
            cand_device,
            a.candidate_cpu_weights,
            prefill,
            a.candidate_gpu_weights.clone(),
        ),
    );
    cfg.corpus = a.corpus;
    cfg.corpus_dir = a.corpus_dir;
    cfg.num_prompts = a.num_prompts;
    cfg.max_new_tokens = a.max_new_tokens;
    cfg.max_prompt_tokens = a.max_prompt_tokens;
    cfg.batch_streams = a.batch_streams;
    cfg.thresholds = Thresholds {
        max_logprob_diff: a.max_logprob_diff,
        max_ppl_rel: a.max_ppl_rel,
        max_loops_introduced: a.max_loops_introduced,
    };
    cfg.noise_floor = a.noise_floor;
    cfg.progress = !a.quiet;
    let save_to = if a.save_verdict {
        Some(verdict_target(&cfg, a.candidate_gpu_weights.as_deref())?)
    } else {
        None
    };
    let report = wring_gate::run_gate(&cfg)?;
    if let Some(path) = save_to {
        let command = std::iter::once("wring".to_string())
            .chain(std::env::args().skip(1))
            .collect::<Vec<_>>()
            .join(" ");
        let verdict = wring_gate::verdicts::FormatVerdict {
            verdict: report.verdict.clone(),
            summary: report.one_line(),
            command,
            date: wring_bench::machine::utc_now(),
        };
        let format = match &a.candidate_gpu_weights {
            Some(w) => w.clone(),
            None if prefill == PrefillAttention::Bf16 => {
                wring_gate::verdicts::prefill_bf16_key(cfg.candidate.cpu_weights)
            }
            None => wring_gate::verdicts::format_name(cfg.candidate.cpu_weights).to_string(),
        };
        let file = wring_gate::verdicts::save_named(&path, &format, verdict)?;
        eprintln!("verdict saved to {}", file.display());
    }
    if let Some(path) = &a.json {
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    print!("{}", report.summary());
    Ok(report.passed())
}

/// The model file whose verdict cache `--save-verdict` writes: reference and candidate must be
/// the same model, the reference the f32 CPU reference and the candidate a quantized CPU format,
/// or a quantized CUDA format (`--candidate-gpu-weights fp8|int4|nvfp4`).
fn verdict_target(cfg: &GateConfig, gpu_weights: Option<&str>) -> anyhow::Result<PathBuf> {
    use wring_model::Device;
    let (r, c) = (&cfg.reference, &cfg.candidate);
    anyhow::ensure!(
        r.device == Device::Cpu && r.cpu_weights == CpuWeights::F32,
        "--save-verdict needs the f32 reference on the CPU (--reference-device cpu --reference-cpu-weights f32)"
    );
    match gpu_weights {
        Some(w) => anyhow::ensure!(
            matches!(w, "fp8" | "int4" | "nvfp4"),
            "--save-verdict records a quantized CUDA format (fp8, int4, nvfp4), not {w}"
        ),
        None => {
            anyhow::ensure!(
                c.device == Device::Cpu,
                "--save-verdict records CPU weight formats, or CUDA ones with --candidate-gpu-weights"
            );
            anyhow::ensure!(
                matches!(c.cpu_weights, CpuWeights::Q8 | CpuWeights::Q4)
                    || c.prefill_attention == PrefillAttention::Bf16,
                "--save-verdict records q8 or q4 (--candidate-cpu-weights), or a format with bf16 prompt attention (--candidate-cpu-prefill-attention bf16)"
            );
        }
    }
    let rp = wring_model::resolve_model_path(r.spec.model.as_deref())?;
    let cp = wring_model::resolve_model_path(c.spec.model.as_deref())?;
    anyhow::ensure!(
        rp == cp,
        "--save-verdict compares a model with itself in another format; the reference is {} and the candidate {}",
        rp.display(),
        cp.display()
    );
    Ok(cp)
}

/// Runs the gate and exits: 0 PASS, 1 FAIL, 2 error.
pub fn run(a: Args) -> ! {
    match gate(a) {
        Ok(true) => std::process::exit(0),
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::exit(2)
        }
    }
}
