//! `wring tune`: one `wring serve` per configuration on a free loopback port, the benchmark over
//! the corpora against it, every raw result kept, then the best-K profile and the report.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::bench::{run_bench, BenchConfig};
use crate::configs::ServeConfig;
use crate::result::BenchFile;
use crate::stats::geomean;

#[derive(Debug, Clone)]
pub struct TuneConfig {
    /// The `wring` executable to launch (`std::env::current_exe()` from the CLI).
    pub wring_bin: PathBuf,
    /// `--model` for `wring serve` (None: its default model).
    pub model: Option<String>,
    pub configs: Vec<ServeConfig>,
    /// Benchmark settings; `request.base_url`, `label`, `k` and `server_args` are set per config.
    pub bench: BenchConfig,
    pub out_dir: PathBuf,
    /// Extra `wring serve` arguments for every configuration.
    pub serve_args: Vec<String>,
    pub startup_timeout: Duration,
    /// Configuration the report compares against.
    pub baseline: String,
    /// Configurations that differ only in their K policy share one server, each sending
    /// its policy with every request (`k_policy`): one start per group instead of one per
    /// configuration (a minute each for an 8B model).
    pub share_servers: bool,
    /// Weight format → the `wring gate` verdict for this model (`PASS: …` / `FAIL: …`),
    /// recorded in each result file of a configuration in that format; formats absent
    /// here have none (the report then says so and never recommends them).
    pub gate_verdicts: BTreeMap<String, String>,
}

/// What a tune produced.
#[derive(Debug, Clone)]
pub struct TuneOutcome {
    pub result_files: Vec<PathBuf>,
    /// Configurations that could not be measured, with the reason.
    pub failed_configs: Vec<(String, String)>,
    /// `k_profile.json` (configurations without a weight format), or one
    /// `k_profile.<format>.json` per weight format swept.
    pub profile_path: Option<PathBuf>,
    pub profile_paths: Vec<PathBuf>,
    pub report_path: Option<PathBuf>,
}

/// The best-K profile that `wring serve --k-policy profile:FILE` reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KProfile {
    pub default: u32,
    pub workloads: BTreeMap<String, u32>,
    pub model: String,
    pub source: String,
}

pub fn run_tune(config: &TuneConfig) -> Result<TuneOutcome> {
    std::fs::create_dir_all(config.out_dir.join("logs"))
        .with_context(|| format!("creating {}", config.out_dir.display()))?;
    let mut outcome = TuneOutcome {
        result_files: Vec::new(),
        failed_configs: Vec::new(),
        profile_path: None,
        profile_paths: Vec::new(),
        report_path: None,
    };
    for group in server_groups(&config.configs, config.share_servers) {
        let mut server = match start_server(config, &group.server_flags, &group.log_name) {
            Ok(server) => server,
            Err(e) => {
                for c in &group.configs {
                    tracing::error!("configuration {} failed: {e:#}", c.name);
                    outcome
                        .failed_configs
                        .push((c.name.clone(), format!("{e:#}")));
                }
                continue;
            }
        };
        for (serve_config, k_policy) in &group.configs_with_policy() {
            match bench_one(config, &server, serve_config, k_policy.clone()) {
                Ok(path) => outcome.result_files.push(path),
                Err(e) => {
                    tracing::error!("configuration {} failed: {e:#}", serve_config.name);
                    outcome
                        .failed_configs
                        .push((serve_config.name.clone(), format!("{e:#}")));
                }
            }
        }
        server.process.stop();
    }
    if outcome.result_files.is_empty() {
        let reasons: Vec<String> = outcome
            .failed_configs
            .iter()
            .map(|(n, e)| format!("{n}: {e}"))
            .collect();
        bail!(
            "no configuration could be measured:\n{}",
            reasons.join("\n")
        );
    }
    let files: Vec<BenchFile> = outcome
        .result_files
        .iter()
        .map(|p| BenchFile::read(p))
        .collect::<Result<_>>()?;
    let model = config
        .model
        .clone()
        .unwrap_or_else(|| files[0].meta.model_id.clone());
    // One best-K profile per weight format (a server runs one format).
    let formats: std::collections::BTreeSet<Option<String>> = files
        .iter()
        .map(|f| {
            crate::configs::split_weights(&f.meta.label)
                .0
                .map(str::to_string)
        })
        .collect();
    for w in formats {
        let of_format: Vec<BenchFile> = files
            .iter()
            .filter(|f| crate::configs::split_weights(&f.meta.label).0 == w.as_deref())
            .cloned()
            .collect();
        let Some(profile) = best_k_profile(&of_format, &model) else {
            continue;
        };
        let name = w.map_or("k_profile.json".to_string(), |w| {
            format!("k_profile.{w}.json")
        });
        let path = config.out_dir.join(name);
        std::fs::write(&path, serde_json::to_string_pretty(&profile)?)
            .with_context(|| format!("writing {}", path.display()))?;
        outcome.profile_paths.push(path);
    }
    outcome.profile_path = outcome.profile_paths.first().cloned();
    if outcome.profile_paths.is_empty() {
        tracing::warn!("no fixed-K suffix configuration was measured: no best-K profile written");
    }
    let report = crate::report::write_report(&files, &config.out_dir, &config.baseline)?;
    outcome.report_path = Some(report);
    Ok(outcome)
}

/// Configurations run on one server: its flags, and each configuration with the K policy
/// its requests send when the server is shared (None: the server's own).
struct ServerGroup {
    server_flags: Vec<String>,
    configs: Vec<ServeConfig>,
    shared: bool,
    log_name: String,
}

impl ServerGroup {
    fn configs_with_policy(&self) -> Vec<(ServeConfig, Option<String>)> {
        self.configs
            .iter()
            .map(|c| {
                let policy = self.shared.then(|| k_policy_of(&c.serve_flags)).flatten();
                (c.clone(), policy)
            })
            .collect()
    }
}

/// The `--k-policy` value among `flags`, if any.
fn k_policy_of(flags: &[String]) -> Option<String> {
    flags
        .windows(2)
        .find(|w| w[0] == "--k-policy")
        .map(|w| w[1].clone())
}

/// `flags` without their `--k-policy VALUE`.
fn without_k_policy(flags: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(flags.len());
    let mut skip = false;
    for f in flags {
        if skip {
            skip = false;
        } else if f == "--k-policy" {
            skip = true;
        } else {
            out.push(f.clone());
        }
    }
    out
}

/// One server per configuration, or (`share`) one per set of configurations whose flags
/// differ only in `--k-policy`, in the order the configurations were given.
fn server_groups(configs: &[ServeConfig], share: bool) -> Vec<ServerGroup> {
    let mut groups: Vec<ServerGroup> = Vec::new();
    for c in configs {
        let base = without_k_policy(&c.serve_flags);
        let joins = share && k_policy_of(&c.serve_flags).is_some();
        if let Some(g) = groups
            .iter_mut()
            .find(|g| joins && g.shared && g.server_flags == base)
        {
            g.configs.push(c.clone());
            g.log_name = format!("{}+{}", g.log_name, c.name);
            continue;
        }
        groups.push(ServerGroup {
            server_flags: if joins { base } else { c.serve_flags.clone() },
            configs: vec![c.clone()],
            shared: joins,
            log_name: c.name.clone(),
        });
    }
    groups
}

/// A started `wring serve`, its base URL and the arguments it got.
struct RunningServer {
    process: ServerProcess,
    base_url: String,
    args: Vec<String>,
}

fn start_server(config: &TuneConfig, flags: &[String], log_name: &str) -> Result<RunningServer> {
    let port = free_loopback_port()?;
    let mut args: Vec<String> = vec!["serve".into(), "--port".into(), port.to_string()];
    if let Some(model) = &config.model {
        args.extend(["--model".into(), model.clone()]);
    }
    args.extend(flags.iter().cloned());
    args.extend(config.serve_args.iter().cloned());
    if config.bench.replay.is_some() && !args.iter().any(|a| a == "--replay-outputs") {
        args.push("--replay-outputs".into());
    }
    let log_path = config.out_dir.join("logs").join(format!("{log_name}.log"));
    tracing::info!(
        "{log_name}: starting {} {}",
        config.wring_bin.display(),
        args.join(" ")
    );
    let mut process = ServerProcess::spawn(&config.wring_bin, &args, &log_path)?;
    let base_url = format!("http://127.0.0.1:{port}");
    process.wait_healthy(&base_url, config.startup_timeout)?;
    Ok(RunningServer {
        process,
        base_url,
        args,
    })
}

/// The benchmark of one configuration against `server` (its requests sending `k_policy`
/// when the server is shared); writes `<out>/<name>.json`.
fn bench_one(
    config: &TuneConfig,
    server: &RunningServer,
    serve_config: &ServeConfig,
    k_policy: Option<String>,
) -> Result<PathBuf> {
    let base_url = &server.base_url;
    let mut bench = config.bench.clone();
    bench.request.base_url = base_url.clone();
    bench.label = serve_config.name.clone();
    bench.k = serve_config.k;
    bench.server_args = server.args.clone();
    if let Some(p) = &k_policy {
        bench.server_args.push(format!("(requests: k_policy {p})"));
    }
    bench.request.k_policy = k_policy;
    if bench.request.model.is_empty() {
        bench.request.model = discover_model(base_url).unwrap_or_else(|| "default".into());
    }
    let mut file = run_bench(&bench)?;
    file.meta.gate_verdict = serve_config
        .weights
        .as_ref()
        .and_then(|w| config.gate_verdicts.get(w).cloned());
    let path = config.out_dir.join(format!("{}.json", serve_config.name));
    file.write(&path)?;
    eprintln!("{}", crate::bench::summary_table(&file));
    Ok(path)
}

/// A port the OS just handed out on 127.0.0.1 (released again for the server to bind).
pub fn free_loopback_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("finding a free loopback port")?;
    Ok(listener.local_addr()?.port())
}

/// The first model id from `/v1/models`, if the server lists one.
pub fn discover_model(base_url: &str) -> Option<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    runtime.block_on(async {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .ok()?;
        let root = base_url.trim_end_matches('/');
        let root = root.strip_suffix("/v1").unwrap_or(root);
        let v: serde_json::Value = client
            .get(format!("{root}/v1/models"))
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        v["data"][0]["id"].as_str().map(String::from)
    })
}

/// A launched server, stopped (SIGTERM, then SIGKILL) when dropped.
struct ServerProcess {
    child: Child,
    log_path: PathBuf,
}

impl ServerProcess {
    fn spawn(bin: &Path, args: &[String], log_path: &Path) -> Result<Self> {
        let log =
            File::create(log_path).with_context(|| format!("creating {}", log_path.display()))?;
        let child = Command::new(bin)
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok(Self {
            child,
            log_path: log_path.to_path_buf(),
        })
    }

    fn wait_healthy(&mut self, base_url: &str, timeout: Duration) -> Result<()> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "wring serve exited with {status} before it was healthy; log tail:\n{}",
                    self.log_tail(20)
                );
            }
            if http_status(&format!("{base_url}/health")) == Some(200) {
                return Ok(());
            }
            if started.elapsed() > timeout {
                bail!(
                    "wring serve not healthy after {:?}; log tail:\n{}",
                    timeout,
                    self.log_tail(20)
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn log_tail(&self, n: usize) -> String {
        let Ok(f) = File::open(&self.log_path) else {
            return String::new();
        };
        let lines: Vec<String> = BufReader::new(f).lines().map_while(Result::ok).collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    fn stop(&mut self) {
        if self.child.try_wait().ok().flatten().is_some() {
            return;
        }
        // Graceful first so the server drains; SIGKILL if it does not exit.
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if self.child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Blocking GET returning the status code (None when unreachable).
fn http_status(url: &str) -> Option<u16> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    runtime.block_on(async {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .ok()?;
        Some(client.get(url).send().await.ok()?.status().as_u16())
    })
}

/// Per corpus, the K of the fastest fixed-K suffix configuration (padded ones; unpadded only
/// when no padded one was measured); `default` is the K with the best geometric mean over the
/// corpora. `None` when no fixed-K suffix configuration was measured.
pub fn best_k_profile(files: &[BenchFile], model: &str) -> Option<KProfile> {
    let candidates = |padded: bool| -> Vec<&BenchFile> {
        files
            .iter()
            .filter(|f| {
                ServeConfig::parse(&f.meta.label)
                    .is_ok_and(|c| c.is_fixed_suffix() && c.padded == padded)
            })
            .collect()
    };
    let mut pool = candidates(true);
    if pool.is_empty() {
        pool = candidates(false);
    }
    if pool.is_empty() {
        return None;
    }
    // corpus -> K -> tok/s (completed requests only; a cell with failures still counts its tok/s)
    let mut table: BTreeMap<String, BTreeMap<u32, f64>> = BTreeMap::new();
    for file in &pool {
        let k = file.meta.k?;
        for r in &file.results {
            table
                .entry(r.corpus.clone())
                .or_default()
                .insert(k, r.output_throughput_median);
        }
    }
    let mut workloads = BTreeMap::new();
    for (corpus, by_k) in &table {
        if let Some((&k, _)) = by_k.iter().max_by(|a, b| a.1.total_cmp(b.1)) {
            workloads.insert(corpus.clone(), k);
        }
    }
    let ks: std::collections::BTreeSet<u32> =
        table.values().flat_map(|m| m.keys().copied()).collect();
    let default = ks
        .iter()
        .filter_map(|&k| {
            let values: Option<Vec<f64>> = table.values().map(|m| m.get(&k).copied()).collect();
            Some((k, geomean(&values?)?))
        })
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(k, _)| k)
        .or_else(|| ks.iter().next().copied())?;
    let meta = &pool[0].meta;
    Some(KProfile {
        default,
        workloads,
        model: model.to_string(),
        source: format!(
            "wring tune {} (commit {}): best output tok/s over {} at concurrency {}, max_tokens {}, {} runs",
            meta.date,
            meta.commit,
            pool.iter().map(|f| f.meta.label.as_str()).collect::<Vec<_>>().join(", "),
            meta.max_concurrency,
            meta.max_tokens,
            meta.runs
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configurations_differing_only_in_k_policy_share_a_server() {
        let configs = crate::configs::parse_config_list(
            "nospec,suffix-k4,suffix-k8,adaptive,suffix-k4-nopad,fp8+suffix-k4",
        )
        .unwrap();
        let alone = server_groups(&configs, false);
        assert_eq!(alone.len(), configs.len());
        assert!(alone.iter().all(|g| g.configs_with_policy()[0].1.is_none()));
        let shared = server_groups(&configs, true);
        let names: Vec<Vec<&str>> = shared
            .iter()
            .map(|g| g.configs.iter().map(|c| c.name.as_str()).collect())
            .collect();
        assert_eq!(
            names,
            vec![
                vec!["nospec"],
                vec!["suffix-k4", "suffix-k8", "adaptive"],
                vec!["suffix-k4-nopad"],
                vec!["fp8+suffix-k4"],
            ]
        );
        let padded = &shared[1];
        assert_eq!(
            padded.server_flags,
            ["--speculative", "suffix", "--pad"].map(String::from)
        );
        let policies: Vec<Option<String>> = padded
            .configs_with_policy()
            .into_iter()
            .map(|(_, p)| p)
            .collect();
        assert_eq!(
            policies,
            [Some("fixed:4"), Some("fixed:8"), Some("adaptive")].map(|p| p.map(String::from))
        );
        assert_eq!(
            shared[0].server_flags,
            ["--speculative", "none"].map(String::from)
        );
    }
}
