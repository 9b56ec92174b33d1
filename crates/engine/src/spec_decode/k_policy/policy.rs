//! How K (draft slots per sequence per verify step) is chosen, as the flags and a request
//! say it: a fixed K, a best-K profile written by the tuner, the study's dynamic
//! controller or the adaptive policy; and the largest K any of them may use.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{bail, Context};
use serde::Deserialize;

/// Largest K any policy may use.
pub const MAX_K: usize = 32;

/// A best-K table written by the tuner: `{"default": K, "workloads": {tag: K}}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KProfile {
    pub default: usize,
    #[serde(default)]
    pub workloads: HashMap<String, usize>,
}

impl KProfile {
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading K profile {}", path.display()))?;
        let p: KProfile = serde_json::from_str(&text).with_context(|| {
            format!(
                "parsing K profile {} (expected {{\"default\": K, \"workloads\": {{tag: K}}}})",
                path.display()
            )
        })?;
        for (tag, k) in std::iter::once(("default", &p.default))
            .chain(p.workloads.iter().map(|(t, k)| (t.as_str(), k)))
        {
            if *k > MAX_K {
                bail!(
                    "K profile {}: K {k} for {tag:?} exceeds the maximum {MAX_K}",
                    path.display()
                );
            }
        }
        Ok(p)
    }

    pub fn k_for(&self, workload: Option<&str>) -> usize {
        workload
            .and_then(|w| self.workloads.get(w))
            .copied()
            .unwrap_or(self.default)
    }
}

/// How K (draft slots per sequence per verify step) is chosen.
#[derive(Debug, Clone, PartialEq)]
pub enum KPolicy {
    Fixed(usize),
    Profile(KProfile),
    Dynamic,
    Adaptive,
}

impl KPolicy {
    /// Parses `fixed:K | profile:FILE | dynamic | adaptive` (profile files are read now).
    pub fn parse(s: &str) -> anyhow::Result<Self> {
        if let Some(k) = s.strip_prefix("fixed:") {
            let k: usize = k
                .parse()
                .with_context(|| format!("k policy {s:?}: K must be a whole number"))?;
            if k == 0 || k > MAX_K {
                bail!("k policy {s:?}: K must be between 1 and {MAX_K}");
            }
            return Ok(Self::Fixed(k));
        }
        if let Some(f) = s.strip_prefix("profile:") {
            return Ok(Self::Profile(KProfile::load(Path::new(f))?));
        }
        match s {
            "dynamic" => Ok(Self::Dynamic),
            "adaptive" => Ok(Self::Adaptive),
            _ => {
                bail!("unknown k policy {s:?}; expected fixed:K, profile:FILE, dynamic or adaptive")
            }
        }
    }

    /// Parses a per-request override; profile files are server-side only.
    pub fn parse_override(s: &str) -> anyhow::Result<Self> {
        if s.starts_with("profile:") {
            bail!("k_policy {s:?}: profile files can only be set on the server");
        }
        Self::parse(s)
    }

    pub fn label(&self) -> String {
        match self {
            Self::Fixed(k) => format!("fixed:{k}"),
            Self::Profile(_) => "profile".into(),
            Self::Dynamic => "dynamic".into(),
            Self::Adaptive => "adaptive".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k_policy_parses_every_form() {
        assert_eq!(KPolicy::parse("fixed:8").unwrap(), KPolicy::Fixed(8));
        assert_eq!(KPolicy::parse("dynamic").unwrap(), KPolicy::Dynamic);
        assert_eq!(KPolicy::parse("adaptive").unwrap(), KPolicy::Adaptive);
        for bad in [
            "fixed:0",
            "fixed:x",
            "fixed:99",
            "best",
            "profile:/nonexistent/x.json",
        ] {
            assert!(KPolicy::parse(bad).is_err(), "{bad} must be rejected");
        }
        assert!(KPolicy::parse_override("profile:x.json").is_err());
    }

    #[test]
    fn profile_falls_back_to_default_for_unknown_tags() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("p.json");
        std::fs::write(
            &f,
            r#"{"default": 6, "workloads": {"mbpp": 12, "wildchat": 4}}"#,
        )
        .unwrap();
        let KPolicy::Profile(p) = KPolicy::parse(&format!("profile:{}", f.display())).unwrap()
        else {
            panic!("not a profile")
        };
        assert_eq!(p.k_for(Some("mbpp")), 12);
        assert_eq!(p.k_for(Some("other")), 6);
        assert_eq!(p.k_for(None), 6);
        std::fs::write(&f, r#"{"default": 6, "workload": {}}"#).unwrap();
        let e = KPolicy::parse(&format!("profile:{}", f.display())).unwrap_err();
        assert!(format!("{e:#}").contains("workload"), "{e:#}");
    }
}
