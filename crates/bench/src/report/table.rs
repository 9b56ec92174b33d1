//! The corpus × configuration table built from result files, with the derived `bestKpad` column
//! (per corpus, the fastest fixed-K padded suffix configuration) and geometric means.

use std::collections::{BTreeMap, BTreeSet};

use crate::configs::{config_order, split_weights, ServeConfig, REFERENCE_WEIGHTS};
use crate::corpus::Corpus;
use crate::result::{BenchFile, BenchMeta};
use crate::stats::geomean;

/// Name of the derived per-workload best-K column (`fp8+bestKpad` within a weight format).
pub const BEST_K_PAD: &str = "bestKpad";

/// Whether `config` is a derived best-K column (of any weight format).
pub fn is_best_k(config: &str) -> bool {
    split_weights(config).1 == BEST_K_PAD
}

/// The gate's standing of a weight format for the table's model.
#[derive(Debug, Clone, PartialEq)]
pub enum GateStanding {
    /// The server's default weights, or a reference format (bf16, f32): nothing to gate.
    Reference,
    Pass(String),
    Fail(String),
    /// No verdict recorded for this model and format.
    Missing,
}

impl GateStanding {
    /// Whether the decision tree may recommend the format.
    pub fn allowed(&self) -> bool {
        matches!(self, GateStanding::Reference | GateStanding::Pass(_))
    }

    pub fn label(&self) -> String {
        match self {
            GateStanding::Reference => "reference (not gated)".into(),
            GateStanding::Pass(s) => format!("PASS ({s})"),
            GateStanding::Fail(s) => format!("FAIL ({s})"),
            GateStanding::Missing => "no gate verdict".into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    /// Median output tokens/s over runs.
    pub tok_s: f64,
    pub mad: f64,
    /// MAD / median over runs.
    pub spread: f64,
    pub acceptance: Option<f64>,
    pub accept_len: Option<f64>,
    pub completed: usize,
    pub failed: usize,
    /// K of this cell: the configuration's fixed K, or the chosen K for `bestKpad`.
    pub k: Option<u32>,
    /// For `bestKpad`: which configuration supplied the cell.
    pub from: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Table {
    pub model: String,
    /// Corpus tags in the study's order.
    pub corpora: Vec<String>,
    /// Measured configurations in sweep order, then `bestKpad` if derivable.
    pub configs: Vec<String>,
    pub cells: BTreeMap<(String, String), Cell>,
    /// Metadata of every file that fed the table.
    pub metas: Vec<BenchMeta>,
    /// Cache states the runs actually observed (e.g. `reset`, `unknown (...)`).
    pub cache_states: BTreeSet<String>,
    /// Weight format → the gate verdict its result files carry (`PASS: …`, `FAIL: …`).
    pub verdicts: BTreeMap<String, String>,
}

impl Table {
    /// Builds the table for one model. When two files measure the same (corpus, config), the
    /// later one (by date) wins.
    pub fn build(model: &str, files: &[&BenchFile]) -> Self {
        let mut sorted: Vec<&&BenchFile> = files.iter().collect();
        sorted.sort_by(|a, b| a.meta.date.cmp(&b.meta.date));
        let mut cells = BTreeMap::new();
        let mut configs = BTreeSet::new();
        let mut corpora = BTreeSet::new();
        let mut cache_states = BTreeSet::new();
        let mut verdicts = BTreeMap::new();
        for file in &sorted {
            let config = file.meta.label.clone();
            if let (Some(w), Some(v)) = (split_weights(&config).0, &file.meta.gate_verdict) {
                verdicts.insert(w.to_string(), v.clone());
            }
            configs.insert(config.clone());
            for r in &file.results {
                corpora.insert(r.corpus.clone());
                cache_states.extend(r.runs.iter().map(|run| run.cache_state.clone()));
                let spec = r.median_run.spec.as_ref();
                cells.insert(
                    (r.corpus.clone(), config.clone()),
                    Cell {
                        tok_s: r.output_throughput_median,
                        mad: r.output_throughput_mad,
                        spread: r.spread,
                        acceptance: spec.and_then(|s| s.spec_acceptance_rate),
                        accept_len: spec.and_then(|s| s.spec_mean_acceptance_length),
                        completed: r.median_run.completed,
                        failed: r.failed_all_runs,
                        k: file.meta.k,
                        from: None,
                    },
                );
            }
        }
        let mut configs: Vec<String> = configs.into_iter().collect();
        configs.sort_by_key(|c| config_order(c));
        let mut corpora: Vec<String> = corpora.into_iter().collect();
        corpora.sort_by_key(|c| {
            (
                c.parse::<Corpus>().map_or(usize::MAX, |c| c as usize),
                c.clone(),
            )
        });
        let mut table = Table {
            model: model.to_string(),
            corpora,
            configs,
            cells,
            metas: files.iter().map(|f| f.meta.clone()).collect(),
            cache_states,
            verdicts,
        };
        table.add_best_k_pad();
        table
    }

    /// Adds `bestKpad` (per weight format: `fp8+bestKpad`): per corpus the fastest padded
    /// fixed-K suffix configuration of that format.
    fn add_best_k_pad(&mut self) {
        let padded: Vec<String> = self
            .configs
            .iter()
            .filter(|c| ServeConfig::parse(c).is_ok_and(|s| s.is_fixed_suffix() && s.padded))
            .cloned()
            .collect();
        let groups: BTreeSet<Option<&str>> = padded.iter().map(|c| split_weights(c).0).collect();
        let mut derived = vec![];
        for group in groups {
            let name = match group {
                Some(w) => format!("{w}+{BEST_K_PAD}"),
                None => BEST_K_PAD.to_string(),
            };
            for corpus in self.corpora.clone() {
                let best = padded
                    .iter()
                    .filter(|c| split_weights(c).0 == group)
                    .filter_map(|c| self.get(&corpus, c).map(|cell| (c, cell)))
                    .max_by(|a, b| a.1.tok_s.total_cmp(&b.1.tok_s));
                if let Some((config, cell)) = best {
                    let cell = Cell {
                        from: Some(config.clone()),
                        ..cell.clone()
                    };
                    self.cells.insert((corpus.clone(), name.clone()), cell);
                }
            }
            derived.push(name);
        }
        self.configs.extend(derived);
    }

    /// Whether any configuration names a weight format (the report then has a weights axis).
    pub fn has_weight_axis(&self) -> bool {
        self.configs.iter().any(|c| split_weights(c).0.is_some())
    }

    /// The weight formats measured (None: configurations that name none), in column order.
    pub fn weight_formats(&self) -> Vec<Option<String>> {
        let mut out: Vec<Option<String>> = vec![];
        for c in self.measured_configs() {
            let w = split_weights(c).0.map(str::to_string);
            if !out.contains(&w) {
                out.push(w);
            }
        }
        out
    }

    /// The gate's standing of weight format `w` (None: the server's default weights).
    pub fn standing(&self, w: Option<&str>) -> GateStanding {
        let Some(w) = w else {
            return GateStanding::Reference;
        };
        if REFERENCE_WEIGHTS.contains(&w) {
            return GateStanding::Reference;
        }
        match self.verdicts.get(w) {
            Some(v) => match v.split_once(':') {
                Some(("PASS", why)) => GateStanding::Pass(why.trim().to_string()),
                Some((_, why)) => GateStanding::Fail(why.trim().to_string()),
                None if v == "PASS" => GateStanding::Pass(String::new()),
                None => GateStanding::Fail(v.clone()),
            },
            None => GateStanding::Missing,
        }
    }

    /// The configurations of weight format `w` only, named without it (`fp8+suffix-k4` →
    /// `suffix-k4`), with their own `bestKpad`: the table the rest of the decision tree reads.
    pub fn for_weights(&self, w: Option<&str>) -> Table {
        let keep = |c: &str| !is_best_k(c) && split_weights(c).0 == w;
        let base = |c: &str| split_weights(c).1.to_string();
        let mut table = Table {
            model: self.model.clone(),
            corpora: self.corpora.clone(),
            configs: self
                .configs
                .iter()
                .filter(|c| keep(c))
                .map(|c| base(c))
                .collect(),
            cells: self
                .cells
                .iter()
                .filter(|((_, c), _)| keep(c))
                .map(|((corpus, c), cell)| ((corpus.clone(), base(c)), cell.clone()))
                .collect(),
            metas: self
                .metas
                .iter()
                .filter(|m| split_weights(&m.label).0 == w)
                .cloned()
                .collect(),
            cache_states: self.cache_states.clone(),
            verdicts: BTreeMap::new(),
        };
        table.add_best_k_pad();
        table
    }

    pub fn get(&self, corpus: &str, config: &str) -> Option<&Cell> {
        self.cells.get(&(corpus.to_string(), config.to_string()))
    }

    /// Measured configurations only (no derived columns).
    pub fn measured_configs(&self) -> impl Iterator<Item = &String> {
        self.configs.iter().filter(|c| !is_best_k(c))
    }

    /// The fastest measured configuration on `corpus`, and the runner-up.
    pub fn ranking(&self, corpus: &str) -> Vec<(&str, &Cell)> {
        let mut row: Vec<(&str, &Cell)> = self
            .measured_configs()
            .filter_map(|c| self.get(corpus, c).map(|cell| (c.as_str(), cell)))
            .collect();
        row.sort_by(|a, b| b.1.tok_s.total_cmp(&a.1.tok_s));
        row
    }

    /// Geometric mean of `config`'s tok/s over the corpora it shares with `baseline`, divided by
    /// the baseline's over the same corpora, with the number of corpora compared.
    pub fn relative(&self, config: &str, baseline: &str) -> Option<(f64, usize)> {
        let pairs: Vec<(f64, f64)> = self
            .corpora
            .iter()
            .filter_map(|c| Some((self.get(c, config)?.tok_s, self.get(c, baseline)?.tok_s)))
            .collect();
        let a = geomean(&pairs.iter().map(|p| p.0).collect::<Vec<_>>())?;
        let b = geomean(&pairs.iter().map(|p| p.1).collect::<Vec<_>>())?;
        Some((a / b, pairs.len()))
    }

    /// Geometric mean of `config`'s tok/s over every corpus it has.
    pub fn geomean_of(&self, config: &str) -> Option<(f64, usize)> {
        let values: Vec<f64> = self
            .corpora
            .iter()
            .filter_map(|c| Some(self.get(c, config)?.tok_s))
            .collect();
        Some((geomean(&values)?, values.len()))
    }

    /// Median run spread of a configuration's cells (the noise level its margins are judged by).
    pub fn typical_spread(&self, config: &str) -> f64 {
        let spreads: Vec<f64> = self
            .corpora
            .iter()
            .filter_map(|c| Some(self.get(c, config)?.spread))
            .collect();
        crate::stats::median(&spreads).unwrap_or(0.0)
    }

    /// Total failed requests over every measured cell.
    pub fn total_failed(&self) -> usize {
        self.cells
            .iter()
            .filter(|((_, c), _)| !is_best_k(c))
            .map(|(_, cell)| cell.failed)
            .sum()
    }
}
