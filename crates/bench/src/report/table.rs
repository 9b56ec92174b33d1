//! The corpus × configuration table built from result files, with the derived `bestKpad` column
//! (per corpus, the fastest fixed-K padded suffix configuration) and geometric means.

use std::collections::{BTreeMap, BTreeSet};

use crate::configs::{config_order, ServeConfig};
use crate::corpus::Corpus;
use crate::result::{BenchFile, BenchMeta};
use crate::stats::geomean;

/// Name of the derived per-workload best-K column.
pub const BEST_K_PAD: &str = "bestKpad";

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
        for file in &sorted {
            let config = file.meta.label.clone();
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
        };
        table.add_best_k_pad();
        table
    }

    /// Adds `bestKpad`: per corpus the fastest padded fixed-K suffix configuration.
    fn add_best_k_pad(&mut self) {
        let padded: Vec<String> = self
            .configs
            .iter()
            .filter(|c| ServeConfig::parse(c).is_ok_and(|s| s.is_fixed_suffix() && s.padded))
            .cloned()
            .collect();
        if padded.is_empty() {
            return;
        }
        for corpus in self.corpora.clone() {
            let best = padded
                .iter()
                .filter_map(|c| self.get(&corpus, c).map(|cell| (c, cell)))
                .max_by(|a, b| a.1.tok_s.total_cmp(&b.1.tok_s));
            if let Some((config, cell)) = best {
                let cell = Cell {
                    from: Some(config.clone()),
                    ..cell.clone()
                };
                self.cells
                    .insert((corpus.clone(), BEST_K_PAD.to_string()), cell);
            }
        }
        self.configs.push(BEST_K_PAD.to_string());
    }

    pub fn get(&self, corpus: &str, config: &str) -> Option<&Cell> {
        self.cells.get(&(corpus.to_string(), config.to_string()))
    }

    /// Measured configurations only (no derived columns).
    pub fn measured_configs(&self) -> impl Iterator<Item = &String> {
        self.configs.iter().filter(|c| c.as_str() != BEST_K_PAD)
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
            .filter(|((_, c), _)| c != BEST_K_PAD)
            .map(|(_, cell)| cell.failed)
            .sum()
    }
}
