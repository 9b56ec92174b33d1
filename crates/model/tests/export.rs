//! Exporting the default model (Q4_1 GGUF, dequantised to f32) as a Hugging Face
//! directory and loading it back gives the same tokenizer, chat template, stop tokens
//! and greedy tokens.

use wring_model::export::{export_plain, DenseDtype};
use wring_model::{
    greedy_continuation, load_model, ChatMessage, ModelRunner, ModelSpec, RunnerOptions,
};

fn opts() -> RunnerOptions {
    RunnerOptions {
        kv_cache_bytes: 64 << 20,
        max_model_len: 256,
        ..Default::default()
    }
}

fn greedy(r: &mut dyn ModelRunner, prompt: &[u32], n: usize) -> Vec<u32> {
    greedy_continuation(r, prompt, n, &[]).expect("greedy continuation")
}

#[test]
fn plain_f32_export_reloads_with_identical_greedy_tokens() {
    let src = load_model(&ModelSpec::default()).expect("default model loads");
    let dir = tempfile::tempdir().unwrap();
    let summary = export_plain(&src, dir.path(), DenseDtype::F32).unwrap();
    assert!(summary.tensors > 30 * 9, "{summary:?}");
    for f in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
    ] {
        assert!(dir.path().join(f).is_file(), "{f} missing");
    }
    let back = load_model(&ModelSpec {
        model: Some(dir.path().to_string_lossy().into_owned()),
        ..Default::default()
    })
    .expect("exported directory loads");
    assert_eq!(back.config.num_layers, src.config.num_layers);
    assert!(!back.config.rope_interleaved);
    assert_eq!(back.eos_token_ids, src.eos_token_ids);
    assert_eq!(back.tokenizer.add_bos(), src.tokenizer.add_bos());
    let msgs = [ChatMessage::new(
        "user",
        "What is the capital of France? Answer in 1 word.",
    )];
    let text_a = src
        .chat_template
        .as_ref()
        .unwrap()
        .render(&msgs, true)
        .unwrap();
    let text_b = back
        .chat_template
        .as_ref()
        .unwrap()
        .render(&msgs, true)
        .unwrap();
    assert_eq!(text_a, text_b);
    let code = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number 12345.\"\"\"\n";
    let prompts = [text_a.as_str(), code];
    let (ta, tb) = (src.tokenizer.clone(), back.tokenizer.clone());
    let mut ra = src.into_runner(&opts()).unwrap();
    let mut rb = back.into_runner(&opts()).unwrap();
    for p in prompts {
        let ids = ta.encode(p).unwrap();
        assert_eq!(ids, tb.encode(p).unwrap(), "tokenizer differs on {p:?}");
        let a = greedy(&mut *ra, &ids, 24);
        let b = greedy(&mut *rb, &ids, 24);
        assert_eq!(
            a,
            b,
            "greedy tokens differ for {p:?}: {:?} vs {:?}",
            ta.decode(&a, false),
            tb.decode(&b, false)
        );
    }
}
