//! The named server configurations that `wring tune` sweeps, and the `wring serve` flags each
//! stands for.

use anyhow::{bail, Context, Result};

/// The study's sweep, in table column order.
pub const DEFAULT_CONFIGS: [&str; 12] = [
    "nospec",
    "ngram",
    "suffix-k4",
    "suffix-k6",
    "suffix-k8",
    "suffix-k12",
    "suffix-k4-nopad",
    "suffix-k6-nopad",
    "suffix-k8-nopad",
    "suffix-k12-nopad",
    "dynamic",
    "adaptive",
];

/// CUDA weight formats a configuration may start with (`fp8+suffix-k4`: `--gpu-weights fp8`).
pub const GPU_WEIGHTS: [&str; 4] = ["bf16", "fp8", "int4", "nvfp4"];
/// CPU weight formats a configuration may start with (`q8+nospec`: `--cpu-weights q8`).
pub const CPU_WEIGHTS: [&str; 3] = ["f32", "q8", "q4"];
/// The formats the gate compares against (the references themselves need no verdict).
pub const REFERENCE_WEIGHTS: [&str; 2] = ["bf16", "f32"];

/// `fp8+suffix-k4` → (Some("fp8"), "suffix-k4"); a name without a weight format → (None, name).
pub fn split_weights(name: &str) -> (Option<&str>, &str) {
    match name.split_once('+') {
        Some((w, base)) => (Some(w), base),
        None => (None, name),
    }
}

/// A parsed configuration name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeConfig {
    /// The full name, weight format included (`fp8+suffix-k4`).
    pub name: String,
    /// The weight format (`fp8`, `q8`, …) when the name gives one.
    pub weights: Option<String>,
    /// Fixed draft length, when the configuration has one.
    pub k: Option<u32>,
    pub padded: bool,
    pub serve_flags: Vec<String>,
}

impl ServeConfig {
    pub fn parse(name: &str) -> Result<Self> {
        if let (Some(w), base) = split_weights(name) {
            let flag = if GPU_WEIGHTS.contains(&w) {
                "--gpu-weights"
            } else if CPU_WEIGHTS.contains(&w) {
                "--cpu-weights"
            } else {
                bail!(
                    "configuration {name:?}: unknown weight format {w:?}; known: {} (CUDA), {} (CPU)",
                    GPU_WEIGHTS.join(", "),
                    CPU_WEIGHTS.join(", ")
                );
            };
            let mut c = Self::parse(base).with_context(|| format!("configuration {name:?}"))?;
            if c.weights.is_some() {
                bail!("configuration {name:?} names two weight formats");
            }
            c.name = name.to_string();
            c.weights = Some(w.to_string());
            c.serve_flags.extend([flag.to_string(), w.to_string()]);
            return Ok(c);
        }
        let flags = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        let (k, padded, serve_flags) = match name {
            "nospec" => (None, false, flags("--speculative none")),
            "ngram" => (
                Some(4),
                true,
                flags("--speculative ngram --k-policy fixed:4 --pad"),
            ),
            "dynamic" => (
                None,
                true,
                flags("--speculative suffix --k-policy dynamic --pad"),
            ),
            "adaptive" => (
                None,
                true,
                flags("--speculative suffix --k-policy adaptive --pad"),
            ),
            // What `wring serve --speculative suffix` picks with no other flag on the
            // backend it runs on (adaptive K; unpadded on the CPU, padded on CUDA).
            "suffix" => (None, false, flags("--speculative suffix")),
            // The controllers without padding: where verify cost grows with every query
            // row (the CPU), padding only costs, so the controllers are compared unpadded too.
            "dynamic-nopad" => (
                None,
                false,
                flags("--speculative suffix --k-policy dynamic --no-pad"),
            ),
            "adaptive-nopad" => (
                None,
                false,
                flags("--speculative suffix --k-policy adaptive --no-pad"),
            ),
            other => {
                let Some(rest) = other.strip_prefix("suffix-k") else {
                    bail!(
                        "unknown configuration {other:?}; known: {}",
                        DEFAULT_CONFIGS.join(", ") + ", dynamic-nopad, adaptive-nopad, suffix"
                    );
                };
                let (k_text, padded) = match rest.strip_suffix("-nopad") {
                    Some(k) => (k, false),
                    None => (rest, true),
                };
                let k: u32 = match k_text.parse() {
                    Ok(k) if (1..=64).contains(&k) => k,
                    _ => bail!("configuration {other:?}: K must be a number from 1 to 64"),
                };
                let mut f = flags(&format!("--speculative suffix --k-policy fixed:{k}"));
                // Padding is stated either way: the server's default depends on its backend.
                f.push(if padded { "--pad" } else { "--no-pad" }.into());
                (Some(k), padded, f)
            }
        };
        Ok(Self {
            name: name.to_string(),
            weights: None,
            k,
            padded,
            serve_flags,
        })
    }

    /// True for fixed-K suffix configurations (the candidates for a best-K profile).
    pub fn is_fixed_suffix(&self) -> bool {
        split_weights(&self.name).1.starts_with("suffix-k")
    }
}

/// Every configuration in each weight format of `formats` (`f32,q8` × `nospec,suffix-k4`:
/// `f32+nospec`, `f32+suffix-k4`, `q8+nospec`, `q8+suffix-k4`); no formats: as given.
pub fn with_weights(configs: Vec<ServeConfig>, formats: &str) -> Result<Vec<ServeConfig>> {
    let formats: Vec<&str> = formats
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if formats.is_empty() {
        return Ok(configs);
    }
    let mut out = vec![];
    for w in formats {
        for c in &configs {
            if c.weights.is_some() {
                bail!(
                    "configuration {:?} already names its weight format; drop it from --configs or --weights",
                    c.name
                );
            }
            out.push(ServeConfig::parse(&format!("{w}+{}", c.name))?);
        }
    }
    Ok(out)
}

/// Parses a comma-separated list (`all` = the default sweep).
pub fn parse_config_list(spec: &str) -> Result<Vec<ServeConfig>> {
    // `all` expands to the default sweep anywhere in the list (`all,adaptive-nopad`).
    let mut names: Vec<&str> = Vec::new();
    for name in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let expanded: &[&str] = if name == "all" {
            &DEFAULT_CONFIGS
        } else {
            std::slice::from_ref(&name)
        };
        for &n in expanded {
            if !names.contains(&n) {
                names.push(n);
            }
        }
    }
    if names.is_empty() {
        bail!("no configurations given");
    }
    names.into_iter().map(ServeConfig::parse).collect()
}

/// Column order for reports: grouped by weight format (none, then CUDA's and the CPU's in
/// their listed order), within a group the default sweep first, other labels after,
/// alphabetically.
pub fn config_order(name: &str) -> (usize, usize, String) {
    let (w, base) = split_weights(name);
    let group = match w {
        None => 0,
        Some(w) => GPU_WEIGHTS
            .iter()
            .chain(&CPU_WEIGHTS)
            .position(|f| *f == w)
            .map_or(usize::MAX, |i| i + 1),
    };
    let pos = DEFAULT_CONFIGS
        .iter()
        .position(|c| *c == base)
        .unwrap_or(DEFAULT_CONFIGS.len());
    (group, pos, name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_serve_flags() {
        let c = ServeConfig::parse("suffix-k12-nopad").unwrap();
        assert_eq!(c.k, Some(12));
        assert!(!c.padded);
        assert_eq!(
            c.serve_flags.join(" "),
            "--speculative suffix --k-policy fixed:12 --no-pad"
        );
        assert_eq!(
            ServeConfig::parse("nospec").unwrap().serve_flags.join(" "),
            "--speculative none"
        );
        assert_eq!(
            ServeConfig::parse("ngram").unwrap().serve_flags.join(" "),
            "--speculative ngram --k-policy fixed:4 --pad"
        );
        assert_eq!(
            ServeConfig::parse("adaptive")
                .unwrap()
                .serve_flags
                .join(" "),
            "--speculative suffix --k-policy adaptive --pad"
        );
        assert_eq!(
            ServeConfig::parse("suffix").unwrap().serve_flags.join(" "),
            "--speculative suffix"
        );
        assert_eq!(
            ServeConfig::parse("suffix-k8")
                .unwrap()
                .serve_flags
                .join(" "),
            "--speculative suffix --k-policy fixed:8 --pad"
        );
        let c = ServeConfig::parse("adaptive-nopad").unwrap();
        assert!(!c.padded && c.k.is_none());
        assert_eq!(
            c.serve_flags.join(" "),
            "--speculative suffix --k-policy adaptive --no-pad"
        );
        assert!(ServeConfig::parse("suffix-kx").is_err());
        assert!(ServeConfig::parse("fast").is_err());
        assert_eq!(parse_config_list("all").unwrap().len(), 12);
        let extended = parse_config_list("all, adaptive-nopad,nospec").unwrap();
        assert_eq!(extended.len(), 13);
        assert_eq!(extended[12].name, "adaptive-nopad");
        assert_eq!(
            parse_config_list("nospec, suffix-k8").unwrap()[1].k,
            Some(8)
        );
    }

    #[test]
    fn weight_formats_prefix_a_configuration() {
        let c = ServeConfig::parse("fp8+suffix-k4").unwrap();
        assert_eq!(
            (c.weights.as_deref(), c.k, c.padded),
            (Some("fp8"), Some(4), true)
        );
        assert!(c.is_fixed_suffix());
        assert_eq!(
            c.serve_flags.join(" "),
            "--speculative suffix --k-policy fixed:4 --pad --gpu-weights fp8"
        );
        let c = ServeConfig::parse("q8+nospec").unwrap();
        assert_eq!(
            c.serve_flags.join(" "),
            "--speculative none --cpu-weights q8"
        );
        assert!(!c.is_fixed_suffix());
        let e = format!("{:#}", ServeConfig::parse("int3+nospec").unwrap_err());
        assert!(e.contains("unknown weight format \"int3\""), "{e}");
        assert!(ServeConfig::parse("fp8+q8+nospec").is_err());
        assert!(ServeConfig::parse("fp8+fast").is_err());
        let all = with_weights(parse_config_list("nospec,suffix-k4").unwrap(), "f32, q4").unwrap();
        let names: Vec<&str> = all.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            ["f32+nospec", "f32+suffix-k4", "q4+nospec", "q4+suffix-k4"]
        );
        assert!(with_weights(parse_config_list("q8+nospec").unwrap(), "f32").is_err());
        let mut order = vec![
            "q8+nospec",
            "suffix-k4",
            "fp8+nospec",
            "nospec",
            "fp8+suffix-k4",
        ];
        order.sort_by_key(|c| config_order(c));
        assert_eq!(
            order,
            [
                "nospec",
                "suffix-k4",
                "fp8+nospec",
                "fp8+suffix-k4",
                "q8+nospec"
            ]
        );
    }
}
