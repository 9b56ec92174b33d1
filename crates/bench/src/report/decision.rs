//! The decision tree: which configuration to deploy for which workload, derived from the table
//! with the measured margin behind every branch. A margin smaller than the runs' spread is called
//! noise and does not decide a branch.

use std::fmt::Write;

use crate::configs::{split_weights, ServeConfig, GPU_WEIGHTS, REFERENCE_WEIGHTS};

use super::table::{is_best_k, GateStanding, Table, BEST_K_PAD};

/// Relative change as a signed percentage.
pub fn pct(ratio: f64) -> String {
    format!("{:+.1} %", (ratio - 1.0) * 100.0)
}

/// Whether `ratio` departs from 1 by more than the runs' noise of both configurations.
fn beyond_noise(table: &Table, ratio: f64, a: &str, b: &str) -> bool {
    let noise = table
        .typical_spread(a)
        .max(table.typical_spread(b))
        .max(0.005);
    (ratio - 1.0).abs() > noise
}

fn noise_note(table: &Table, ratio: f64, a: &str, b: &str) -> &'static str {
    if beyond_noise(table, ratio, a, b) {
        ""
    } else {
        " (within run-to-run noise)"
    }
}

fn is_suffix_family(config: &str) -> bool {
    config.starts_with("suffix-k")
        || config.starts_with("dynamic")
        || config.starts_with("adaptive")
        || config == BEST_K_PAD
}

/// The configuration weight formats are compared against: `baseline` when measured, else
/// `baseline` in a reference format (`bf16+nospec`, `f32+nospec`), else the first measured.
pub fn weights_baseline(table: &Table, baseline: &str) -> String {
    if table.configs.iter().any(|c| c == baseline) {
        return baseline.to_string();
    }
    let base = split_weights(baseline).1;
    REFERENCE_WEIGHTS
        .iter()
        .map(|r| format!("{r}+{base}"))
        .find(|n| table.configs.contains(n))
        .or_else(|| table.measured_configs().next().cloned())
        .unwrap_or_else(|| baseline.to_string())
}

/// The fastest configuration of weight format `w` (its derived `bestKpad` included): (name,
/// geomean tok/s, geomean ratio vs `base` over their shared corpora).
pub fn fastest_of(
    table: &Table,
    w: Option<&str>,
    base: &str,
) -> Option<(String, f64, Option<f64>)> {
    table
        .configs
        .iter()
        .filter(|c| split_weights(c).0 == w)
        .filter_map(|c| {
            let (g, _) = table.geomean_of(c)?;
            Some((c.clone(), g, table.relative(c, base).map(|r| r.0)))
        })
        .max_by(|a, b| {
            a.2.unwrap_or(0.0)
                .total_cmp(&b.2.unwrap_or(0.0))
                .then(a.1.total_cmp(&b.1))
                // On a tie a measured configuration is named before the derived column.
                .then(is_best_k(&b.0).cmp(&is_best_k(&a.0)))
        })
}

/// The serve flag that selects weight format `w`.
fn weights_flag(w: Option<&str>) -> String {
    match w {
        None => "the server's default weights".into(),
        Some(w) if GPU_WEIGHTS.contains(&w) => format!("`--gpu-weights {w}`"),
        Some(w) => format!("`--cpu-weights {w}`"),
    }
}

/// With a weight-format axis: the format first (the fastest one the gate allows: a reference,
/// or PASS for this model), then the usual tree over that format's configurations.
fn weights_tree(table: &Table, baseline: &str) -> String {
    let base = weights_baseline(table, baseline);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "- **Which weights?** each format's fastest configuration vs `{base}`, with the gate's verdict for this model:"
    );
    let mut rows: Vec<(Option<String>, String, f64, GateStanding)> = vec![];
    for w in table.weight_formats() {
        let Some((best, _, rel)) = fastest_of(table, w.as_deref(), &base) else {
            continue;
        };
        let standing = table.standing(w.as_deref());
        let _ = writeln!(
            out,
            "  - `{}`: `{best}` {} — gate: {}",
            w.as_deref().unwrap_or("server default"),
            rel.map_or("–".into(), pct),
            standing.label()
        );
        rows.push((w, best, rel.unwrap_or(0.0), standing));
    }
    let Some(chosen) = rows
        .iter()
        .filter(|r| r.3.allowed())
        .max_by(|a, b| a.2.total_cmp(&b.2))
    else {
        let _ = writeln!(
            out,
            "  - → no format can be recommended: none is a reference format or passed the gate"
        );
        return out;
    };
    for (w, best, r, standing) in rows.iter().filter(|r| r.2 > chosen.2 && !r.3.allowed()) {
        let why = match standing {
            GateStanding::Fail(_) => "its gate verdict for this model is FAIL".to_string(),
            _ => "no gate verdict for this model (record one with `wring gate ... --save-verdict`)"
                .to_string(),
        };
        let _ = writeln!(
            out,
            "  - `{}` is faster (`{best}` {}) but is not recommended: {why}",
            w.as_deref().unwrap_or("server default"),
            pct(*r)
        );
    }
    let _ = writeln!(
        out,
        "  - → **{}** (`{}` {})",
        weights_flag(chosen.0.as_deref()),
        chosen.1,
        pct(chosen.2)
    );
    let _ = writeln!(
        out,
        "\nWithin {} weights:\n",
        chosen
            .0
            .as_deref()
            .map_or("the default".into(), |w| format!("`{w}`"))
    );
    let sub = table.for_weights(chosen.0.as_deref());
    out.push_str(&decision_tree(&sub, split_weights(baseline).1));
    out
}

/// Renders the tree as a nested markdown list.
pub fn decision_tree(table: &Table, baseline: &str) -> String {
    if table.has_weight_axis() {
        return weights_tree(table, baseline);
    }
    let mut out = String::new();
    let measured: Vec<&String> = table.measured_configs().collect();
    let baseline = if table.configs.iter().any(|c| c == baseline) {
        baseline.to_string()
    } else {
        let Some(first) = measured.first() else {
            return "No measurements.\n".into();
        };
        let _ = writeln!(
            out,
            "(baseline `{baseline}` was not measured; comparing against `{first}`)\n"
        );
        first.to_string()
    };
    let ratio = |c: &str| table.relative(c, &baseline).map(|(r, _)| r);
    let speculative: Vec<(&str, f64)> = table
        .configs
        .iter()
        .filter(|c| **c != baseline)
        .filter_map(|c| Some((c.as_str(), ratio(c)?)))
        .collect();
    let Some(&(best, best_ratio)) = speculative.iter().max_by(|a, b| a.1.total_cmp(&b.1)) else {
        let _ = writeln!(out, "- Only `{baseline}` was measured: deploy it.");
        return out;
    };
    let _ = writeln!(
        out,
        "- **Speculate at all?** best configuration `{best}` vs `{baseline}`: geomean {}{}",
        pct(best_ratio),
        noise_note(table, best_ratio, best, &baseline)
    );
    if best_ratio <= 1.0 || !beyond_noise(table, best_ratio, best, &baseline) {
        let _ = writeln!(out, "  - → **deploy `{baseline}`** for every workload, except where a row below says otherwise.");
        workload_leaves(&mut out, table, &baseline, "  ");
        return out;
    }
    let _ = writeln!(out, "  - → yes.");
    let mut indent = "  ".to_string();

    // Which drafter: suffix family vs n-gram.
    let suffix_best = speculative
        .iter()
        .filter(|(c, _)| is_suffix_family(c))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    let ngram = speculative.iter().find(|(c, _)| *c == "ngram");
    match (suffix_best, ngram) {
        (Some(&(s, sr)), Some(&(n, nr))) => {
            let _ = writeln!(
                out,
                "{indent}- **Which drafter?** suffix (`{s}` {}) vs n-gram (`{n}` {}): suffix/n-gram {}{}",
                pct(sr),
                pct(nr),
                pct(sr / nr),
                noise_note(table, sr / nr, s, n)
            );
            if nr > sr {
                let _ = writeln!(out, "{indent}  - → **deploy `ngram`**.");
                workload_leaves(&mut out, table, &baseline, &format!("{indent}  "));
                return out;
            }
            let _ = writeln!(out, "{indent}  - → suffix.");
            indent.push_str("  ");
        }
        (None, Some(_)) => {
            let _ = writeln!(
                out,
                "{indent}- **Which drafter?** only n-gram was measured → **deploy `ngram`**."
            );
            workload_leaves(&mut out, table, &baseline, &format!("{indent}  "));
            return out;
        }
        _ => {}
    }

    // Pad drafts to K?
    let pad_ratios: Vec<(u32, f64)> = table
        .measured_configs()
        .filter_map(|c| {
            let cfg = ServeConfig::parse(c).ok()?;
            if !(cfg.is_fixed_suffix() && cfg.padded) {
                return None;
            }
            let k = cfg.k?;
            let (r, _) = table.relative(c, &format!("suffix-k{k}-nopad"))?;
            Some((k, r))
        })
        .collect();
    if !pad_ratios.is_empty() {
        let overall = crate::stats::geomean(&pad_ratios.iter().map(|p| p.1).collect::<Vec<_>>())
            .unwrap_or(1.0);
        let per_k: Vec<String> = pad_ratios
            .iter()
            .map(|(k, r)| format!("K{k} {}", pct(*r)))
            .collect();
        let _ =
            writeln!(
            out,
            "{indent}- **Pad drafts to K?** padded vs unpadded at equal K: geomean {} ({}) → {}",
            pct(overall),
            per_k.join(", "),
            if overall >= 1.0 { "pad" } else { "do not pad (`--no-pad`)" }
        );
    }

    // How to choose K.
    let fixed: Vec<(&str, f64)> = speculative
        .iter()
        .copied()
        .filter(|(c, _)| ServeConfig::parse(c).is_ok_and(|s| s.is_fixed_suffix() && s.padded))
        .collect();
    let single = fixed.iter().max_by(|a, b| a.1.total_cmp(&b.1));
    let profile = speculative.iter().find(|(c, _)| *c == BEST_K_PAD);
    if let (Some(&(s, sr)), Some(&(_, pr))) = (single, profile) {
        let gain = pr / sr;
        let _ = writeln!(
            out,
            "{indent}- **One K or one per workload?** per-workload best K (`{BEST_K_PAD}`, {}) vs best single K (`{s}`, {}): {}{}",
            pct(pr),
            pct(sr),
            pct(gain),
            noise_note(table, gain, BEST_K_PAD, s)
        );
        let use_profile = beyond_noise(table, gain, BEST_K_PAD, s);
        let _ = writeln!(
            out,
            "{indent}  - → {}",
            if use_profile {
                "**`--k-policy profile:k_profile.json`** (the K per workload below)".to_string()
            } else {
                format!(
                    "**`--k-policy fixed:{}`** is enough",
                    s.trim_start_matches("suffix-k")
                )
            }
        );
        for controller in ["dynamic", "adaptive", "dynamic-nopad", "adaptive-nopad"] {
            if let Some(&(_, cr)) = speculative.iter().find(|(c, _)| *c == controller) {
                let vs = cr / pr;
                let verdict = if vs > 1.0 && beyond_noise(table, vs, controller, BEST_K_PAD) {
                    "beats the offline profile: prefer it"
                } else if beyond_noise(table, vs, controller, BEST_K_PAD) {
                    "loses to the offline profile"
                } else {
                    "ties the offline profile"
                };
                let _ = writeln!(out, "{indent}  - runtime controller `{controller}` vs `{BEST_K_PAD}`: {} → {verdict}", pct(vs));
            }
        }
    }
    workload_leaves(&mut out, table, &baseline, &indent);
    out
}

/// One leaf per corpus: its winner, the margin over the runner-up and the speedup over baseline.
fn workload_leaves(out: &mut String, table: &Table, baseline: &str, indent: &str) {
    let _ = writeln!(
        out,
        "{indent}- **Per workload** (winner, margin over runner-up, vs `{baseline}`):"
    );
    for corpus in &table.corpora {
        let ranking = table.ranking(corpus);
        let Some(&(winner, cell)) = ranking.first() else {
            continue;
        };
        let margin = ranking
            .get(1)
            .map(|(runner, r)| {
                let m = cell.tok_s / r.tok_s;
                format!(
                    "{} over `{runner}`{}",
                    pct(m),
                    noise_note(table, m, winner, runner)
                )
            })
            .unwrap_or_else(|| "no runner-up".into());
        let vs_base = table
            .get(corpus, baseline)
            .filter(|_| winner != baseline)
            .map(|b| format!(", {} vs `{baseline}`", pct(cell.tok_s / b.tok_s)))
            .unwrap_or_default();
        let best_k = table
            .get(corpus, BEST_K_PAD)
            .and_then(|c| c.k)
            .map(|k| format!("; best padded K = {k}"))
            .unwrap_or_default();
        let label = corpus
            .parse::<crate::corpus::Corpus>()
            .map_or(corpus.as_str(), |c| c.label());
        let _ = writeln!(
            out,
            "{indent}  - {label} → `{winner}` ({:.1} tok/s, {margin}{vs_base}{best_k})",
            cell.tok_s
        );
    }
}
