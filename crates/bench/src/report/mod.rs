//! `wring report`: markdown (setup, corpus × configuration table, geometric means, decision
//! tree, failures) plus SVG charts, rebuilt from raw result files alone.

pub mod charts;
pub mod decision;
pub mod table;

use std::collections::BTreeSet;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::corpus::Corpus;
use crate::result::BenchFile;

pub use table::{is_best_k, GateStanding, Table, BEST_K_PAD};

/// Reads result files; directories are searched (not recursively) for `*.json` files that are
/// wring bench results. Other JSON files in a directory (e.g. a profile) are skipped.
pub fn load_results(paths: &[PathBuf]) -> Result<Vec<BenchFile>> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
                .with_context(|| format!("reading {}", path.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "json"))
                .collect();
            entries.sort();
            for entry in entries {
                if let Ok(file) = BenchFile::read(&entry) {
                    files.push(file);
                }
            }
        } else {
            files.push(BenchFile::read(path)?);
        }
    }
    if files.is_empty() {
        bail!("no wring bench result files found in {paths:?}");
    }
    Ok(files)
}

/// Writes `report.md` and the charts into `out_dir`; returns the markdown path.
pub fn write_report(files: &[BenchFile], out_dir: &Path, baseline: &str) -> Result<PathBuf> {
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let models: BTreeSet<&str> = files.iter().map(|f| f.meta.model_id.as_str()).collect();
    let mut md = String::from("# wring benchmark report\n\n");
    for (i, model) in models.iter().enumerate() {
        let of_model: Vec<&BenchFile> =
            files.iter().filter(|f| f.meta.model_id == *model).collect();
        let table = Table::build(model, &of_model);
        let suffix = if models.len() > 1 {
            format!("_{i}")
        } else {
            String::new()
        };
        let bars = format!("throughput_by_corpus{suffix}.svg");
        let k_chart = format!("throughput_vs_k{suffix}.svg");
        charts::bars_by_corpus(&table, &out_dir.join(&bars))?;
        let has_k_chart = charts::throughput_vs_k(&table, &out_dir.join(&k_chart))?;
        md.push_str(&render_model_section(
            &table,
            baseline,
            &bars,
            has_k_chart.then_some(k_chart.as_str()),
        ));
    }
    let path = out_dir.join("report.md");
    std::fs::write(&path, &md).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// The markdown for one model.
pub fn render_model_section(
    table: &Table,
    baseline: &str,
    bars: &str,
    k_chart: Option<&str>,
) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "## Model `{}`\n", table.model);
    md.push_str(&setup_section(table));
    md.push_str(&throughput_table(table));
    md.push_str(&geomean_table(table, baseline));
    if table.has_weight_axis() {
        md.push_str(&weights_table(table, baseline));
    }
    let _ = writeln!(md, "### Charts\n\n![output tokens/s by corpus]({bars})\n");
    if let Some(k) = k_chart {
        let _ = writeln!(md, "![output tokens/s against K]({k})\n");
    }
    let _ = writeln!(md, "### Decision tree\n");
    md.push_str(&decision::decision_tree(table, baseline));
    md.push('\n');
    md.push_str(&failures_section(table));
    md
}

fn distinct<T: Ord + ToString>(values: impl Iterator<Item = T>) -> String {
    let set: BTreeSet<T> = values.collect();
    set.into_iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn setup_section(table: &Table) -> String {
    let metas = &table.metas;
    let mut md = String::from("### Setup\n\n| what | value |\n|---|---|\n");
    let rows = [
        (
            "machine",
            distinct(metas.iter().map(|m| m.machine.describe())),
        ),
        ("device", distinct(metas.iter().map(|m| m.device.clone()))),
        ("model", table.model.clone()),
        ("commit", distinct(metas.iter().map(|m| m.commit.clone()))),
        (
            "cache policy",
            distinct(metas.iter().map(|m| m.cache_policy.clone())),
        ),
        (
            "cache state observed",
            distinct(table.cache_states.iter().cloned()),
        ),
        (
            "concurrency",
            distinct(metas.iter().map(|m| m.max_concurrency)),
        ),
        ("max_tokens", distinct(metas.iter().map(|m| m.max_tokens))),
        (
            "temperature",
            distinct(metas.iter().map(|m| m.temperature.to_string())),
        ),
        (
            "prompts per corpus",
            distinct(metas.iter().map(|m| m.num_prompts)),
        ),
        (
            "runs (median reported)",
            distinct(metas.iter().map(|m| m.runs)),
        ),
        ("warm-up requests", distinct(metas.iter().map(|m| m.warmup))),
        (
            "spread (MAD/median over runs): worst cell",
            table
                .cells
                .iter()
                .filter(|((_, c), _)| !is_best_k(c))
                .max_by(|a, b| a.1.spread.total_cmp(&b.1.spread))
                .map(|((corpus, config), cell)| {
                    format!("{:.1} % ({corpus}, {config})", cell.spread * 100.0)
                })
                .unwrap_or_default(),
        ),
        (
            "failed requests (all runs)",
            table.total_failed().to_string(),
        ),
        ("dates", distinct(metas.iter().map(|m| m.date.clone()))),
    ];
    for (what, value) in rows {
        let _ = writeln!(md, "| {what} | {value} |");
    }
    md.push('\n');
    md
}

fn corpus_label(corpus: &str) -> String {
    corpus
        .parse::<Corpus>()
        .map_or(corpus.to_string(), |c| c.label().to_string())
}

fn config_header(table: &Table, config: &str) -> String {
    if is_best_k(config) {
        return format!("{config} (K)");
    }
    match table
        .metas
        .iter()
        .find(|m| m.label == config)
        .and_then(|m| m.k)
    {
        Some(k) => format!("{config} (K={k})"),
        None => config.to_string(),
    }
}

fn throughput_table(table: &Table) -> String {
    let mut md = String::from(
        "### Output tokens/s (median over runs; under it the drafts' acceptance rate and tokens a verify step — with padded K the second is what pays; **bold** = row winner)\n\n",
    );
    let _ = write!(md, "| corpus |");
    for c in &table.configs {
        let _ = write!(md, " {} |", config_header(table, c));
    }
    let _ = writeln!(md, " winner |");
    let _ = writeln!(md, "|---|{}---|", "---:|".repeat(table.configs.len()));
    for corpus in &table.corpora {
        let ranking = table.ranking(corpus);
        let winner = ranking.first().map(|(c, _)| *c);
        let _ = write!(md, "| {} |", corpus_label(corpus));
        for config in &table.configs {
            let text = match table.get(corpus, config) {
                None => "–".to_string(),
                Some(cell) => {
                    let mut t = format!("{:.1}", cell.tok_s);
                    if Some(config.as_str()) == winner {
                        t = format!("**{t}**");
                    }
                    if is_best_k(config) {
                        t.push_str(&format!(" (K{})", cell.k.unwrap_or(0)));
                    }
                    if let Some(a) = cell.acceptance {
                        t.push_str(&format!("<br>acc {:.0} %", a * 100.0));
                        if let Some(len) = cell.accept_len {
                            t.push_str(&format!(", {len:.2} tok/step"));
                        }
                    }
                    if cell.failed > 0 {
                        t.push_str(&format!("<br>⚠ {} failed", cell.failed));
                    }
                    t
                }
            };
            let _ = write!(md, " {text} |");
        }
        let _ = writeln!(md, " {} |", winner.unwrap_or("–"));
    }
    md.push('\n');
    md
}

fn geomean_table(table: &Table, baseline: &str) -> String {
    let mut md = format!("### Geometric mean over corpora, relative to `{baseline}`\n\n");
    md.push_str("| configuration | geomean tok/s | vs baseline | corpora | median spread |\n|---|---:|---:|---:|---:|\n");
    for config in &table.configs {
        let Some((g, n)) = table.geomean_of(config) else {
            continue;
        };
        let rel = table
            .relative(config, baseline)
            .map(|(r, m)| {
                format!(
                    "×{r:.3} ({}){}",
                    decision::pct(r),
                    if m != n {
                        format!(" over {m}")
                    } else {
                        String::new()
                    }
                )
            })
            .unwrap_or_else(|| "–".into());
        let _ = writeln!(
            md,
            "| {} | {g:.1} | {rel} | {n} | {:.1} % |",
            config_header(table, config),
            table.typical_spread(config) * 100.0
        );
    }
    md.push('\n');
    md
}

/// Each weight format's fastest configuration beside the gate's verdict for this model and
/// format (a format that fails the gate, or has no verdict, is never recommended).
fn weights_table(table: &Table, baseline: &str) -> String {
    let base = decision::weights_baseline(table, baseline);
    let mut md =
        format!("### Weight formats (fastest configuration of each, relative to `{base}`)\n\n");
    md.push_str("| weights | fastest configuration | geomean tok/s | vs baseline | gate verdict for this model |\n|---|---|---:|---:|---|\n");
    for w in table.weight_formats() {
        let Some((best, g, rel)) = decision::fastest_of(table, w.as_deref(), &base) else {
            continue;
        };
        let _ = writeln!(
            md,
            "| {} | {best} | {g:.1} | {} | {} |",
            w.as_deref().unwrap_or("server default"),
            rel.map_or("–".into(), decision::pct),
            table.standing(w.as_deref()).label()
        );
    }
    md.push('\n');
    md
}

fn failures_section(table: &Table) -> String {
    let mut md = String::from("### Failures and spread\n\n");
    let mut any = false;
    for ((corpus, config), cell) in &table.cells {
        if is_best_k(config) {
            continue;
        }
        if cell.failed > 0 {
            any = true;
            let _ = writeln!(md, "- {corpus} / {config}: {} failed requests (excluded from every average, counted here)", cell.failed);
        }
    }
    for ((corpus, config), cell) in &table.cells {
        if !is_best_k(config) && cell.spread > table.metas.first().map_or(0.05, |m| m.max_spread) {
            any = true;
            let _ = writeln!(
                md,
                "- {corpus} / {config}: spread {:.1} % above the limit after reruns",
                cell.spread * 100.0
            );
        }
    }
    if !any {
        md.push_str("No failed requests; every cell's spread within the limit.\n");
    }
    md.push('\n');
    md
}
