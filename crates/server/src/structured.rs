//! Structured-output request fields → one `GrammarSpec`: OpenAI's
//! `response_format` (`json_object`, `json_schema`) and vLLM's extras
//! (`guided_json`, `guided_regex`, `guided_choice`, `guided_grammar`, and the newer
//! `structured_outputs` object, with its JSON options `disable_any_whitespace`,
//! `whitespace_pattern` and `disable_additional_properties`). At most one
//! constraint per request; it is compiled against the model's tokenizer before the
//! request is accepted (a bad schema, regex or grammar is a 400 naming the field)
//! into the matcher the engine enforces while decoding.

use std::sync::{Arc, OnceLock};

use serde_json::Value;
use wring_grammar::{GrammarCompiler, GrammarError, GrammarMatcher, GrammarSpec};
use wring_model::Tokenizer;

use crate::body::json_kind;
use crate::error::ApiError;

/// The structured-output fields a request may carry (absent = None).
#[derive(Debug, Default, Clone, Copy)]
pub struct StructuredFields<'a> {
    pub response_format: Option<&'a Value>,
    pub guided_json: Option<&'a Value>,
    pub guided_regex: Option<&'a Value>,
    pub guided_choice: Option<&'a Value>,
    pub guided_grammar: Option<&'a Value>,
    pub structured_outputs: Option<&'a Value>,
}

/// A validated constraint and the request field it came from (for errors).
#[derive(Debug, Clone, PartialEq)]
pub struct Constraint {
    pub spec: GrammarSpec,
    pub param: String,
}

pub fn parse(f: StructuredFields<'_>) -> Result<Option<Constraint>, ApiError> {
    let mut found: Vec<Constraint> = Vec::new();
    let mut add = |spec: Option<GrammarSpec>, param: &str| {
        if let Some(spec) = spec {
            found.push(Constraint {
                spec,
                param: param.to_string(),
            });
        }
    };
    add(response_format(f.response_format)?, "response_format");
    add(
        present(f.guided_json)
            .map(|v| schema("guided_json", v))
            .transpose()?,
        "guided_json",
    );
    add(
        present(f.guided_regex)
            .map(|v| string("guided_regex", v))
            .transpose()?
            .map(GrammarSpec::Regex),
        "guided_regex",
    );
    add(
        present(f.guided_choice)
            .map(|v| choices("guided_choice", v))
            .transpose()?,
        "guided_choice",
    );
    add(
        present(f.guided_grammar)
            .map(|v| string("guided_grammar", v))
            .transpose()?
            .map(GrammarSpec::Grammar),
        "guided_grammar",
    );
    if let Some(so) = present(f.structured_outputs) {
        for c in structured_outputs(so)? {
            found.push(c);
        }
    }
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop()),
        _ => {
            let names: Vec<&str> = found.iter().map(|c| c.param.as_str()).collect();
            Err(ApiError::invalid_param(
                found[1].param.clone(),
                format!(
                    "Only one structured-output constraint is allowed per request; got {}.",
                    names.join(", ")
                ),
            ))
        }
    }
}

fn present(v: Option<&Value>) -> Option<&Value> {
    v.filter(|v| !v.is_null())
}

fn response_format(v: Option<&Value>) -> Result<Option<GrammarSpec>, ApiError> {
    let Some(v) = present(v) else { return Ok(None) };
    let bad = |msg: String| ApiError::invalid_param("response_format", msg);
    let Some(obj) = v.as_object() else {
        return Err(bad(format!(
            "`response_format` must be an object; got {}.",
            json_kind(v)
        )));
    };
    match obj.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        // A schema beside `json_object` (what `instructor`'s JSON_SCHEMA mode and some hosted
        // APIs send) is honoured, not ignored.
        Some("json_object") => match obj.get("schema") {
            None | Some(Value::Null) => Ok(Some(GrammarSpec::JsonObject)),
            Some(schema) if schema.is_object() => Ok(Some(GrammarSpec::JsonSchema(schema.clone()))),
            Some(other) => Err(ApiError::invalid_param(
                "response_format.schema",
                format!(
                    "The schema must be a JSON object; got {}.",
                    json_kind(other)
                ),
            )),
        },
        Some("json_schema") => {
            let js = obj.get("json_schema").and_then(Value::as_object).ok_or_else(|| {
                ApiError::invalid_param(
                    "response_format.json_schema",
                    "`response_format` of type `json_schema` needs a `json_schema` object with a `schema`.",
                )
            })?;
            let schema = js.get("schema").ok_or_else(|| {
                ApiError::invalid_param(
                    "response_format.json_schema.schema",
                    "`json_schema` needs a `schema`.",
                )
            })?;
            if !schema.is_object() {
                return Err(ApiError::invalid_param(
                    "response_format.json_schema.schema",
                    format!(
                        "The schema must be a JSON object; got {}.",
                        json_kind(schema)
                    ),
                ));
            }
            let mut schema = schema.clone();
            // OpenAI's strict mode: objects have exactly the listed properties.
            if js.get("strict").and_then(Value::as_bool) == Some(true) {
                close_objects(&mut schema);
            }
            Ok(Some(GrammarSpec::JsonSchema(schema)))
        }
        Some(other) => Err(bad(format!(
            "`response_format.type` must be text, json_object or json_schema; got {other:?}."
        ))),
        None => Err(bad("`response_format` needs a string `type`.".into())),
    }
}

fn string(param: &str, v: &Value) -> Result<String, ApiError> {
    v.as_str().map(str::to_string).ok_or_else(|| {
        ApiError::invalid_param(
            param,
            format!("`{param}` must be a string; got {}.", json_kind(v)),
        )
    })
}

/// A schema given as an object or as JSON text.
fn schema(param: &str, v: &Value) -> Result<GrammarSpec, ApiError> {
    let parsed = match v {
        Value::String(s) => serde_json::from_str::<Value>(s).map_err(|e| {
            ApiError::invalid_param(param, format!("`{param}` is not valid JSON: {e}."))
        })?,
        other => other.clone(),
    };
    if !parsed.is_object() {
        return Err(ApiError::invalid_param(
            param,
            format!(
                "`{param}` must be a JSON schema object; got {}.",
                json_kind(&parsed)
            ),
        ));
    }
    Ok(GrammarSpec::JsonSchema(parsed))
}

fn choices(param: &str, v: &Value) -> Result<GrammarSpec, ApiError> {
    let bad = || {
        ApiError::invalid_param(
            param,
            format!("`{param}` must be a non-empty array of strings."),
        )
    };
    let items = v.as_array().filter(|a| !a.is_empty()).ok_or_else(bad)?;
    let list = items
        .iter()
        .map(|i| i.as_str().map(str::to_string))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(bad)?;
    Ok(GrammarSpec::Choice(list))
}

/// vLLM's `structured_outputs: {json | regex | choice | grammar | json_object}`.
fn structured_outputs(v: &Value) -> Result<Vec<Constraint>, ApiError> {
    let Some(obj) = v.as_object() else {
        return Err(ApiError::invalid_param(
            "structured_outputs",
            format!(
                "`structured_outputs` must be an object; got {}.",
                json_kind(v)
            ),
        ));
    };
    let mut out = Vec::new();
    let mut layout = JsonLayout::default();
    for (key, val) in obj {
        if val.is_null() {
            continue;
        }
        let param = format!("structured_outputs.{key}");
        let flag = || {
            val.as_bool().ok_or_else(|| {
                ApiError::invalid_param(param.clone(), format!("`{key}` must be a boolean."))
            })
        };
        let spec = match key.as_str() {
            "json" => schema(&param, val)?,
            "regex" => GrammarSpec::Regex(string(&param, val)?),
            "choice" => choices(&param, val)?,
            "grammar" => GrammarSpec::Grammar(string(&param, val)?),
            "json_object" => match val {
                Value::Bool(true) => GrammarSpec::JsonObject,
                Value::Bool(false) => continue,
                _ => return Err(ApiError::invalid_param(param, "`json_object` must be a boolean.")),
            },
            // Options of the JSON constraints, applied below.
            "disable_any_whitespace" => {
                layout.compact = flag()?;
                continue;
            }
            "disable_additional_properties" => {
                layout.closed_objects = flag()?;
                continue;
            }
            "whitespace_pattern" => {
                layout.whitespace = Some(string(&param, val)?);
                continue;
            }
            other => {
                return Err(ApiError::invalid_param(
                    param,
                    format!("Unknown `structured_outputs` field `{other}`; expected json, regex, choice, grammar or json_object."),
                ))
            }
        };
        out.push(Constraint { spec, param });
    }
    for c in &mut out {
        layout.apply(&mut c.spec);
    }
    Ok(out)
}

/// vLLM's options for JSON constraints (no effect on the others).
#[derive(Debug, Default)]
struct JsonLayout {
    /// `disable_any_whitespace`: no whitespace between JSON tokens.
    compact: bool,
    /// `whitespace_pattern`: the regex whitespace between JSON tokens must match.
    whitespace: Option<String>,
    /// `disable_additional_properties`: objects with `properties` and no
    /// `additionalProperties` get `additionalProperties: false`.
    closed_objects: bool,
}

impl JsonLayout {
    fn apply(&self, spec: &mut GrammarSpec) {
        if !self.compact && self.whitespace.is_none() && !self.closed_objects {
            return;
        }
        let schema = match spec {
            GrammarSpec::JsonObject => serde_json::json!({"type": "object"}),
            GrammarSpec::JsonSchema(s) => s.clone(),
            _ => return,
        };
        let mut schema = schema;
        if self.closed_objects {
            close_objects(&mut schema);
        }
        if let Some(o) = schema.as_object_mut() {
            if self.compact {
                o.insert(
                    "x-guidance".into(),
                    serde_json::json!({"whitespace_flexible": false}),
                );
            } else if let Some(p) = &self.whitespace {
                o.insert(
                    "x-guidance".into(),
                    serde_json::json!({"whitespace_pattern": p}),
                );
            }
        }
        *spec = GrammarSpec::JsonSchema(schema);
    }
}

/// Sets `additionalProperties: false` on every object schema with `properties`
/// that does not say otherwise, through nested schemas and definitions (what
/// vLLM's default grammar backend does for every schema: a model otherwise keeps
/// inventing keys). Used for `disable_additional_properties`, `strict` JSON
/// schemas and forced tool calls.
pub(crate) fn close_objects(v: &mut Value) {
    match v {
        Value::Object(o) => {
            if o.contains_key("properties") && !o.contains_key("additionalProperties") {
                o.insert("additionalProperties".into(), Value::Bool(false));
            }
            for (k, child) in o.iter_mut() {
                // Literal values are data, not schemas.
                if !matches!(k.as_str(), "const" | "enum" | "default" | "examples") {
                    close_objects(child);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(close_objects),
        _ => {}
    }
}

/// The server's grammar compiler, built on first use (it indexes the vocabulary).
#[derive(Default)]
pub struct Grammars {
    compiler: OnceLock<Result<GrammarCompiler, String>>,
}

impl Grammars {
    pub fn compiler(
        &self,
        tokenizer: &Arc<Tokenizer>,
        eos: &[u32],
    ) -> Result<&GrammarCompiler, ApiError> {
        self.compiler
            .get_or_init(|| {
                GrammarCompiler::new(tokenizer, eos, tokenizer.vocab_size())
                    .map_err(|e| format!("{e:#}"))
            })
            .as_ref()
            .map_err(|e| ApiError::internal(format!("The grammar engine could not be set up: {e}")))
    }
}

/// Compiles `c` into the matcher the engine enforces; a bad constraint is a 400
/// naming its field.
pub fn compile(compiler: &GrammarCompiler, c: &Constraint) -> Result<GrammarMatcher, ApiError> {
    compiler.compile(&c.spec).map_err(|e| match e {
        GrammarError::Invalid(msg) => {
            ApiError::invalid_param(c.param.clone(), format!("Invalid `{}`: {msg}", c.param))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn one(f: StructuredFields<'_>) -> Result<Option<GrammarSpec>, ApiError> {
        parse(f).map(|c| c.map(|c| c.spec))
    }

    #[test]
    fn each_field_maps_to_its_constraint() {
        let rf = json!({"type": "json_schema", "json_schema": {"name": "p", "schema": {"type": "object"}}});
        assert_eq!(
            one(StructuredFields {
                response_format: Some(&rf),
                ..Default::default()
            })
            .unwrap(),
            Some(GrammarSpec::JsonSchema(json!({"type": "object"})))
        );
        let text = json!({"type": "text"});
        assert_eq!(
            one(StructuredFields {
                response_format: Some(&text),
                ..Default::default()
            })
            .unwrap(),
            None
        );
        let with_schema =
            json!({"type": "json_object", "schema": {"type": "object", "required": ["a"]}});
        assert_eq!(
            one(StructuredFields {
                response_format: Some(&with_schema),
                ..Default::default()
            })
            .unwrap(),
            Some(GrammarSpec::JsonSchema(
                json!({"type": "object", "required": ["a"]})
            )),
            "a schema beside json_object is honoured"
        );
        let bad = json!({"type": "json_object", "schema": "x"});
        let e = parse(StructuredFields {
            response_format: Some(&bad),
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("response_format.schema"));
        let jo = json!({"type": "json_object"});
        assert_eq!(
            one(StructuredFields {
                response_format: Some(&jo),
                ..Default::default()
            })
            .unwrap(),
            Some(GrammarSpec::JsonObject)
        );
        let gj = json!("{\"type\": \"string\"}");
        assert_eq!(
            one(StructuredFields {
                guided_json: Some(&gj),
                ..Default::default()
            })
            .unwrap(),
            Some(GrammarSpec::JsonSchema(json!({"type": "string"})))
        );
        let ch = json!(["a", "b"]);
        assert_eq!(
            one(StructuredFields {
                guided_choice: Some(&ch),
                ..Default::default()
            })
            .unwrap(),
            Some(GrammarSpec::Choice(vec!["a".into(), "b".into()]))
        );
        let so = json!({"regex": "[a-z]+", "disable_any_whitespace": true});
        assert_eq!(
            one(StructuredFields {
                structured_outputs: Some(&so),
                ..Default::default()
            })
            .unwrap(),
            Some(GrammarSpec::Regex("[a-z]+".into()))
        );
    }

    #[test]
    fn structured_outputs_json_options_shape_the_schema() {
        let so = json!({"json_object": true, "disable_any_whitespace": true});
        assert_eq!(
            one(StructuredFields {
                structured_outputs: Some(&so),
                ..Default::default()
            })
            .unwrap(),
            Some(GrammarSpec::JsonSchema(
                json!({"type": "object", "x-guidance": {"whitespace_flexible": false}})
            ))
        );
        let so = json!({
            "json": {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"const": {"properties": 1}}}}},
                     "$defs": {"d": {"properties": {}, "additionalProperties": true}}},
            "disable_additional_properties": true,
            "whitespace_pattern": " ?"
        });
        let Some(GrammarSpec::JsonSchema(s)) = one(StructuredFields {
            structured_outputs: Some(&so),
            ..Default::default()
        })
        .unwrap() else {
            panic!("a schema")
        };
        assert_eq!(s["additionalProperties"], false);
        assert_eq!(s["properties"]["a"]["additionalProperties"], false);
        assert_eq!(
            s["properties"]["a"]["properties"]["b"]["const"],
            json!({"properties": 1})
        );
        assert_eq!(s["$defs"]["d"]["additionalProperties"], true);
        assert_eq!(s["x-guidance"], json!({"whitespace_pattern": " ?"}));
        // Options do not touch other constraints; a non-boolean flag is named.
        let so = json!({"regex": "a+", "disable_any_whitespace": true});
        assert_eq!(
            one(StructuredFields {
                structured_outputs: Some(&so),
                ..Default::default()
            })
            .unwrap(),
            Some(GrammarSpec::Regex("a+".into()))
        );
        let so = json!({"json_object": true, "disable_any_whitespace": "yes"});
        let e = parse(StructuredFields {
            structured_outputs: Some(&so),
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(
            e.param.as_deref(),
            Some("structured_outputs.disable_any_whitespace")
        );
    }

    #[test]
    fn bad_fields_are_named() {
        let cases: Vec<(StructuredFields<'static>, &str)> = vec![
            (
                StructuredFields {
                    response_format: Some(Box::leak(Box::new(json!("json")))),
                    ..Default::default()
                },
                "response_format",
            ),
            (
                StructuredFields {
                    response_format: Some(Box::leak(Box::new(json!({"type": "xml"})))),
                    ..Default::default()
                },
                "response_format",
            ),
            (
                StructuredFields {
                    response_format: Some(Box::leak(Box::new(json!({"type": "json_schema"})))),
                    ..Default::default()
                },
                "response_format.json_schema",
            ),
            (
                StructuredFields {
                    response_format: Some(Box::leak(Box::new(
                        json!({"type": "json_schema", "json_schema": {"name": "x"}}),
                    ))),
                    ..Default::default()
                },
                "response_format.json_schema.schema",
            ),
            (
                StructuredFields {
                    guided_json: Some(Box::leak(Box::new(json!("{nope")))),
                    ..Default::default()
                },
                "guided_json",
            ),
            (
                StructuredFields {
                    guided_regex: Some(Box::leak(Box::new(json!(3)))),
                    ..Default::default()
                },
                "guided_regex",
            ),
            (
                StructuredFields {
                    guided_choice: Some(Box::leak(Box::new(json!([])))),
                    ..Default::default()
                },
                "guided_choice",
            ),
            (
                StructuredFields {
                    structured_outputs: Some(Box::leak(Box::new(json!({"yaml": "x"})))),
                    ..Default::default()
                },
                "structured_outputs.yaml",
            ),
            (
                StructuredFields {
                    guided_regex: Some(Box::leak(Box::new(json!("a")))),
                    guided_choice: Some(Box::leak(Box::new(json!(["a"])))),
                    ..Default::default()
                },
                "guided_choice",
            ),
        ];
        for (f, param) in cases {
            let e = parse(f).unwrap_err();
            assert_eq!(e.status, 400);
            assert_eq!(e.param.as_deref(), Some(param), "{}", e.message);
        }
    }
}
