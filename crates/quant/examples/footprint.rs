//! Load time and memory of one model on the CPU backend, and its decode cost.
//! `cargo run -p wring-quant --example footprint -- MODEL [f32|q8]` (or `-- --export-f32 DIR`)
//! prints one JSON line: load wall/CPU seconds, peak and steady resident memory, the
//! bytes of weight matrices held, and CPU-seconds per decoded token (batch 1).

use std::time::Instant;
use wring_model::{greedy_continuation, load_model, ModelSpec, RunnerOptions};

/// CPU seconds used by this process (user + system).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let f: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let t = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (t(11) + t(12)) / 100.0
}

/// A `/proc/self/status` field in MiB (VmHWM: peak resident, VmRSS: resident now).
fn status_mib(key: &str) -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

fn main() -> anyhow::Result<()> {
    if std::env::args().nth(1).as_deref() == Some("--export-f32") {
        // The default model as an unquantized f32 safetensors directory.
        let dir = std::env::args().nth(2).expect("--export-f32 DIR");
        let m = load_model(&ModelSpec::default())?;
        wring_model::export::export_plain(&m, std::path::Path::new(&dir), Default::default())?;
        return Ok(());
    }
    let model = std::env::args().nth(1);
    let cpu_weights = std::env::args()
        .nth(2)
        .unwrap_or_else(|| "f32".into())
        .parse()?;
    let rss0 = status_mib("VmRSS:");
    let (t0, c0) = (Instant::now(), cpu_seconds());
    let m = load_model(&ModelSpec {
        model: model.clone(),
        ..Default::default()
    })?;
    let mut r = m.into_runner(&RunnerOptions {
        kv_cache_bytes: 32 << 20,
        max_model_len: 256,
        cpu_weights,
        ..Default::default()
    })?;
    let (load_s, load_cpu) = (t0.elapsed().as_secs_f64(), cpu_seconds() - c0);
    let (peak, steady) = (status_mib("VmHWM:"), status_mib("VmRSS:"));
    // Decode: a 32-token prompt, then 32 single-token steps; the prefill (timed
    // alone first) is subtracted.
    let prompt: Vec<u32> = (0..32).map(|i| 100 + i * 7).collect();
    let c0 = cpu_seconds();
    greedy_continuation(r.as_mut(), &prompt, 1, &[])?;
    let prefill_cpu = cpu_seconds() - c0;
    let c1 = cpu_seconds();
    greedy_continuation(r.as_mut(), &prompt, 33, &[])?;
    let decode_cpu_ms = (cpu_seconds() - c1 - prefill_cpu) / 32.0 * 1e3;
    println!(
        "{}",
        serde_json::json!({
            "model": model.unwrap_or_else(|| "default (Q4_1 GGUF)".into()),
            "cpu_weights": std::env::args().nth(2).unwrap_or_else(|| "f32".into()),
            "load_wall_s": load_s,
            "load_cpu_s": load_cpu,
            "rss_before_mib": rss0,
            "peak_rss_mib": peak,
            "rss_after_load_mib": steady,
            "decode_cpu_ms_per_token": decode_cpu_ms,
        })
    );
    Ok(())
}
