//! The named server configurations that `wring tune` sweeps, and the `wring serve` flags each
//! stands for.

use anyhow::{bail, Result};

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

/// A parsed configuration name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeConfig {
    pub name: String,
    /// Fixed draft length, when the configuration has one.
    pub k: Option<u32>,
    pub padded: bool,
    pub serve_flags: Vec<String>,
}

impl ServeConfig {
    pub fn parse(name: &str) -> Result<Self> {
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
            k,
            padded,
            serve_flags,
        })
    }

    /// True for fixed-K suffix configurations (the candidates for a best-K profile).
    pub fn is_fixed_suffix(&self) -> bool {
        self.name.starts_with("suffix-k")
    }
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

/// Column order for reports: the default sweep first, other labels after, alphabetically.
pub fn config_order(name: &str) -> (usize, String) {
    let pos = DEFAULT_CONFIGS
        .iter()
        .position(|c| *c == name)
        .unwrap_or(DEFAULT_CONFIGS.len());
    (pos, name.to_string())
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
}
