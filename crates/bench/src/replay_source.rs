//! Recorded outputs to replay (`--replay SOURCE`, against `wring serve --replay-outputs`):
//! the responses that come with the corpora (`reference`), or what a real model produced
//! for the same prompts (`own:FILE`, a `wring serve --trace-out` file, matched to prompts by
//! the `X-Request-Id` the benchmark sends: the prompt's id). Each prompt gets the first
//! source in the list that has a recording for it; prompts without one are left out and
//! counted, and every result says which sources its prompts used.

use std::collections::HashMap;
use std::fmt;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Deserialize;

use crate::corpus::Prompt;
pub use crate::recording::{Recording, ReplayKind};

/// The parsed `--replay` list with the own-output traces loaded.
#[derive(Debug, Clone, Default)]
pub struct ReplaySources {
    order: Vec<ReplayKind>,
    /// `source_id` (the prompt's id) → output ids, from the own-output trace.
    own: HashMap<String, Vec<u32>>,
    own_path: Option<PathBuf>,
}

impl ReplaySources {
    /// `reference`, `own:FILE`, or both comma-separated in order of preference
    /// (`reference,own:FILE`: the corpus's response where it has one, else the trace's).
    pub fn parse(spec: &str) -> Result<Self> {
        let mut sources = Self::default();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let kind = if part == "reference" {
                ReplayKind::Reference
            } else if let Some(file) = part.strip_prefix("own:") {
                if sources.own_path.is_some() {
                    bail!("--replay {spec:?}: one own:FILE at most");
                }
                let path = PathBuf::from(file);
                sources.own = load_trace(&path)?;
                sources.own_path = Some(path);
                ReplayKind::Own
            } else {
                bail!("--replay {spec:?}: unknown source {part:?}; expected reference, own:FILE, or both comma-separated");
            };
            if sources.order.contains(&kind) {
                bail!("--replay {spec:?} names {} twice", kind.as_str());
            }
            sources.order.push(kind);
        }
        if sources.order.is_empty() {
            bail!("--replay needs a source: reference, own:FILE, or both comma-separated");
        }
        Ok(sources)
    }

    /// The recording for `prompt` from the first source that has one.
    pub fn recording(&self, prompt: &Prompt) -> Option<(ReplayKind, Recording)> {
        self.order.iter().find_map(|&kind| match kind {
            ReplayKind::Reference => prompt.reference.clone().map(|t| (kind, Recording::Text(t))),
            ReplayKind::Own => self
                .own
                .get(&prompt.id)
                .map(|ids| (kind, Recording::Ids(ids.clone()))),
        })
    }

    /// Keeps the prompts that have a recording and attaches it; returns how many were
    /// left out for want of one.
    pub fn attach(&self, prompts: &mut Vec<Prompt>) -> usize {
        let before = prompts.len();
        prompts.retain_mut(|p| match self.recording(p) {
            Some(r) => {
                p.replay = Some(r);
                true
            }
            None => false,
        });
        before - prompts.len()
    }
}

impl fmt::Display for ReplaySources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .order
            .iter()
            .map(|k| match (k, &self.own_path) {
                (ReplayKind::Own, Some(p)) => format!("own:{}", p.display()),
                _ => k.as_str().to_string(),
            })
            .collect();
        f.write_str(&parts.join(","))
    }
}

/// What the prompts of one run replayed: `reference`, `own`, or `reference+own` when both
/// sources supplied some.
pub fn sources_used(prompts: &[Prompt]) -> Option<String> {
    let mut kinds: Vec<ReplayKind> = prompts
        .iter()
        .filter_map(|p| p.replay.as_ref().map(|(k, _)| *k))
        .collect();
    kinds.sort();
    kinds.dedup();
    (!kinds.is_empty()).then(|| {
        kinds
            .iter()
            .map(|k| k.as_str())
            .collect::<Vec<_>>()
            .join("+")
    })
}

#[derive(Deserialize)]
struct TraceLine {
    source_id: String,
    output_ids: Vec<u32>,
}

/// `source_id` → output ids of a `--trace-out` file (the first line of an id wins; empty
/// outputs are skipped).
fn load_trace(path: &Path) -> Result<HashMap<String, Vec<u32>>> {
    let file = std::fs::File::open(path)
        .with_context(|| format!("--replay own:{}: cannot open it", path.display()))?;
    let mut out = HashMap::new();
    for (n, line) in BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("{}: reading line {}", path.display(), n + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let t: TraceLine = serde_json::from_str(&line).with_context(|| {
            format!(
                "{}: line {} is not a trace record (source_id, output_ids)",
                path.display(),
                n + 1
            )
        })?;
        if !t.output_ids.is_empty() {
            out.entry(t.source_id).or_insert(t.output_ids);
        }
    }
    if out.is_empty() {
        bail!("{}: no recorded outputs", path.display());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::corpus::Corpus;

    fn prompt(id: &str, reference: Option<&str>) -> Prompt {
        Prompt {
            id: id.into(),
            source: Corpus::Humaneval,
            text: "q".into(),
            reference: reference.map(String::from),
            replay: None,
        }
    }

    #[test]
    fn sources_in_order_of_preference() {
        let dir = tempfile::tempdir().unwrap();
        let trace = dir.path().join("own.jsonl");
        std::fs::write(
            &trace,
            "{\"idx\":0,\"corpus\":\"humaneval\",\"source_id\":\"humaneval:a\",\"prompt_ids\":[1],\"output_ids\":[5,6],\"finish_reason\":\"stop\"}\n\
             {\"idx\":1,\"corpus\":\"wildchat\",\"source_id\":\"wildchat:0\",\"prompt_ids\":[1],\"output_ids\":[7],\"finish_reason\":\"stop\"}\n",
        )
        .unwrap();
        let own = format!("own:{}", trace.display());
        let both = ReplaySources::parse(&format!("reference,{own}")).unwrap();
        let mut ps = vec![
            prompt("humaneval:a", Some("return 1")),
            prompt("wildchat:0", None),
            prompt("wildchat:9", None),
        ];
        assert_eq!(both.attach(&mut ps), 1, "one prompt has no recording");
        assert_eq!(
            ps[0].replay,
            Some((ReplayKind::Reference, Recording::Text("return 1".into())))
        );
        assert_eq!(
            ps[1].replay,
            Some((ReplayKind::Own, Recording::Ids(vec![7])))
        );
        assert_eq!(sources_used(&ps).as_deref(), Some("reference+own"));

        let own_only = ReplaySources::parse(&own).unwrap();
        assert_eq!(
            own_only.recording(&prompt("humaneval:a", Some("x"))),
            Some((ReplayKind::Own, Recording::Ids(vec![5, 6])))
        );
        for bad in ["", "nope", "reference,reference", "own:/no/such/file"] {
            assert!(ReplaySources::parse(bad).is_err(), "{bad}");
        }
    }
}
