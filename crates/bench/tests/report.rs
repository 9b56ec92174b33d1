//! Report, charts, decision tree and best-K profile from result files written here with known
//! numbers, so every derived figure can be checked by hand.

use wring_bench::report::{load_results, write_report, Table, BEST_K_PAD};
use wring_bench::result::{BenchFile, BenchMeta, CorpusResult, RunMetrics, FORMAT_VERSION};
use wring_bench::server_probe::SpecStats;
use wring_bench::tune::best_k_profile;

fn file(label: &str, k: Option<u32>, cells: &[(&str, f64)]) -> BenchFile {
    let results = cells
        .iter()
        .map(|&(corpus, tok_s)| {
            let run = RunMetrics {
                completed: 10,
                output_throughput: tok_s,
                spec: k.map(|_| SpecStats {
                    spec_acceptance_rate: Some(0.5),
                    spec_mean_acceptance_length: Some(2.25),
                    ..Default::default()
                }),
                cache_state: "reset".into(),
                ..Default::default()
            };
            CorpusResult {
                corpus: corpus.into(),
                corpus_label: corpus.into(),
                corpus_records: 10,
                corpus_truncated: false,
                replay_source: None,
                median_run: run.clone(),
                output_throughput_median: tok_s,
                output_throughput_mad: tok_s * 0.01,
                spread: 0.01,
                spread_exceeded: false,
                failed_all_runs: if label == "ngram" { 2 } else { 0 },
                runs: vec![run],
                rejected_runs: vec![],
            }
        })
        .collect();
    BenchFile {
        wring_bench: FORMAT_VERSION,
        meta: BenchMeta {
            date: "2026-11-29T00:00:00Z".into(),
            label: label.into(),
            k,
            model_id: "smollm2".into(),
            device: "cpu".into(),
            cache_policy: "reset before each run".into(),
            max_concurrency: 8,
            max_tokens: 256,
            num_prompts: 10,
            runs: 3,
            max_spread: 0.05,
            ..Default::default()
        },
        results,
    }
}

fn sweep() -> Vec<BenchFile> {
    vec![
        file(
            "nospec",
            None,
            &[("sharegpt", 100.0), ("humaneval", 100.0), ("lmsys", 100.0)],
        ),
        file(
            "ngram",
            Some(4),
            &[("sharegpt", 90.0), ("humaneval", 110.0), ("lmsys", 95.0)],
        ),
        file(
            "suffix-k4",
            Some(4),
            &[("sharegpt", 120.0), ("humaneval", 150.0), ("lmsys", 110.0)],
        ),
        file(
            "suffix-k8",
            Some(8),
            &[("sharegpt", 130.0), ("humaneval", 140.0), ("lmsys", 105.0)],
        ),
        file(
            "suffix-k8-nopad",
            Some(8),
            &[("sharegpt", 125.0), ("humaneval", 135.0), ("lmsys", 100.0)],
        ),
        file(
            "dynamic",
            None,
            &[("sharegpt", 110.0), ("humaneval", 120.0), ("lmsys", 100.0)],
        ),
    ]
}

#[test]
fn best_k_profile_picks_row_maxima_and_geomean_default() {
    let profile = best_k_profile(&sweep(), "smollm2").unwrap();
    assert_eq!(profile.workloads["sharegpt"], 8);
    assert_eq!(profile.workloads["humaneval"], 4);
    assert_eq!(profile.workloads["lmsys"], 4);
    // geomean K4 = (120*150*110)^(1/3) = 125.6; K8 = (130*140*105)^(1/3) = 124.3
    assert_eq!(profile.default, 4);
    let json = serde_json::to_value(&profile).unwrap();
    assert_eq!(json["default"], 4);
    assert_eq!(json["workloads"]["sharegpt"], 8);
    assert!(
        best_k_profile(&sweep()[..2], "m").is_none(),
        "no suffix configs, no profile"
    );
}

#[test]
fn table_geomeans_and_best_k_pad() {
    let files = sweep();
    let refs: Vec<&BenchFile> = files.iter().collect();
    let t = Table::build("smollm2", &refs);
    assert_eq!(t.corpora, vec!["sharegpt", "humaneval", "lmsys"]);
    assert_eq!(t.configs.last().unwrap(), BEST_K_PAD);
    let best = t.get("sharegpt", BEST_K_PAD).unwrap();
    assert_eq!((best.tok_s, best.k), (130.0, Some(8)));
    // bestKpad = 130, 150, 110 vs nospec 100s -> geomean ratio (130*150*110)^(1/3)/100
    let (r, n) = t.relative(BEST_K_PAD, "nospec").unwrap();
    assert_eq!(n, 3);
    assert!((r - (130.0f64 * 150.0 * 110.0).powf(1.0 / 3.0) / 100.0).abs() < 1e-9);
    assert_eq!(t.ranking("humaneval")[0].0, "suffix-k4");
    assert_eq!(t.total_failed(), 6);
}

#[test]
fn report_markdown_charts_and_decision_tree() {
    let dir = tempfile::tempdir().unwrap();
    for f in sweep() {
        f.write(&dir.path().join(format!("{}.json", f.meta.label)))
            .unwrap();
    }
    std::fs::write(dir.path().join("k_profile.json"), "{\"default\": 4}").unwrap();
    let files = load_results(&[dir.path().to_path_buf()]).unwrap();
    assert_eq!(files.len(), 6, "non-result JSON is skipped");
    let out = dir.path().join("report");
    let md_path = write_report(&files, &out, "nospec").unwrap();
    let md = std::fs::read_to_string(md_path).unwrap();
    assert!(md.contains("| machine |"));
    assert!(md.contains("| cache policy | reset before each run |"));
    assert!(md.contains("| cache state observed | reset |"), "{md}");
    assert!(md.contains("**150.0**"), "winner in bold:\n{md}");
    assert!(md.contains("130.0 (K8)"));
    assert!(
        md.contains("acc 50 %, 2.25 tok/step"),
        "tokens a verify step under each cell:\n{md}"
    );
    assert!(md.contains("lmsys (Arena-Hard substitute)"));
    assert!(md.contains("Speculate at all?"));
    assert!(md.contains("→ yes"));
    assert!(md.contains("Which drafter?"));
    assert!(md.contains("Pad drafts to K?"));
    assert!(md.contains("One K or one per workload?"));
    assert!(md.contains("runtime controller `dynamic`"));
    assert!(
        md.contains("2 failed requests"),
        "failures are shown:\n{md}"
    );
    for chart in ["throughput_by_corpus.svg", "throughput_vs_k.svg"] {
        let svg = std::fs::read_to_string(out.join(chart)).unwrap();
        assert!(svg.starts_with("<svg") || svg.contains("<svg"), "{chart}");
        assert!(svg.contains("sharegpt"), "{chart} has labels");
        assert!(md.contains(chart));
    }
}

#[test]
fn decision_tree_says_no_speculation_when_it_loses() {
    let files = [
        file("nospec", None, &[("sharegpt", 100.0), ("mbpp", 100.0)]),
        file("suffix-k4", Some(4), &[("sharegpt", 80.0), ("mbpp", 90.0)]),
    ];
    let refs: Vec<&BenchFile> = files.iter().collect();
    let t = Table::build("m", &refs);
    let tree = wring_bench::report::decision::decision_tree(&t, "nospec");
    assert!(tree.contains("**deploy `nospec`**"), "{tree}");
    assert!(
        tree.contains("-15.1 %") || tree.contains("−15.1 %"),
        "{tree}"
    );
}

#[test]
fn report_on_no_results_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    assert!(load_results(&[dir.path().to_path_buf()]).is_err());
    assert!(load_results(&[dir.path().join("missing.json")]).is_err());
}

/// `file` for a configuration in a weight format, with the gate verdict tune records.
fn weighted(
    label: &str,
    k: Option<u32>,
    cells: &[(&str, f64)],
    verdict: Option<&str>,
) -> BenchFile {
    let mut f = file(label, k, cells);
    f.meta.gate_verdict = verdict.map(String::from);
    f
}

#[test]
fn weight_formats_are_an_axis_and_only_gated_formats_are_recommended() {
    let c = |v: f64| [("sharegpt", v), ("humaneval", v * 1.2)];
    let files = vec![
        weighted("f32+nospec", None, &c(100.0), None),
        weighted("f32+suffix-k4", Some(4), &c(150.0), None),
        weighted(
            "q8+nospec",
            None,
            &c(130.0),
            Some("PASS: max |Δ logprob| 0.39"),
        ),
        weighted(
            "q8+suffix-k4",
            Some(4),
            &c(190.0),
            Some("PASS: max |Δ logprob| 0.39"),
        ),
        weighted(
            "q8+suffix-k8",
            Some(8),
            &c(180.0),
            Some("PASS: max |Δ logprob| 0.39"),
        ),
        weighted(
            "q4+suffix-k4",
            Some(4),
            &c(250.0),
            Some("FAIL: loops introduced 1"),
        ),
        weighted("fp8+suffix-k4", Some(4), &c(300.0), None),
    ];
    let refs: Vec<&BenchFile> = files.iter().collect();
    let t = Table::build("smollm2", &refs);
    // Each format gets its own best-K column.
    assert!(
        t.configs.contains(&"q8+bestKpad".to_string()),
        "{:?}",
        t.configs
    );
    assert!(t.configs.contains(&"f32+bestKpad".to_string()));
    let tree = wring_bench::report::decision::decision_tree(&t, "nospec");
    eprintln!("{tree}");
    assert!(tree.contains("vs `f32+nospec`"), "{tree}");
    assert!(
        tree.contains("`q8`: `q8+suffix-k4` +90.0 % — gate: PASS"),
        "{tree}"
    );
    assert!(tree.contains("`q4` is faster (`q4+suffix-k4` +150.0 %) but is not recommended: its gate verdict for this model is FAIL"), "{tree}");
    assert!(tree.contains("`fp8` is faster"), "{tree}");
    assert!(tree.contains("no gate verdict for this model"), "{tree}");
    assert!(tree.contains("→ **`--cpu-weights q8`**"), "{tree}");
    // The rest of the tree runs within q8: K=4 beats K=8 there.
    assert!(tree.contains("Within `q8` weights"), "{tree}");
    assert!(tree.contains("`suffix-k4`"), "{tree}");
    assert!(!tree.contains("deploy `q4"), "{tree}");

    let out = tempfile::tempdir().unwrap();
    let md = std::fs::read_to_string(write_report(&files, out.path(), "nospec").unwrap()).unwrap();
    assert!(md.contains("### Weight formats"), "{md}");
    assert!(md.contains("| q4 | q4+suffix-k4 |"), "{md}");
    assert!(md.contains("FAIL (loops introduced 1)"), "{md}");
    assert!(
        md.contains("| fp8 | fp8+suffix-k4 |") && md.contains("no gate verdict"),
        "{md}"
    );
    assert!(
        md.contains("| f32 | f32+suffix-k4 |") || md.contains("| f32 | f32+bestKpad |"),
        "{md}"
    );
    assert!(md.contains("reference (not gated)"), "{md}");

    // When nothing is allowed but a failed format, nothing is recommended.
    let only_bad = [weighted("q4+nospec", None, &c(100.0), Some("FAIL: x"))];
    let refs: Vec<&BenchFile> = only_bad.iter().collect();
    let tree = wring_bench::report::decision::decision_tree(&Table::build("m", &refs), "nospec");
    assert!(tree.contains("no format can be recommended"), "{tree}");
}
