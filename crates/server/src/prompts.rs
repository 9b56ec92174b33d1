//! `/v1/completions` prompts: a string, an array of token ids, or a batch (an array
//! of strings or of token-id arrays); each becomes its own engine request.

use serde_json::Value;

use crate::body::json_kind;
use crate::error::ApiError;

/// Most prompts one request may batch.
pub const MAX_PROMPTS: usize = 64;

/// What a completions request asks to continue.
#[derive(Debug, Clone, PartialEq)]
pub enum PromptInput {
    Text(String),
    Ids(Vec<u32>),
}

pub fn prompt_inputs(
    prompt: Option<&Value>,
    vocab_size: usize,
) -> Result<Vec<PromptInput>, ApiError> {
    let bad = |what: String| ApiError::invalid_param("prompt", what);
    let ids = |items: &[Value], which: &str| -> Result<Vec<u32>, ApiError> {
        if items.is_empty() {
            return Err(bad(format!("{which}must not be empty.")));
        }
        items
            .iter()
            .map(|v| {
                let id = v.as_u64().ok_or_else(|| {
                    bad(format!(
                        "{which}Token ids must be non-negative integers; got {v}."
                    ))
                })?;
                if id as usize >= vocab_size {
                    return Err(bad(format!(
                        "{which}Token id {id} is outside the vocabulary (size {vocab_size})."
                    )));
                }
                Ok(id as u32)
            })
            .collect()
    };
    match prompt {
        None | Some(Value::Null) => Err(bad("`prompt` is required.".into())),
        Some(Value::String(s)) => Ok(vec![PromptInput::Text(s.clone())]),
        Some(Value::Array(items)) => match items.first() {
            None => Err(bad("`prompt` must not be empty.".into())),
            Some(Value::Number(_)) => Ok(vec![PromptInput::Ids(ids(items, "")?)]),
            Some(Value::String(_) | Value::Array(_)) => {
                if items.len() > MAX_PROMPTS {
                    return Err(bad(format!(
                        "At most {MAX_PROMPTS} prompts may be batched in one request; got {}.",
                        items.len()
                    )));
                }
                let strings = items[0].is_string();
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| match item {
                        Value::String(s) if strings => Ok(PromptInput::Text(s.clone())),
                        Value::Array(inner) if !strings => Ok(PromptInput::Ids(ids(inner, &format!("Prompt {i}: "))?)),
                        other => Err(bad(format!(
                            "A batch of prompts must be all strings or all token-id arrays; prompt {i} is {}.",
                            json_kind(other)
                        ))),
                    })
                    .collect()
            }
            Some(other) => Err(bad(format!(
                "`prompt` must be a string, an array of token ids, or an array of either; found {}.",
                json_kind(other)
            ))),
        },
        Some(other) => Err(bad(format!(
            "`prompt` must be a string or an array of token ids; got {}.",
            json_kind(other)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn single_and_batched_prompts() {
        let p = |v: Value| prompt_inputs(Some(&v), 1000);
        assert_eq!(
            p(json!("hi")).unwrap(),
            vec![PromptInput::Text("hi".into())]
        );
        assert_eq!(
            p(json!([1, 2])).unwrap(),
            vec![PromptInput::Ids(vec![1, 2])]
        );
        assert_eq!(
            p(json!([[1], [2, 3]])).unwrap(),
            vec![PromptInput::Ids(vec![1]), PromptInput::Ids(vec![2, 3])]
        );
        assert_eq!(
            p(json!(["a", "b"])).unwrap(),
            vec![PromptInput::Text("a".into()), PromptInput::Text("b".into())]
        );
        for bad in [
            json!([]),
            json!([1, -2]),
            json!([5000]),
            json!({"a": 1}),
            json!([[]]),
            json!(["a", 1]),
            json!(["a", [1]]),
            json!([[1], "a"]),
            json!([true]),
        ] {
            let e = p(bad.clone()).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("prompt"), "{bad}");
        }
        assert!(p(Value::Array(vec![json!("x"); MAX_PROMPTS + 1])).is_err());
        assert!(prompt_inputs(None, 10).is_err());
    }
}
