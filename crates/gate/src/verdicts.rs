//! Gate verdicts per CPU weight format, kept beside a model, and the choice
//! `--cpu-weights auto` makes from them: the fastest format whose verdict against the f32
//! reference is PASS; and the one `--cpu-prefill-attention auto` makes (bf16 tiles for prompt
//! attention where a verdict for that weight format with them passed).
//!
//! A verdict file is JSON, `<model file>.wring-gate.json` beside a GGUF (or
//! `wring-gate.json` inside a model directory), written by `wring gate --save-verdict`. The
//! default model's verdicts ship with wring (`data/verdicts/`, with the command that
//! reproduces them), so a first run needs no gate run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use wring_model::{CpuWeights, PrefillAttention};

/// The CPU formats, fastest first (decode tokens/s on the CPU:
/// results/2026-11-30-cpu-matmul-kernels). f32 is the reference and needs no verdict.
pub const FASTEST_FIRST: [CpuWeights; 3] = [CpuWeights::Q4, CpuWeights::Q8, CpuWeights::F32];

/// Verdicts shipped for the default model (file name, size in bytes, JSON).
const SHIPPED: &[(&str, u64, &str)] = &[(
    "SmolLM2-135M-Instruct.Q4_1.gguf",
    SMOLLM2_Q41_BYTES,
    include_str!("../data/verdicts/SmolLM2-135M-Instruct.Q4_1.gguf.wring-gate.json"),
)];
const SMOLLM2_Q41_BYTES: u64 = 98_362_432;

/// One format's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FormatVerdict {
    /// PASS or FAIL.
    pub verdict: String,
    /// Why, in a line (which check failed, with its number).
    pub summary: String,
    /// The `wring gate` command line that produced it.
    pub command: String,
    /// When (UTC, RFC 3339) and with which wring commit.
    pub date: String,
}

/// Every verdict known for one model file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelVerdicts {
    /// The model file's name and size when the verdicts were made (a changed file voids them).
    pub model_file: String,
    pub model_bytes: u64,
    /// Format name (q8, q4) → verdict against the f32 reference.
    pub formats: BTreeMap<String, FormatVerdict>,
}

pub fn format_name(w: CpuWeights) -> &'static str {
    match w {
        CpuWeights::F32 => "f32",
        CpuWeights::Q8 => "q8",
        CpuWeights::Q4 => "q4",
        CpuWeights::Auto => "auto",
    }
}

/// Where the verdicts of the model at `path` are cached.
pub fn cache_path(path: &Path) -> PathBuf {
    wring_model::beside_model(path, "wring-gate.json")
}

fn identity(path: &Path) -> Option<(String, u64)> {
    let name = path.file_name()?.to_string_lossy().into_owned();
    let bytes = if path.is_dir() {
        // A directory: the size of its weight files.
        std::fs::read_dir(path)
            .ok()?
            .filter_map(|e| e.ok())
            .filter(|e| e.path().extension().is_some_and(|x| x == "safetensors"))
            .filter_map(|e| e.metadata().ok())
            .map(|m| m.len())
            .sum()
    } else {
        std::fs::metadata(path).ok()?.len()
    };
    Some((name, bytes))
}

/// The verdicts for the model at `path`: the cache beside it, else the shipped ones when the
/// file is the one they were made for. None when there are none (or they are for another file).
pub fn load(path: &Path) -> Option<(ModelVerdicts, String)> {
    let (name, bytes) = identity(path)?;
    let matches = |v: &ModelVerdicts| v.model_file == name && v.model_bytes == bytes;
    let cache = cache_path(path);
    if let Ok(text) = std::fs::read_to_string(&cache) {
        match serde_json::from_str::<ModelVerdicts>(&text) {
            Ok(v) if matches(&v) => return Some((v, cache.display().to_string())),
            Ok(_) => tracing::warn!(
                "{} was made for another file than {}; ignoring it",
                cache.display(),
                path.display()
            ),
            Err(e) => tracing::warn!(
                "{} is not a verdict file ({e}); ignoring it",
                cache.display()
            ),
        }
    }
    SHIPPED.iter().find_map(|&(file, size, json)| {
        let v: ModelVerdicts = serde_json::from_str(json).expect("shipped verdicts parse");
        (file == name && size == bytes && matches(&v))
            .then(|| (v, "verdicts shipped with wring".to_string()))
    })
}

/// Records one format's verdict in the cache beside the model at `path`.
pub fn save(path: &Path, format: CpuWeights, verdict: FormatVerdict) -> Result<PathBuf> {
    save_named(path, format_name(format), verdict)
}

/// Records the verdict of the weight format named `format` (a CPU format, or a CUDA one:
/// fp8, int4, nvfp4, which `wring tune` reports beside their speed).
pub fn save_named(path: &Path, format: &str, verdict: FormatVerdict) -> Result<PathBuf> {
    let (name, bytes) = identity(path).context("the model path has no file name")?;
    let cache = cache_path(path);
    let mut v = std::fs::read_to_string(&cache)
        .ok()
        .and_then(|t| serde_json::from_str::<ModelVerdicts>(&t).ok())
        .filter(|v| v.model_file == name && v.model_bytes == bytes)
        .unwrap_or(ModelVerdicts {
            model_file: name,
            model_bytes: bytes,
            formats: BTreeMap::new(),
        });
    v.formats.insert(format.to_string(), verdict);
    std::fs::write(&cache, serde_json::to_string_pretty(&v)? + "\n")
        .with_context(|| format!("writing {}", cache.display()))?;
    Ok(cache)
}

/// The verdict key of CPU weights `w` with prompt attention in bf16 tiles
/// (`wring gate --candidate-cpu-prefill-attention bf16`), e.g. `q8+bf16-prefill-attention`.
pub fn prefill_bf16_key(w: CpuWeights) -> String {
    format!("{}+bf16-prefill-attention", format_name(w))
}

/// What `--cpu-prefill-attention auto` runs with CPU weights `w`: bf16 tiles when this CPU
/// has them (`amx`) and the gate's verdict for `w` with them is PASS, else f32; and a
/// sentence saying why.
pub fn choose_prefill_attention(
    verdicts: Option<&(ModelVerdicts, String)>,
    w: CpuWeights,
    amx: bool,
) -> (PrefillAttention, String) {
    let key = prefill_bf16_key(w);
    if !amx {
        return (
            PrefillAttention::F32,
            "CPU prefill attention: f32 (this CPU has no AMX-BF16 tiles, or WRING_CPU_AMX=0)"
                .into(),
        );
    }
    match verdicts.and_then(|(v, from)| v.formats.get(&key).map(|f| (f, from))) {
        Some((f, from)) if f.verdict == "PASS" => (
            PrefillAttention::Bf16,
            format!("CPU prefill attention: bf16 on AMX tiles (gate verdict of {key} against f32 is PASS: {}; {from})", f.summary),
        ),
        Some((f, _)) => (
            PrefillAttention::F32,
            format!("CPU prefill attention: f32 ({key}: {}: {})", f.verdict, f.summary),
        ),
        None => (
            PrefillAttention::F32,
            format!("CPU prefill attention: f32 (no gate verdict for {key}; `wring gate --candidate-cpu-weights {} --candidate-cpu-prefill-attention bf16 --save-verdict` makes one)", format_name(w)),
        ),
    }
}

/// What `--cpu-weights auto` runs: the fastest format whose verdict is PASS (f32, the
/// reference, when none is), and a sentence saying why.
pub fn choose(
    verdicts: Option<&(ModelVerdicts, String)>,
    model_path: &Path,
) -> (CpuWeights, String) {
    let Some((v, from)) = verdicts else {
        return (
            CpuWeights::F32,
            format!(
                "CPU weights: f32 (no gate verdicts for this model yet; a quantized format is used only once \
`wring gate --reference {p} --candidate {p} --candidate-cpu-weights q4 --save-verdict` (or q8) passes)",
                p = model_path.display()
            ),
        );
    };
    let mut skipped = vec![];
    for w in FASTEST_FIRST {
        if w == CpuWeights::F32 {
            break;
        }
        match v.formats.get(format_name(w)) {
            Some(f) if f.verdict == "PASS" => {
                let mut why = format!(
                    "CPU weights: {} (fastest format whose gate verdict against f32 is PASS: {}; {from})",
                    format_name(w),
                    f.summary
                );
                if !skipped.is_empty() {
                    why.push_str(&format!("; skipped {}", skipped.join("; ")));
                }
                return (w, why);
            }
            Some(f) => skipped.push(format!("{} ({}: {})", format_name(w), f.verdict, f.summary)),
            None => skipped.push(format!("{} (no verdict)", format_name(w))),
        }
    }
    (
        CpuWeights::F32,
        format!(
            "CPU weights: f32 (the reference; no faster format passed the gate: {}; {from})",
            skipped.join("; ")
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(v: &str) -> FormatVerdict {
        FormatVerdict {
            verdict: v.into(),
            summary: format!("{v} summary"),
            command: "wring gate ...".into(),
            date: "2026-12-01".into(),
        }
    }

    #[test]
    fn the_fastest_passing_format_wins_and_a_changed_file_voids_the_cache() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("m.gguf");
        std::fs::write(&model, b"12345").unwrap();
        let (w, why) = choose(load(&model).as_ref(), &model);
        assert_eq!(w, CpuWeights::F32);
        assert!(why.contains("--save-verdict"), "{why}");

        save(&model, CpuWeights::Q4, verdict("FAIL")).unwrap();
        save(&model, CpuWeights::Q8, verdict("PASS")).unwrap();
        assert_eq!(
            cache_path(&model),
            dir.path().join("m.gguf.wring-gate.json")
        );
        let (w, why) = choose(load(&model).as_ref(), &model);
        assert_eq!(w, CpuWeights::Q8);
        assert!(why.contains("skipped q4 (FAIL"), "{why}");

        save(&model, CpuWeights::Q4, verdict("PASS")).unwrap();
        assert_eq!(choose(load(&model).as_ref(), &model).0, CpuWeights::Q4);

        // Another file under the same name: the verdicts no longer apply.
        std::fs::write(&model, b"123456").unwrap();
        assert!(load(&model).is_none());
    }

    #[test]
    fn bf16_prompt_attention_needs_the_tiles_and_a_passing_verdict_for_its_weights() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("m.gguf");
        std::fs::write(&model, b"12345").unwrap();
        let choose = |w, amx| choose_prefill_attention(load(&model).as_ref(), w, amx);
        let (p, why) = choose(CpuWeights::Q8, true);
        assert_eq!(p, PrefillAttention::F32);
        assert!(
            why.contains("no gate verdict for q8+bf16-prefill-attention"),
            "{why}"
        );
        save_named(&model, &prefill_bf16_key(CpuWeights::Q8), verdict("FAIL")).unwrap();
        save_named(&model, &prefill_bf16_key(CpuWeights::F32), verdict("PASS")).unwrap();
        let (p, why) = choose(CpuWeights::Q8, true);
        assert_eq!(p, PrefillAttention::F32);
        assert!(why.contains("FAIL"), "{why}");
        // The verdict is per weight format: f32 weights with the tiles passed.
        assert_eq!(choose(CpuWeights::F32, true).0, PrefillAttention::Bf16);
        // No tiles on this CPU: f32 whatever the verdict.
        let (p, why) = choose(CpuWeights::F32, false);
        assert_eq!(p, PrefillAttention::F32);
        assert!(why.contains("no AMX-BF16"), "{why}");
    }

    #[test]
    fn shipped_verdicts_parse_and_name_their_command() {
        for (file, bytes, json) in SHIPPED {
            let v: ModelVerdicts = serde_json::from_str(json).unwrap();
            assert_eq!((&v.model_file[..], v.model_bytes), (*file, *bytes));
            for (name, f) in &v.formats {
                assert!(f.command.starts_with("wring gate "), "{}", f.command);
                if name.ends_with("+bf16-prefill-attention") {
                    assert!(f.command.contains("--candidate-cpu-prefill-attention bf16"));
                }
                assert!(f.verdict == "PASS" || f.verdict == "FAIL");
            }
        }
    }
}
