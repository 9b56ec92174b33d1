//! The adaptive policy's start-up step timings kept on disk, so a server started again on
//! the same machine, model and settings fits its cost model from them instead of probing
//! again (the probes took 8.8 s on the 2-core CPU at 32 sequences). The model is refitted
//! from live steps either way, so timings a little off only cost the first steps' choices.
//!
//! One JSON file holds entries keyed by everything that changes a step's time: what the
//! caller says about the model and machine (`TimingsCache::key`), plus the runner's device,
//! the batch sizes and Ks probed and this build's version, added by the engine. A missing,
//! unreadable or foreign file is measured over, never an error; so is a failed write.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::StepShape;

/// Where the timings live and the caller's part of their key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimingsCache {
    pub path: PathBuf,
    /// The model and machine: file identity, weight format, threads, CPU/GPU name…
    pub key: String,
    /// Measure again (and store the new timings) even where some are stored.
    pub refresh: bool,
}

/// Entries a file keeps (the newest): one per configuration a user runs.
const MAX_ENTRIES: usize = 16;

#[derive(Debug, Default, Serialize, Deserialize)]
struct TimingsFile {
    entries: Vec<Entry>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    key: String,
    /// (seqs, rows, logit rows, attended pairs, seconds) per probe.
    points: Vec<[f64; 5]>,
}

impl TimingsCache {
    /// The timings stored under `key`, if any.
    pub fn load(path: &Path, key: &str) -> Option<Vec<(StepShape, f64)>> {
        let text = std::fs::read_to_string(path).ok()?;
        let file: TimingsFile = serde_json::from_str(&text).ok()?;
        let entry = file.entries.into_iter().find(|e| e.key == key)?;
        let points: Vec<(StepShape, f64)> = entry
            .points
            .iter()
            .map(|&[seqs, rows, logit_rows, attended, secs]| {
                (
                    StepShape {
                        seqs,
                        rows,
                        logit_rows,
                        attended,
                    },
                    secs,
                )
            })
            .collect();
        let sane = !points.is_empty() && points.iter().all(|(_, s)| sane_secs(*s));
        sane.then_some(points)
    }

    /// Stores `points` under `key` (replacing an older entry of that key; the oldest
    /// entries go past [`MAX_ENTRIES`]). Written to a temporary file and renamed, so a
    /// reader never sees half a file.
    pub fn store(path: &Path, key: &str, points: &[(StepShape, f64)]) -> anyhow::Result<()> {
        if !points.iter().all(|(_, s)| sane_secs(*s)) {
            anyhow::bail!("step timings that are not a positive number of seconds");
        }
        let mut file: TimingsFile = std::fs::read_to_string(path)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default();
        file.entries.retain(|e| e.key != key);
        file.entries.push(Entry {
            key: key.to_string(),
            points: points
                .iter()
                .map(|(s, secs)| [s.seqs, s.rows, s.logit_rows, s.attended, *secs])
                .collect(),
        });
        let excess = file.entries.len().saturating_sub(MAX_ENTRIES);
        file.entries.drain(..excess);
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(format!(".{}.tmp", std::process::id()));
        let tmp = PathBuf::from(tmp);
        std::fs::write(&tmp, serde_json::to_string_pretty(&file)?)?;
        std::fs::rename(&tmp, path).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })?;
        Ok(())
    }
}

fn sane_secs(s: f64) -> bool {
    s.is_finite() && s > 0.0 && s < 3600.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn points(scale: f64) -> Vec<(StepShape, f64)> {
        (1..4)
            .map(|i| (StepShape::verify(64 * i, i), scale * i as f64))
            .collect()
    }

    #[test]
    fn timings_round_trip_by_key_and_bad_files_read_as_none() {
        let dir = std::env::temp_dir().join(format!("wring-timings-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("model.wring-step-costs.json");
        assert!(TimingsCache::load(&path, "a").is_none(), "no file yet");
        TimingsCache::store(&path, "a", &points(0.01)).unwrap();
        TimingsCache::store(&path, "b", &points(0.02)).unwrap();
        TimingsCache::store(&path, "a", &points(0.03)).unwrap();
        assert_eq!(
            TimingsCache::load(&path, "a"),
            Some(points(0.03)),
            "replaced"
        );
        assert_eq!(TimingsCache::load(&path, "b"), Some(points(0.02)));
        assert!(
            TimingsCache::load(&path, "c").is_none(),
            "another configuration"
        );
        for i in 0..2 * MAX_ENTRIES {
            TimingsCache::store(&path, &format!("k{i}"), &points(0.01)).unwrap();
        }
        assert!(
            TimingsCache::load(&path, "a").is_none(),
            "the oldest entries go"
        );
        assert!(TimingsCache::load(&path, &format!("k{}", 2 * MAX_ENTRIES - 1)).is_some());
        std::fs::write(&path, "{ not json").unwrap();
        assert!(
            TimingsCache::load(&path, "a").is_none(),
            "a corrupt file is no timings"
        );
        TimingsCache::store(&path, "a", &points(0.01)).unwrap();
        assert!(
            TimingsCache::load(&path, "a").is_some(),
            "and is written over"
        );
        assert!(TimingsCache::store(&path, "z", &[(StepShape::verify(1, 1), f64::NAN)]).is_err());
        assert!(
            TimingsCache::load(&path, "a").is_some(),
            "a refused store keeps the file"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
