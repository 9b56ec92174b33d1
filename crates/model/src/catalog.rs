//! Models wring knows by name, with what their publishers state outside the checkpoint's own
//! files: the sampling a model card recommends. A checkpoint's generation config (or a GGUF's
//! `general.sampling.*`) still wins; the card only fills in for checkpoints that ship none,
//! as the default model's GGUF and SmolLM2's `generation_config.json` do.

use std::path::Path;

use crate::config::GenerationDefaults;

/// A model known by its Hugging Face id.
#[derive(Debug, Clone, Copy)]
pub struct KnownModel {
    pub hub_id: &'static str,
    /// The sampling its model card recommends.
    pub card_sampling: GenerationDefaults,
    pub card_url: &'static str,
    /// The system message wring's chat commands send when `--system` is absent, where one
    /// measured better than what the template inserts on its own; `None` keeps the template's.
    pub cli_system: Option<&'static str>,
}

/// SmolLM2's cards (all three instruct sizes) generate with `temperature=0.2, top_p=0.9`.
const SMOLLM2_CARD: GenerationDefaults = GenerationDefaults {
    temperature: Some(0.2),
    top_p: Some(0.9),
    top_k: None,
    min_p: None,
};

/// An empty system turn. SmolLM2's template otherwise inserts "You are a helpful AI assistant
/// named SmolLM, trained by Hugging Face", which on the 135M model flattens the first token of
/// short factual answers: for "What is the capital of France?" (q8 weights) "The" 0.14 vs "L"
/// 0.13 with it, "The" 0.53 with an empty one (results/2026-12-04-host-and-drafts,
/// "Why the default chat's first answer … varies"); `wring chat` at the card's temperature 0.2, seeds 1–3, named Paris 1 of
/// 3 times with it and 3 of 3 without. Only the 135M was measured, so only it gets this.
const SMOLLM2_135M_CLI_SYSTEM: &str = "";

pub const KNOWN_MODELS: &[KnownModel] = &[
    KnownModel {
        hub_id: "HuggingFaceTB/SmolLM2-135M-Instruct",
        card_sampling: SMOLLM2_CARD,
        card_url: "https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct",
        cli_system: Some(SMOLLM2_135M_CLI_SYSTEM),
    },
    KnownModel {
        hub_id: "HuggingFaceTB/SmolLM2-360M-Instruct",
        card_sampling: SMOLLM2_CARD,
        card_url: "https://huggingface.co/HuggingFaceTB/SmolLM2-360M-Instruct",
        cli_system: None,
    },
    KnownModel {
        hub_id: "HuggingFaceTB/SmolLM2-1.7B-Instruct",
        card_sampling: SMOLLM2_CARD,
        card_url: "https://huggingface.co/HuggingFaceTB/SmolLM2-1.7B-Instruct",
        cli_system: None,
    },
];

/// The known model a file or directory is, by its name: a directory named after the model
/// (`SmolLM2-135M-Instruct`, or `HuggingFaceTB--SmolLM2-135M-Instruct` as `$WRING_HOME/hub`
/// stores Hub downloads), or a GGUF named after it with an optional quantisation tag
/// (`SmolLM2-135M-Instruct.Q4_1.gguf`, the default model; `SmolLM2-135M-Instruct-Q8_0.gguf`).
/// A fine-tune under another name is not the model its card describes, so it never matches.
pub fn known_model(path: &Path) -> Option<&'static KnownModel> {
    let file = path.file_name()?.to_str()?;
    let stem = if path.is_dir() {
        file.rsplit("--").next().unwrap_or(file)
    } else {
        file.strip_suffix(".gguf")?
    };
    let stem = stem.to_ascii_lowercase();
    KNOWN_MODELS.iter().find(|m| {
        let name = m.hub_id.rsplit('/').next().unwrap_or(m.hub_id);
        match stem.strip_prefix(&name.to_ascii_lowercase()) {
            Some("") => true,
            Some(rest) if !path.is_dir() => is_quant_tag(rest),
            _ => false,
        }
    })
}

/// `.Q4_1`, `-Q8_0`, `-IQ4_XS`, `.f16`, `-bf16`, `-F32`: what GGUF publishers append to the name.
fn is_quant_tag(rest: &str) -> bool {
    let Some(tag) = rest.strip_prefix(['.', '-', '_']) else {
        return false;
    };
    let starts_quant = |t: &str| {
        t.strip_prefix('q')
            .or_else(|| t.strip_prefix("iq"))
            .is_some_and(|d| d.starts_with(|c: char| c.is_ascii_digit()))
    };
    matches!(tag, "f16" | "bf16" | "f32") || starts_quant(tag)
}

/// The system message wring's chat commands use for the model at `path` when the user gives
/// none, with `None` meaning the template's own.
pub fn cli_system_default(path: &Path) -> Option<&'static str> {
    known_model(path).and_then(|m| m.cli_system)
}

/// Where a model's sampling defaults come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SamplingSource {
    /// The model states none.
    #[default]
    None,
    /// The checkpoint: `generation_config.json`, or a GGUF's `general.sampling.*`.
    GenerationConfig,
    /// Its publisher's model card (`KNOWN_MODELS`), for a checkpoint that ships none.
    ModelCard,
}

impl SamplingSource {
    pub fn label(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::GenerationConfig => "generation config",
            Self::ModelCard => "model card",
        }
    }
}

/// A model's own sampling defaults and where they come from.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ModelSampling {
    pub defaults: GenerationDefaults,
    pub source: SamplingSource,
}

/// The generation defaults of the model at `path`: a directory's `generation_config.json`, a
/// GGUF file's `general.sampling.*` keys; none when absent or unreadable.
fn checkpoint_generation_defaults(path: &Path) -> GenerationDefaults {
    if path.is_dir() {
        return std::fs::read_to_string(path.join("generation_config.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .map(|v| GenerationDefaults::from_hf_json(&v))
            .unwrap_or_default();
    }
    crate::gguf::GgufFile::open(path)
        .map(|g| g.generation_defaults())
        .unwrap_or_default()
}

impl ModelSampling {
    /// The checkpoint's generation config when it sets any sampling field (all of them, never
    /// mixed with the card: a publisher's settings are tuned together), else the model card's
    /// recommendation for a known model, else none.
    pub fn of_model(path: &Path) -> Self {
        Self::resolve(
            checkpoint_generation_defaults(path),
            known_model(path).map(|m| m.card_sampling),
        )
    }

    pub fn resolve(checkpoint: GenerationDefaults, card: Option<GenerationDefaults>) -> Self {
        match card {
            _ if !checkpoint.is_empty() => Self {
                defaults: checkpoint,
                source: SamplingSource::GenerationConfig,
            },
            Some(card) => Self {
                defaults: card,
                source: SamplingSource::ModelCard,
            },
            None => Self::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn known_models_match_by_name_and_quant_tag_only() {
        let smol = |p: &str| known_model(&PathBuf::from(p)).map(|m| m.hub_id);
        let id = Some("HuggingFaceTB/SmolLM2-135M-Instruct");
        assert_eq!(smol("/m/SmolLM2-135M-Instruct.Q4_1.gguf"), id);
        assert_eq!(smol("smollm2-135m-instruct-q8_0.gguf"), id);
        assert_eq!(smol("SmolLM2-135M-Instruct-IQ4_XS.gguf"), id);
        assert_eq!(smol("SmolLM2-135M-Instruct.f16.gguf"), id);
        assert_eq!(smol("SmolLM2-135M-Instruct.gguf"), id);
        assert_eq!(
            smol("SmolLM2-360M-Instruct-Q4_K_M.gguf"),
            Some("HuggingFaceTB/SmolLM2-360M-Instruct")
        );
        // Not the card's model: a fine-tune, the base model, another file type.
        assert_eq!(smol("SmolLM2-135M-Instruct-finetuned.Q4_1.gguf"), None);
        assert_eq!(smol("SmolLM2-135M.Q4_1.gguf"), None);
        assert_eq!(smol("SmolLM2-135M-Instruct.Q4_1.bin"), None);
        assert_eq!(smol("Llama-3.2-1B-Instruct-Q4_0.gguf"), None);
    }

    #[test]
    fn only_the_measured_model_gets_an_empty_cli_system_turn() {
        let sys = |p: &str| cli_system_default(&PathBuf::from(p));
        assert_eq!(sys("/m/SmolLM2-135M-Instruct.Q4_1.gguf"), Some(""));
        assert_eq!(sys("/m/SmolLM2-360M-Instruct.Q4_1.gguf"), None);
        assert_eq!(sys("/m/Llama-3.2-1B-Instruct-Q4_0.gguf"), None);
    }

    #[test]
    fn hub_directories_match_by_their_id() {
        let dir = tempfile::tempdir().unwrap();
        for (name, want) in [
            ("HuggingFaceTB--SmolLM2-1.7B-Instruct", true),
            ("SmolLM2-1.7B-Instruct", true),
            ("SmolLM2-1.7B-Instruct-Q8_0", false),
            ("someone--SmolLM2-1.7B-Instruct-dpo", false),
        ] {
            let p = dir.path().join(name);
            std::fs::create_dir(&p).unwrap();
            assert_eq!(known_model(&p).is_some(), want, "{name}");
        }
    }

    #[test]
    fn the_generation_config_wins_whole_and_the_card_fills_in_for_none() {
        let card = SMOLLM2_CARD;
        let cfg = GenerationDefaults {
            temperature: Some(0.6),
            ..Default::default()
        };
        let m = ModelSampling::resolve(cfg, Some(card));
        assert_eq!(m.source, SamplingSource::GenerationConfig);
        assert_eq!(m.defaults, cfg, "no card top_p mixed in");
        let m = ModelSampling::resolve(GenerationDefaults::default(), Some(card));
        assert_eq!(m.source, SamplingSource::ModelCard);
        assert_eq!(m.defaults.temperature, Some(0.2));
        assert_eq!(m.defaults.top_p, Some(0.9));
        let m = ModelSampling::resolve(GenerationDefaults::default(), None);
        assert_eq!(m, ModelSampling::default());
        assert!(m.defaults.is_empty());
    }

    #[test]
    fn the_default_model_file_is_known() {
        assert!(known_model(&crate::hub::default_model_path()).is_some());
    }
}
