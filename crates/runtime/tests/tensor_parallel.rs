//! Tensor parallelism on CPU ranks (threads + host all-reduce) against the unsharded
//! model: the real SmolLM2-135M (f32) at TP=2 (KV groups split 1 + 2) and TP=3, dummy
//! Llama-3.1-8B-shaped weights at TP=2/4, and the 135M shape at TP=4 (KV heads
//! replicated). Logits within 1e-4 relative, greedy ids identical. Then the failure
//! paths: a rank that fails or panics mid-step, or never answers, ends the step with an
//! error (no hang) and stops the group.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wring_backend::cpu::host_comm::HostComm;
use wring_backend::cpu::CpuBackend;
use wring_model::shard::{RankShard, ShardPlan};
use wring_model::{
    greedy_continuation, load_model, LoadFormat, ModelRunner, ModelSpec, RunnerOptions, SeqInput,
    ShardRunner, StepInput,
};
use wring_runtime::tensor_parallel::{RankBuilder, TensorParallelRunner};

fn opts(tp: usize) -> RunnerOptions {
    RunnerOptions {
        kv_cache_bytes: 64 << 20,
        max_model_len: 512,
        tensor_parallel_size: tp,
        ..Default::default()
    }
}

fn spec(shape: Option<&str>) -> ModelSpec {
    match shape {
        None => ModelSpec::default(),
        Some(s) => ModelSpec {
            load_format: LoadFormat::Dummy,
            model_shape: Some(s.into()),
            ..Default::default()
        },
    }
}

fn open(shape: Option<&str>, tp: usize) -> Box<dyn ModelRunner> {
    let m = load_model(&spec(shape)).expect("model loads (run `wring pull` for the default)");
    wring_runtime::open_runner(m, &opts(tp)).expect("runner opens")
}

/// Three sequences: a prefill step of all three, decode steps, then a verify-shaped step
/// (5 tokens each, logits for every one). Every step asks for logits.
fn steps() -> Vec<StepInput> {
    let prompts: [&[u32]; 3] = [
        &[1, 504, 3458, 282, 4273, 30, 198, 1205],
        &[1, 12, 940, 2038, 27, 99, 3000],
        &[1, 7700, 17, 8000, 12000, 40000, 5, 6, 7, 8, 9],
    ];
    let tables: Vec<Vec<u32>> = (0..3u32).map(|i| (i * 4..i * 4 + 4).collect()).collect();
    let step = |news: &[Vec<u32>], ctx: &[usize]| {
        let mut s = StepInput::default();
        for (i, toks) in news.iter().enumerate() {
            let start = s.tokens.len();
            s.seqs.push(SeqInput {
                query_start: start,
                query_len: toks.len(),
                context_len: ctx[i] + toks.len(),
                block_table: tables[i].clone(),
                prompt_len: 0,
            });
            s.tokens.extend_from_slice(toks);
            s.positions
                .extend((ctx[i]..ctx[i] + toks.len()).map(|p| p as u32));
            s.logit_rows.extend(start..start + toks.len());
        }
        s
    };
    let mut out = vec![step(
        &prompts.iter().map(|p| p.to_vec()).collect::<Vec<_>>(),
        &[0, 0, 0],
    )];
    let mut ctx: Vec<usize> = prompts.iter().map(|p| p.len()).collect();
    for d in 0..3u32 {
        let news: Vec<Vec<u32>> = (0..3u32).map(|i| vec![100 + 31 * i + d]).collect();
        out.push(step(&news, &ctx));
        ctx.iter_mut().for_each(|c| *c += 1);
    }
    let news: Vec<Vec<u32>> = (0..3u32)
        .map(|i| (0..5).map(|j| 2000 + 97 * i + j).collect())
        .collect();
    out.push(step(&news, &ctx));
    out
}

/// Worst ‖Δ‖/‖ref‖ over the rows of every step, and whether every row's argmax agrees
/// (through `forward_greedy` on the sharded side: the cross-rank (max, id) combine).
fn compare(reference: &mut dyn ModelRunner, sharded: &mut dyn ModelRunner) -> f64 {
    let mut worst = 0f64;
    for s in steps() {
        let (a, b) = (reference.forward(&s).unwrap(), sharded.forward(&s).unwrap());
        assert_eq!((a.rows, a.vocab), (b.rows, b.vocab));
        for r in 0..a.rows {
            let (x, y) = (a.row(r), b.row(r));
            let num: f64 = x.iter().zip(y).map(|(p, q)| ((p - q) as f64).powi(2)).sum();
            let den: f64 = x.iter().map(|p| (*p as f64).powi(2)).sum();
            worst = worst.max((num / den).sqrt());
        }
    }
    // Greedy ids of the same steps (fresh KV: the steps rewrite the same slots).
    for s in steps() {
        let a = reference.forward_greedy(&s).unwrap().unwrap();
        let b = sharded.forward_greedy(&s).unwrap().unwrap();
        assert_eq!(a, b, "greedy ids differ");
    }
    worst
}

#[test]
fn real_135m_at_tp2_and_tp3_matches_one_rank() {
    let mut one = open(None, 1);
    for tp in [2, 3] {
        let mut split = open(None, tp);
        assert!(split.device_name().contains(&format!("×{tp}")));
        let worst = compare(&mut *one, &mut *split);
        eprintln!("135M TP={tp}: worst relative logit error {worst:.2e}");
        assert!(worst < 1e-4, "TP={tp}: relative error {worst:.2e}");
        // Greedy continuations identical.
        let prompt = [1, 504, 3458, 282, 4273, 30, 198, 1205, 314, 2665];
        let a = greedy_continuation(&mut *one, &prompt, 24, &[]).unwrap();
        let b = greedy_continuation(&mut *split, &prompt, 24, &[]).unwrap();
        assert_eq!(a, b, "TP={tp} greedy continuation");
    }
}

/// The default model exported as bf16 safetensors split over two files with an index
/// (a sharded checkpoint): each rank reads its rows and columns from both files.
#[test]
fn sharded_bf16_safetensors_checkpoint_at_tp2_matches_one_rank() {
    use wring_model::export::{export_plain, DenseDtype};
    let dir = tempfile::tempdir().unwrap();
    let src = load_model(&ModelSpec::default()).expect("default model loads");
    export_plain(&src, dir.path(), DenseDtype::Bf16).unwrap();
    drop(src);
    let single = dir.path().join("model.safetensors");
    let bytes = std::fs::read(&single).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut names: Vec<String> = st.names().into_iter().cloned().collect();
    names.sort();
    let mut weight_map = serde_json::Map::new();
    for (i, part) in names.chunks(names.len().div_ceil(2)).enumerate() {
        let file = format!("model-{:05}-of-00002.safetensors", i + 1);
        let views: Vec<(String, safetensors::tensor::TensorView)> = part
            .iter()
            .map(|n| (n.clone(), st.tensor(n).unwrap()))
            .collect();
        safetensors::serialize_to_file(views, &None, &dir.path().join(&file)).unwrap();
        for n in part {
            weight_map.insert(n.clone(), file.clone().into());
        }
    }
    std::fs::remove_file(&single).unwrap();
    let index = serde_json::json!({ "metadata": {}, "weight_map": weight_map });
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        index.to_string(),
    )
    .unwrap();
    let open_dir = |tp| {
        let m = load_model(&ModelSpec {
            model: Some(dir.path().to_string_lossy().into_owned()),
            ..Default::default()
        })
        .unwrap();
        wring_runtime::open_runner(m, &opts(tp)).unwrap()
    };
    let (mut one, mut two) = (open_dir(1), open_dir(2));
    let worst = compare(&mut *one, &mut *two);
    eprintln!("sharded bf16 safetensors TP=2: worst relative logit error {worst:.2e}");
    assert!(worst < 1e-4, "relative error {worst:.2e}");
}

#[test]
fn dummy_8b_shape_at_tp2_and_tp4_and_replicated_kv_match_one_rank() {
    for (shape, tps) in [
        ("llama-3.1-8b-tiny", &[2, 4][..]),
        ("smollm2-135m", &[4][..]),
    ] {
        let mut one = open(Some(shape), 1);
        for &tp in tps {
            let mut split = open(Some(shape), tp);
            let worst = compare(&mut *one, &mut *split);
            eprintln!("dummy {shape} TP={tp}: worst relative logit error {worst:.2e}");
            assert!(worst < 1e-4, "{shape} TP={tp}: relative error {worst:.2e}");
        }
    }
}

#[test]
fn impossible_splits_are_errors() {
    let m = load_model(&spec(Some("smollm2-135m"))).unwrap();
    let e = wring_runtime::open_runner(m, &opts(10))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("too large for 9 attention heads"), "{e}");
    // An id past the vocabulary is an error, not a zero embedding on every rank.
    let mut r = open(Some("smollm2-135m"), 2);
    let mut s = steps().remove(1);
    s.tokens[0] = 60_000;
    let e = r.forward_greedy(&s).unwrap_err().to_string();
    assert!(e.contains("outside the vocabulary of 49152"), "{e}");
    // The group still works.
    r.forward_greedy(&steps()[0]).unwrap();
}

/// A real rank wrapped to fail (or panic, or stall) at one step, before it runs it: the
/// other ranks are then waiting for it in their first all-reduce.
struct Faulty {
    inner: Box<dyn ShardRunner>,
    fail_at: usize,
    how: Fault,
    steps: usize,
}

#[derive(Clone, Copy)]
enum Fault {
    Error,
    Panic,
    Stall,
}

impl Faulty {
    fn tick(&mut self) -> anyhow::Result<()> {
        self.steps += 1;
        if self.steps == self.fail_at {
            match self.how {
                Fault::Error => anyhow::bail!("injected failure"),
                Fault::Panic => panic!("injected panic"),
                Fault::Stall => std::thread::sleep(Duration::from_secs(12)),
            }
        }
        Ok(())
    }
}

impl ShardRunner for Faulty {
    fn shard(&self) -> &RankShard {
        self.inner.shard()
    }
    fn forward_local_max(&mut self, s: &StepInput) -> anyhow::Result<Vec<(f32, u32)>> {
        self.tick()?;
        self.inner.forward_local_max(s)
    }
    fn forward_local_logits(&mut self, s: &StepInput) -> anyhow::Result<Vec<f32>> {
        self.tick()?;
        self.inner.forward_local_logits(s)
    }
    fn block_size(&self) -> usize {
        self.inner.block_size()
    }
    fn num_blocks(&self) -> usize {
        self.inner.num_blocks()
    }
    fn device_name(&self) -> String {
        self.inner.device_name()
    }
}

/// Two CPU ranks of the dummy 135M shape, rank 1 faulty at its second step.
fn faulty_group(how: Fault, timeout: Duration) -> TensorParallelRunner {
    let m = load_model(&spec(Some("smollm2-135m"))).unwrap();
    let shards = ShardPlan::all(&m.config, 2).unwrap();
    let shared = Arc::new(m.into_weights());
    let (comms, abort) = HostComm::group(2, timeout);
    let builders: Vec<RankBuilder> = comms
        .into_iter()
        .zip(shards)
        .map(|(comm, shard)| {
            let shared = shared.clone();
            Box::new(move || -> anyhow::Result<Box<dyn ShardRunner>> {
                let rank = shard.rank;
                let backend = CpuBackend::with_comm(Default::default(), comm);
                let inner: Box<dyn ShardRunner> =
                    Box::new(shared.rank_runner(backend, shard, 64, 16)?);
                Ok(match rank {
                    1 => Box::new(Faulty {
                        inner,
                        fail_at: 2,
                        how,
                        steps: 0,
                    }),
                    _ => inner,
                })
            }) as RankBuilder
        })
        .collect();
    TensorParallelRunner::start(
        builders,
        Arc::new(move |why: &str| abort.abort(why)),
        timeout,
    )
    .unwrap()
}

#[test]
fn a_failing_or_panicking_rank_stops_the_group_without_hanging() {
    for (how, needle) in [
        (Fault::Error, "injected failure"),
        (Fault::Panic, "injected panic"),
    ] {
        let mut r = faulty_group(how, Duration::from_secs(60));
        let s = &steps()[0];
        r.forward_greedy(s).expect("the first step runs");
        let t0 = Instant::now();
        let e = format!("{:#}", r.forward_greedy(s).unwrap_err());
        assert!(e.contains(needle), "{e}");
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "took {:?}",
            t0.elapsed()
        );
        // The group stays stopped, with the first failure as the reason.
        let e = r.forward(s).unwrap_err().to_string();
        assert!(e.contains("stopped") && e.contains(needle), "{e}");
    }
}

#[test]
fn a_rank_that_never_answers_times_out() {
    // Long enough for a healthy step on a busy CI machine, far shorter than the stall.
    let mut r = faulty_group(Fault::Stall, Duration::from_secs(4));
    let s = &steps()[0];
    r.forward_greedy(s).expect("the first step runs");
    let t0 = Instant::now();
    let e = format!("{:#}", r.forward_greedy(s).unwrap_err());
    assert!(e.contains("waited") || e.contains("did not finish"), "{e}");
    assert!(
        t0.elapsed() < Duration::from_secs(11),
        "took {:?}",
        t0.elapsed()
    );
}
