//! `wring quantize`: writes a quantized copy of a model as a Hugging Face directory
//! that `wring serve/generate --model DIR` loads.

use std::path::PathBuf;

use anyhow::Context;
use wring_model::{load_model, LoadFormat, ModelSpec};
use wring_quant::{quantize_model, CalibOptions, QuantizeOptions};

#[derive(clap::Args, Debug)]
#[command(after_help = "Schemes:\n  \
  int8   W8A16: int8 weights, one f32 scale per output channel.\n  \
  int4   W4A16: 4-bit weights in groups of 128 inputs (f16 scale + 4-bit zero each);\n         \
         AWQ scaling and GPTQ error compensation from calibration prompts (both on by default).\n  \
  fp8    W8A8-FP8: E4M3 weights (f32 scale per output channel), activations quantised to\n         \
         E4M3 per token at run time: the Hopper-native scheme (emulated exactly on the CPU).\n  \
  nvfp4  E2M1 weights with an E4M3 scale per block of 16 and one f32 scale per tensor.\n         \
         Weight-only on Hopper: FP4 tensor cores start with Blackwell, so H100/H200 dequantise.\n\n\
Embeddings, norms and biases stay f32. Check the result with `wring gate` before serving it.")]
pub struct Args {
    /// The model to quantize: a .gguf file, a Hugging Face directory or ORG/NAME
    /// (default: SmolLM2-135M-Instruct).
    pub model: Option<String>,
    /// The model, as the other subcommands take it (instead of the positional MODEL).
    #[arg(long = "model", value_name = "MODEL", conflicts_with = "model")]
    pub model_flag: Option<String>,
    /// int8 | int4 | fp8 | nvfp4
    #[arg(long)]
    pub scheme: wring_quant::Scheme,
    /// Output directory (created; must not hold a model already).
    #[arg(long)]
    pub out: PathBuf,
    /// int4: inputs per scale/zero.
    #[arg(long)]
    pub group_size: Option<usize>,
    /// int4: AWQ activation-aware scaling (default on).
    #[arg(long, overrides_with = "no_awq")]
    pub awq: bool,
    /// int4: plain group-wise scales, no AWQ.
    #[arg(long, overrides_with = "awq")]
    pub no_awq: bool,
    /// int4: GPTQ error compensation (default on).
    #[arg(long, overrides_with = "no_gptq")]
    pub gptq: bool,
    /// int4: round-to-nearest instead of GPTQ.
    #[arg(long, overrides_with = "gptq")]
    pub no_gptq: bool,
    /// GPTQ damping (fraction of the mean Hessian diagonal added to it).
    #[arg(long, default_value_t = 0.01)]
    pub damp: f64,
    /// Calibration corpora, comma-separated (wildchat, mbpp, lmsys, swebench, humaneval, sharegpt).
    #[arg(long, default_value = "wildchat,lmsys,mbpp")]
    pub calib_corpus: String,
    /// Calibration prompts in all.
    #[arg(long, default_value_t = 64)]
    pub calib_prompts: usize,
    /// Tokens per calibration prompt at most.
    #[arg(long, default_value_t = 256)]
    pub calib_max_tokens: usize,
    /// Directory of the corpora (default: $WRING_SHARED/corpora or ../shared/corpora).
    #[arg(long)]
    pub corpus_dir: Option<PathBuf>,
    /// Write the per-tensor report (JSON) here.
    #[arg(long)]
    pub report: Option<PathBuf>,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    use wring_quant::Scheme;
    let int4 = a.scheme == Scheme::Int4;
    if !int4 && (a.awq || a.gptq) {
        anyhow::bail!("--awq/--gptq apply to --scheme int4 only");
    }
    let opts = QuantizeOptions {
        scheme: a.scheme,
        group_size: a.group_size,
        awq: int4 && !a.no_awq,
        gptq: int4 && !a.no_gptq,
        damp: a.damp,
        calib: CalibOptions {
            corpus: a.calib_corpus.clone(),
            corpus_dir: a
                .corpus_dir
                .clone()
                .unwrap_or_else(wring_quant::calib::default_corpus_dir),
            prompts: a.calib_prompts,
            max_tokens: a.calib_max_tokens,
            layers: None,
            progress: true,
        },
        progress: true,
    };
    anyhow::ensure!(
        a.calib_prompts > 0 && a.calib_max_tokens > 1,
        "--calib-prompts and --calib-max-tokens must be positive"
    );
    let model = load_model(&ModelSpec {
        model: a.model.clone().or_else(|| a.model_flag.clone()),
        load_format: LoadFormat::Auto,
        model_shape: None,
    })?;
    eprintln!(
        "quantizing {} ({} layers) to {}{}",
        model.name,
        model.config.num_layers,
        a.scheme,
        if opts.needs_calibration() {
            format!(
                " (AWQ {}, GPTQ {}; calibration: {} prompts of {} from {})",
                on(opts.awq),
                on(opts.gptq),
                a.calib_prompts,
                a.calib_max_tokens,
                a.calib_corpus
            )
        } else {
            " (round-to-nearest)".into()
        }
    );
    let rep = quantize_model(&model, &a.out, &opts)?;
    eprintln!(
        "wrote {} ({:.1} MiB of weights, {} linear weights quantized) in {:.1} s",
        a.out.display(),
        rep.safetensors_bytes as f64 / (1 << 20) as f64,
        rep.tensors.len(),
        rep.seconds
    );
    if let Some(r) = rep.mean_error_ratio() {
        eprintln!(
            "calibration: {} prompts, {} tokens; output error vs plain round-to-nearest: x{r:.3} (geometric mean over weights)",
            rep.calib_prompts, rep.calib_tokens
        );
    }
    if a.scheme == Scheme::Nvfp4 {
        eprintln!("note: nvfp4 runs weight-only on Hopper (no FP4 tensor cores before Blackwell)");
    }
    if let Some(p) = &a.report {
        std::fs::write(p, serde_json::to_string_pretty(&rep)?)
            .with_context(|| format!("cannot write {}", p.display()))?;
    }
    Ok(())
}

fn on(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}
