//! wring-quant: `wring quantize` as a library.
//!
//! [`quantize_model`] writes a Hugging Face directory (via `wring_model::export`) whose
//! linear weights are stored in one of the formats of `wring_backend::quant`:
//! round-to-nearest for every scheme, and for `int4` optionally AWQ-style
//! activation-aware scaling ([`awq`]) and GPTQ error compensation ([`gptq`]), both fed by
//! calibration statistics from corpus prompts ([`calib`]).
//!
//! Embeddings (tied to the output projection in the default model), norms and biases
//! stay f32: they are a small share of the weights of the models wring serves, the CPU
//! backend computes in f32 anyway, and keeping them exact confines the quantization
//! error (and what the gate measures) to the linear layers.

pub mod awq;
pub mod calib;
pub mod gptq;

use anyhow::{bail, ensure, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use serde_json::json;
use std::path::Path;
use std::time::Instant;
use wring_backend::quant::{PartDtype, QuantMatrix};
use wring_model::export::{
    dense_tensor, export_hf_dir, DenseDtype, ExportOptions, OutTensor, TensorRole,
};
use wring_model::LoadedModel;

pub use calib::{calibrate, CalibOptions, Calibration, InputStats};
/// The storage formats a model can be quantised to (`QuantizeOptions::scheme`).
pub use wring_backend::quant::Scheme;

#[derive(Debug, Clone)]
pub struct QuantizeOptions {
    pub scheme: Scheme,
    /// int4 only (default 128).
    pub group_size: Option<usize>,
    /// int4 only: AWQ scaling search.
    pub awq: bool,
    /// int4 only: GPTQ error compensation.
    pub gptq: bool,
    /// GPTQ damping, as a fraction of the mean Hessian diagonal.
    pub damp: f64,
    pub calib: CalibOptions,
    pub progress: bool,
}

impl QuantizeOptions {
    pub fn needs_calibration(&self) -> bool {
        self.scheme == Scheme::Int4 && (self.awq || self.gptq)
    }

    fn validate(&self) -> Result<()> {
        if self.scheme != Scheme::Int4 {
            ensure!(
                self.group_size.is_none(),
                "--group-size applies to int4 only ({} has {})",
                self.scheme,
                match self.scheme {
                    Scheme::Nvfp4 => "fixed blocks of 16",
                    _ => "one scale per output channel",
                }
            );
            ensure!(
                !self.awq && !self.gptq,
                "AWQ and GPTQ apply to int4 only; {} is round-to-nearest",
                self.scheme
            );
        }
        if let Some(g) = self.group_size {
            ensure!(
                g >= 2 && g.is_multiple_of(2),
                "--group-size {g} must be even and at least 2"
            );
        }
        ensure!(
            self.damp > 0.0 && self.damp < 1.0,
            "--damp {} must be in (0, 1)",
            self.damp
        );
        Ok(())
    }
}

/// What happened to one linear weight.
#[derive(Debug, Clone, Serialize)]
pub struct TensorReport {
    pub name: String,
    pub rows: usize,
    pub cols: usize,
    /// AWQ's chosen α (int4 with AWQ).
    pub awq_alpha: Option<f32>,
    /// Output error `‖X·ΔWᵀ‖²` on sampled rows: plain RTN, and the final weights (with calibration).
    pub err_rtn: Option<f64>,
    pub err_final: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct QuantizeReport {
    pub scheme: String,
    pub group_size: Option<usize>,
    pub awq: bool,
    pub gptq: bool,
    pub calib_prompts: usize,
    pub calib_tokens: usize,
    pub tensors: Vec<TensorReport>,
    pub safetensors_bytes: u64,
    pub seconds: f64,
}

impl QuantizeReport {
    /// Geometric mean over tensors of final error / RTN error (None without calibration).
    pub fn mean_error_ratio(&self) -> Option<f64> {
        let r: Vec<f64> = self
            .tensors
            .iter()
            .filter_map(|t| match (t.err_rtn, t.err_final) {
                (Some(a), Some(b)) if a > 0.0 => Some((b / a).ln()),
                _ => None,
            })
            .collect();
        (!r.is_empty()).then(|| (r.iter().sum::<f64>() / r.len() as f64).exp())
    }
}

/// The `quantization_config` block of `config.json`.
pub fn quantization_config(opts: &QuantizeOptions, cal: Option<&Calibration>) -> serde_json::Value {
    let mut q = json!({
        "quant_method": "wring",
        "scheme": opts.scheme.name(),
        "bits": opts.scheme.bits(),
        "group_size": match opts.scheme {
            Scheme::Int4 => json!(opts.group_size.unwrap_or(wring_backend::quant::INT4_GROUP)),
            Scheme::Nvfp4 => json!(wring_backend::quant::NVFP4_BLOCK),
            _ => serde_json::Value::Null,
        },
        "modules_not_quantized": ["model.embed_tokens", "lm_head", "norms", "biases"],
    });
    match opts.scheme {
        Scheme::Int8 => {
            q["weights"] = json!("int8 symmetric, f32 scale per output channel");
            q["activations"] = json!("unquantized (W8A16)");
        }
        Scheme::Int4 => {
            q["weights"] = json!("uint4 asymmetric (f16 scale + uint4 zero per group along the input dim), 2 per byte, low nibble first");
            q["activations"] = json!("unquantized (W4A16)");
            q["awq"] = json!(opts.awq);
            q["gptq"] = json!(opts.gptq);
            if opts.gptq {
                q["damp_percent"] = json!(opts.damp);
            }
        }
        Scheme::Fp8 => {
            q["weights"] = json!("FP8 E4M3, f32 scale per output channel");
            q["activations"] = json!("FP8 E4M3 per token, dynamic scale (W8A8)");
        }
        Scheme::Nvfp4 => {
            q["weights"] =
                json!("FP4 E2M1, 2 per byte, E4M3 scale per block of 16 inputs, f32 global scale");
            q["activations"] =
                json!("unquantized: weight-only on Hopper (FP4 tensor cores start with Blackwell)");
        }
    }
    if let Some(c) = cal {
        q["calibration"] =
            json!({"prompts": c.prompts, "tokens": c.tokens, "corpus": opts.calib.corpus});
    }
    q
}

/// Quantizes one linear weight (`[rows][cols]`, f32) with the options' scheme.
pub fn quantize_weight(
    name: &str,
    w: &[f32],
    rows: usize,
    cols: usize,
    opts: &QuantizeOptions,
    stats: Option<&InputStats>,
) -> Result<(QuantMatrix, TensorReport)> {
    let mut rep = TensorReport {
        name: name.to_string(),
        rows,
        cols,
        awq_alpha: None,
        err_rtn: None,
        err_final: None,
    };
    let group = opts.group_size;
    let st = match stats {
        Some(st) if opts.needs_calibration() => st,
        _ => {
            let m = QuantMatrix::quantize_rtn(opts.scheme, rows, cols, w, group, None)?;
            return Ok((m, rep));
        }
    };
    ensure!(
        st.cols == cols,
        "calibration inputs of {name} have {} channels, the weight {cols}",
        st.cols
    );
    let group = group.unwrap_or(wring_backend::quant::INT4_GROUP);
    // AWQ: scale the weight's columns by s (and the Hessian by 1/s on both sides).
    let (ws, hs, smooth) = if opts.awq {
        let c = awq::search(w, rows, cols, group, st);
        rep.awq_alpha = Some(c.alpha);
        rep.err_rtn = Some(c.err_rtn);
        rep.err_final = Some(c.err_best);
        match c.scale {
            Some(s) => {
                let ws: Vec<f32> = w
                    .chunks_exact(cols)
                    .flat_map(|r| r.iter().zip(&s).map(|(a, b)| a * b).collect::<Vec<_>>())
                    .collect();
                let mut hs = st.h.clone();
                for i in 0..cols {
                    for j in 0..cols {
                        hs[i * cols + j] /= s[i] * s[j];
                    }
                }
                let smooth: Vec<f32> = s.iter().map(|v| 1.0 / v).collect();
                (ws, hs, Some(smooth))
            }
            None => (w.to_vec(), st.h.clone(), None),
        }
    } else {
        (w.to_vec(), st.h.clone(), None)
    };
    let m = if opts.gptq {
        gptq::gptq_int4(&ws, rows, cols, &hs, group, opts.damp, smooth)?
    } else {
        QuantMatrix::quantize_rtn(Scheme::Int4, rows, cols, &ws, Some(group), smooth)?
    };
    // Final error on the same sampled rows, against the original weights.
    let sample = awq::sample_rows(rows);
    let mut delta = vec![0.0f32; rows * cols];
    let mut row = vec![0.0f32; cols];
    for &r in &sample {
        m.dequantize_row(r, &mut row);
        for c in 0..cols {
            delta[r * cols + c] = w[r * cols + c] - row[c];
        }
    }
    rep.err_final = Some(awq::output_error(&delta, cols, &st.h, &sample));
    if rep.err_rtn.is_none() {
        let rtn = QuantMatrix::quantize_rtn(Scheme::Int4, rows, cols, w, Some(group), None)?;
        for &r in &sample {
            rtn.dequantize_row(r, &mut row);
            for c in 0..cols {
                delta[r * cols + c] = w[r * cols + c] - row[c];
            }
        }
        rep.err_rtn = Some(awq::output_error(&delta, cols, &st.h, &sample));
    }
    Ok((m, rep))
}

fn part_dtype(d: PartDtype) -> wring_model::export::Dtype {
    use wring_model::export::Dtype;
    match d {
        PartDtype::I8 => Dtype::I8,
        PartDtype::U8 => Dtype::U8,
        PartDtype::F16 => Dtype::F16,
        PartDtype::F32 => Dtype::F32,
        PartDtype::F8E4M3 => Dtype::F8_E4M3,
    }
}

/// The stored tensors of a quantized weight named `hf` (`x.weight` → `x.qweight`, `x.scales`, …).
pub fn quant_tensors(hf: &str, m: &QuantMatrix) -> Vec<OutTensor> {
    let prefix = hf.strip_suffix(".weight").unwrap_or(hf);
    m.to_parts()
        .into_iter()
        .map(|p| OutTensor {
            name: format!("{prefix}.{}", p.suffix),
            dtype: part_dtype(p.dtype),
            shape: p.shape,
            data: p.bytes,
        })
        .collect()
}

/// Quantizes `model` into a Hugging Face directory at `out`.
pub fn quantize_model(
    model: &LoadedModel,
    out: &Path,
    opts: &QuantizeOptions,
) -> Result<QuantizeReport> {
    opts.validate()?;
    let t0 = Instant::now();
    if out.join("config.json").exists() || out.join("model.safetensors").exists() {
        bail!(
            "{} already holds a model; choose an empty --out directory",
            out.display()
        );
    }
    let cal = if opts.needs_calibration() {
        Some(calibrate(model, &opts.calib)?)
    } else {
        None
    };
    let export = ExportOptions {
        quantization_config: Some(quantization_config(opts, cal.as_ref())),
        torch_dtype: Some("float32".into()),
    };
    let n_linear = model.config.num_layers * calib::LINEAR_NAMES.len();
    let pb = if opts.progress {
        ProgressBar::new(n_linear as u64)
    } else {
        ProgressBar::hidden()
    };
    pb.set_style(
        ProgressStyle::with_template(
            "quantizing {bar:30} {pos}/{len} weights {elapsed} (eta {eta}) {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut reports = vec![];
    let summary = export_hf_dir(model, out, &export, |spec, data| {
        if spec.role != TensorRole::Linear {
            return Ok(vec![dense_tensor(spec, &data, DenseDtype::F32)]);
        }
        let (rows, cols) = (spec.shape[0], spec.shape[1]);
        let stats = cal.as_ref().and_then(|c| c.for_weight(&spec.canonical));
        pb.set_message(spec.hf.clone());
        let (m, rep) = quantize_weight(&spec.hf, &data, rows, cols, opts, stats)?;
        reports.push(rep);
        pb.inc(1);
        Ok(quant_tensors(&spec.hf, &m))
    })?;
    pb.finish_and_clear();
    Ok(QuantizeReport {
        scheme: opts.scheme.name().into(),
        group_size: match opts.scheme {
            Scheme::Int4 => Some(opts.group_size.unwrap_or(wring_backend::quant::INT4_GROUP)),
            Scheme::Nvfp4 => Some(wring_backend::quant::NVFP4_BLOCK),
            _ => None,
        },
        awq: opts.awq && opts.needs_calibration(),
        gptq: opts.gptq && opts.needs_calibration(),
        calib_prompts: cal.as_ref().map_or(0, |c| c.prompts),
        calib_tokens: cal.as_ref().map_or(0, |c| c.tokens),
        tensors: reports,
        safetensors_bytes: summary.safetensors_bytes,
        seconds: t0.elapsed().as_secs_f64(),
    })
}
