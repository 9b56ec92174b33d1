//! `wring quantize` on the default model: every scheme writes a directory that loads
//! back byte-exactly and still answers; GPTQ lowers a layer's output error against
//! round-to-nearest on calibration activations; corrupt tensors are named in errors.

use std::path::Path;
use wring_backend::quant::{QuantMatrix, Scheme};
use wring_model::export::{
    export_hf_dir, read_tensor, tensor_specs, ExportOptions, OutTensor, TensorRole,
};
use wring_model::weights::Weight;
use wring_model::{
    greedy_continuation, load_model, ChatMessage, LoadedModel, ModelSpec, RunnerOptions,
};
use wring_quant::{calibrate, quantize_model, quantize_weight, CalibOptions, QuantizeOptions};

fn calib_opts(prompts: usize, layers: Option<Vec<usize>>) -> CalibOptions {
    CalibOptions {
        corpus: "wildchat,mbpp".into(),
        // The corpus fixtures (tests/data/corpora, written by scripts/reference/fixtures.py).
        corpus_dir: std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/data/corpora"),
        prompts,
        max_tokens: 128,
        layers,
        progress: false,
    }
}

fn opts(scheme: Scheme) -> QuantizeOptions {
    QuantizeOptions {
        scheme,
        group_size: None,
        awq: false,
        gptq: false,
        damp: 0.01,
        calib: calib_opts(8, None),
        progress: false,
    }
}

fn load(dir: &Path) -> LoadedModel {
    load_model(&ModelSpec {
        model: Some(dir.to_string_lossy().into_owned()),
        ..Default::default()
    })
    .unwrap()
}

/// Greedy reply to a chat question.
fn answer(m: LoadedModel, question: &str, n: usize) -> String {
    let tok = m.tokenizer.clone();
    let text = m
        .chat_template
        .as_ref()
        .unwrap()
        .render(&[ChatMessage::new("user", question)], true)
        .unwrap();
    let ids = tok.encode(&text).unwrap();
    let mut r = m
        .into_runner(&RunnerOptions {
            kv_cache_bytes: 32 << 20,
            max_model_len: 128,
            ..Default::default()
        })
        .unwrap();
    let out = greedy_continuation(r.as_mut(), &ids, n, &[2]).unwrap();
    tok.decode(&out, true).unwrap()
}

#[test]
fn every_scheme_round_trips_byte_exactly_and_answers() {
    let src = load_model(&ModelSpec::default()).unwrap();
    let specs = tensor_specs(&src.config, src.weight_source());
    // Spot-check tensors of different shapes (q: 576 inputs; down: 1536; k: 192 rows).
    let check: Vec<_> = specs
        .iter()
        .filter(|s| {
            [
                "blk.0.attn_q.weight",
                "blk.0.attn_k.weight",
                "blk.29.ffn_down.weight",
            ]
            .contains(&s.canonical.as_str())
        })
        .collect();
    assert_eq!(check.len(), 3);
    for scheme in Scheme::ALL {
        let dir = tempfile::tempdir().unwrap();
        let rep = quantize_model(&src, dir.path(), &opts(scheme)).unwrap();
        assert_eq!(rep.tensors.len(), 30 * 7);
        let back = load(dir.path());
        for spec in &check {
            let (rows, cols) = (spec.shape[0], spec.shape[1]);
            let want = QuantMatrix::quantize_rtn(
                scheme,
                rows,
                cols,
                &read_tensor(&src, spec).unwrap(),
                None,
                None,
            )
            .unwrap();
            match back
                .weight_source()
                .weight(&spec.canonical, rows, cols)
                .unwrap()
            {
                Weight::Quant(got) => {
                    assert_eq!(got, want, "{scheme} {}", spec.canonical);
                    assert_eq!(got.to_parts(), want.to_parts());
                }
                Weight::Dense(_) => panic!("{scheme}: {} loaded dense", spec.canonical),
            }
        }
        // Non-linear tensors are stored exactly.
        let norm = specs
            .iter()
            .find(|s| s.canonical == "blk.3.ffn_norm.weight")
            .unwrap();
        assert_eq!(
            read_tensor(&back, norm).unwrap(),
            read_tensor(&src, norm).unwrap()
        );
        let reply = answer(back, "What is the capital of France?", 12);
        eprintln!("{scheme}: {reply:?}");
        // Every scheme keeps the answer on this model (int4 here is plain round-to-nearest).
        assert!(reply.contains("Paris"), "{scheme}: {reply:?}");
    }
}

#[test]
fn gptq_and_awq_lower_the_output_error_of_round_to_nearest() {
    let src = load_model(&ModelSpec::default()).unwrap();
    let layer = 2;
    let cal = calibrate(&src, &calib_opts(8, Some(vec![layer]))).unwrap();
    assert!(cal.tokens > 200, "{} calibration tokens", cal.tokens);
    let specs = tensor_specs(&src.config, src.weight_source());
    for part in ["attn_q.weight", "attn_output.weight", "ffn_down.weight"] {
        let name = format!("blk.{layer}.{part}");
        let spec = specs.iter().find(|s| s.canonical == name).unwrap();
        assert_eq!(spec.role, TensorRole::Linear);
        let (rows, cols) = (spec.shape[0], spec.shape[1]);
        let w = read_tensor(&src, spec).unwrap();
        let st = cal.for_weight(&name).expect("recorded");
        assert_eq!(st.cols, cols);
        let run = |awq, gptq| {
            let o = QuantizeOptions {
                awq,
                gptq,
                ..opts(Scheme::Int4)
            };
            quantize_weight(&name, &w, rows, cols, &o, Some(st))
                .unwrap()
                .1
        };
        let g = run(false, true);
        let (rtn, gptq) = (g.err_rtn.unwrap(), g.err_final.unwrap());
        eprintln!(
            "{name}: RTN {rtn:.4e}, GPTQ {gptq:.4e} ({:.3}x)",
            gptq / rtn
        );
        assert!(gptq < 0.9 * rtn, "{name}: GPTQ {gptq} vs RTN {rtn}");
        let a = run(true, false);
        assert_eq!(a.err_rtn.unwrap(), rtn);
        assert!(
            a.err_final.unwrap() <= rtn,
            "{name}: AWQ {:?} vs RTN {rtn}",
            a.err_final
        );
        let both = run(true, true);
        eprintln!(
            "{name}: AWQ {:.4e} (alpha {:?}), AWQ+GPTQ {:.4e}",
            a.err_final.unwrap(),
            a.awq_alpha,
            both.err_final.unwrap()
        );
        assert!(both.err_final.unwrap() < rtn);
    }
}

#[test]
fn a_corrupt_quantized_tensor_is_an_error_naming_it() {
    let src = load_model(&ModelSpec::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let o = opts(Scheme::Int8);
    let export = ExportOptions {
        quantization_config: Some(wring_quant::quantization_config(&o, None)),
        torch_dtype: None,
    };
    export_hf_dir(&src, dir.path(), &export, |spec, data| {
        if spec.role != TensorRole::Linear {
            return Ok(vec![wring_model::export::dense_tensor(
                spec,
                &data,
                Default::default(),
            )]);
        }
        let (rows, cols) = (spec.shape[0], spec.shape[1]);
        let m = QuantMatrix::quantize_rtn(Scheme::Int8, rows, cols, &data, None, None)?;
        let mut t = wring_quant::quant_tensors(&spec.hf, &m);
        if spec.canonical == "blk.7.ffn_up.weight" {
            // One scale short.
            let s: &mut OutTensor = t.iter_mut().find(|t| t.name.ends_with(".scales")).unwrap();
            s.shape[0] -= 1;
            s.data.truncate(s.data.len() - 4);
        }
        Ok(t)
    })
    .unwrap();
    let e = match load(dir.path()).into_runner(&RunnerOptions {
        kv_cache_bytes: 16 << 20,
        max_model_len: 64,
        ..Default::default()
    }) {
        Ok(_) => panic!("a corrupt tensor loaded"),
        Err(e) => format!("{e:#}"),
    };
    assert!(e.contains("model.layers.7.mlp.up_proj.scales"), "{e}");
    // A scheme the config does not match is refused too.
    let cfg_path = dir.path().join("config.json");
    let cfg = std::fs::read_to_string(&cfg_path)
        .unwrap()
        .replace("\"int8\"", "\"fp8\"");
    std::fs::write(&cfg_path, cfg).unwrap();
    let e = match load(dir.path()).into_runner(&RunnerOptions {
        kv_cache_bytes: 16 << 20,
        max_model_len: 64,
        ..Default::default()
    }) {
        Ok(_) => panic!("a mismatched scheme loaded"),
        Err(e) => format!("{e:#}"),
    };
    assert!(
        e.contains("model.layers.0.self_attn.q_proj.qweight") && e.contains("dtype"),
        "{e}"
    );
}
