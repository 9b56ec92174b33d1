//! The grammar matcher over the default model's real tokenizer: masks, advancing,
//! draft checks and precise errors for each kind of constraint.

use std::sync::OnceLock;

use serde_json::json;
use wring_grammar::{GrammarCompiler, GrammarError, GrammarSpec};
use wring_model::{ModelSpec, Tokenizer};

struct Fixture {
    compiler: GrammarCompiler,
    tokenizer: std::sync::Arc<Tokenizer>,
    eos: Vec<u32>,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let model = wring_model::load_model(&ModelSpec::default())
            .expect("the default model loads (run `wring pull`)");
        let vocab = model.config.vocab_size;
        let compiler = GrammarCompiler::new(&model.tokenizer, &model.eos_token_ids, vocab).unwrap();
        Fixture {
            compiler,
            tokenizer: model.tokenizer.clone(),
            eos: model.eos_token_ids.clone(),
        }
    })
}

fn ids(text: &str) -> Vec<u32> {
    fixture().tokenizer.encode(text).unwrap()
}

/// Feeds `text`'s tokens one by one, checking each is in the mask first; returns
/// how many were accepted.
fn feed(spec: &GrammarSpec, text: &str) -> (usize, usize, wring_grammar::GrammarMatcher) {
    let f = fixture();
    let mut m = f.compiler.compile(spec).unwrap();
    let toks = ids(text);
    for (i, &t) in toks.iter().enumerate() {
        if !m.allowed_tokens().unwrap().allows(t) {
            return (i, toks.len(), m);
        }
        m.advance(&[t]).unwrap();
    }
    (toks.len(), toks.len(), m)
}

fn eos_allowed(m: &mut wring_grammar::GrammarMatcher) -> bool {
    let mask = m.allowed_tokens().unwrap();
    fixture().eos.iter().any(|&e| mask.allows(e))
}

fn person_schema() -> GrammarSpec {
    GrammarSpec::JsonSchema(json!({
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": false
    }))
}

#[test]
fn json_schema_accepts_a_valid_object_and_then_only_allows_stopping() {
    let (ok, n, mut m) = feed(&person_schema(), r#"{"name": "Ann", "age": 31}"#);
    assert_eq!(ok, n, "every token of a valid object is allowed");
    assert!(m.is_accepting());
    assert!(eos_allowed(&mut m), "a complete object may stop");
    let mask = m.allowed_tokens().unwrap();
    assert!(
        !mask.allows(ids(",")[0]),
        "nothing may follow the closing brace"
    );
}

#[test]
fn json_schema_rejects_wrong_types_and_unknown_keys() {
    let (ok, n, mut m) = feed(&person_schema(), r#"{"name": 5"#);
    assert!(ok < n, "a number where a string is required");
    assert!(!eos_allowed(&mut m));
    let (ok, n, _) = feed(&person_schema(), r#"{"nick": "x"}"#);
    assert!(ok < n, "additionalProperties: false");
    // An open object may not stop early either.
    let (ok, n, mut m) = feed(&person_schema(), r#"{"name": "Ann""#);
    assert_eq!(ok, n);
    assert!(!eos_allowed(&mut m), "age is required");
}

#[test]
fn json_object_allows_any_object_but_not_other_values() {
    let (ok, n, mut m) = feed(&GrammarSpec::JsonObject, r#"{"a": [1, 2, {"b": null}]}"#);
    assert_eq!(ok, n);
    assert!(eos_allowed(&mut m));
    let (ok, _, _) = feed(&GrammarSpec::JsonObject, "[1]");
    assert_eq!(ok, 0, "an array is not an object");
}

#[test]
fn json_object_strings_are_bounded_so_a_loop_must_close() {
    use wring_grammar::JSON_OBJECT_MAX_STRING;
    let value = |len: usize| {
        format!(
            r#"{{"a": {{"b": ["{}"]}}}}"#,
            &"la France, ".repeat(len / 11 + 1)[..len]
        )
    };
    let (ok, n, mut m) = feed(&GrammarSpec::JsonObject, &value(JSON_OBJECT_MAX_STRING));
    assert_eq!(ok, n, "a string of the longest allowed length, nested");
    assert!(eos_allowed(&mut m));
    // One character more: the string must have closed before it.
    let (ok, n, _) = feed(&GrammarSpec::JsonObject, &value(JSON_OBJECT_MAX_STRING + 1));
    assert!(ok < n, "a string past {JSON_OBJECT_MAX_STRING} characters");
    // Escapes, nesting, every kind of value, and an empty object still parse.
    for text in [
        r#"{"s": "a \"quoted\" word\né", "x": -1.5e3, "t": true, "f": false, "z": null, "o": {"p": [1, {}, []]}}"#,
        "{}",
        "{ \"a\" : [ ] }",
    ] {
        let (ok, n, mut m) = feed(&GrammarSpec::JsonObject, text);
        assert_eq!(ok, n, "{text}");
        assert!(eos_allowed(&mut m), "{text}");
        serde_json::from_str::<serde_json::Value>(text).expect("the test's text is JSON");
    }
    let (ok, n, _) = feed(&GrammarSpec::JsonObject, "{\"a\": \"x\u{1}\"}");
    assert!(ok < n, "a raw control character inside a string");
}

#[test]
fn regex_choice_and_grammars() {
    let rx = GrammarSpec::Regex("[0-9]{3}-[a-z]+".into());
    let (ok, n, mut m) = feed(&rx, "123-abc");
    assert_eq!(ok, n);
    assert!(eos_allowed(&mut m));
    let (ok, n, _) = feed(&rx, "12a");
    assert!(ok < n);

    let choice = GrammarSpec::Choice(vec!["yes".into(), "no".into(), "a.b".into()]);
    let (ok, n, mut m) = feed(&choice, "yes");
    assert_eq!(ok, n);
    assert!(eos_allowed(&mut m));
    let (ok, n, _) = feed(&choice, "axb");
    assert!(ok < n, "choices are literal strings, not regexes");
    let (ok, n, _) = feed(&choice, "maybe");
    assert!(ok < n);

    let lark = GrammarSpec::Grammar("start: item (\",\" item)*\nitem: \"x\" | \"y\"".into());
    let (ok, n, mut m) = feed(&lark, "x,y,x");
    assert_eq!(ok, n);
    assert!(eos_allowed(&mut m));
    assert!(feed(&lark, "x,,").0 < ids("x,,").len());

    let gbnf = GrammarSpec::Grammar(
        "root ::= dir (\" \" dir)*\ndir ::= \"up\" | \"down\" | [0-9]+".into(),
    );
    let (ok, n, mut m) = feed(&gbnf, "down up 42");
    assert_eq!(ok, n);
    assert!(eos_allowed(&mut m));
    assert!(feed(&gbnf, "left").0 < ids("left").len());
}

#[test]
fn a_draft_is_checked_without_advancing() {
    let f = fixture();
    let mut m = f.compiler.compile(&person_schema()).unwrap();
    // The name is complete, but `age` is required: the closing brace is rejected.
    let good = ids(r#"{"name": "Bo""#);
    let mut draft = good.clone();
    draft.extend(ids("}"));
    assert_eq!(m.allowed_prefix_len(&draft).unwrap(), good.len());
    // Nothing was consumed: the first token is still the one allowed first.
    assert!(m.allowed_tokens().unwrap().allows(good[0]));
    m.advance(&good).unwrap();
    let rest = ids(r#", "age": 4}"#);
    assert_eq!(m.allowed_prefix_len(&rest).unwrap(), rest.len());
    // Rolling back restores the earlier state.
    m.rollback(good.len()).unwrap();
    assert_eq!(m.allowed_prefix_len(&good).unwrap(), good.len());
}

#[test]
fn the_mask_sets_forbidden_logits_to_minus_infinity() {
    let f = fixture();
    let mut m = f
        .compiler
        .compile(&GrammarSpec::Choice(vec!["yes".into(), "no".into()]))
        .unwrap();
    let mask = m.allowed_tokens().unwrap();
    let allowed = mask.count();
    assert!((2..100).contains(&allowed), "{allowed} tokens start yes/no");
    let mut logits = vec![0.0f32; f.compiler.vocab_size()];
    mask.apply(&mut logits);
    assert_eq!(logits.iter().filter(|l| l.is_finite()).count(), allowed);
    assert!(logits[ids("yes")[0] as usize].is_finite());
}

#[test]
fn bad_constraints_get_precise_errors() {
    let f = fixture();
    let cases = [
        (GrammarSpec::Regex("(".into()), "regex"),
        (GrammarSpec::Choice(vec![]), "choices"),
        (GrammarSpec::Grammar("start: (".into()), "grammar"),
        (GrammarSpec::Grammar("  ".into()), "empty"),
        (GrammarSpec::JsonSchema(json!("string")), "object"),
        (
            GrammarSpec::JsonSchema(json!({"type": "nonsense"})),
            "json_schema",
        ),
        (
            GrammarSpec::JsonSchema(json!({"$ref": "#/$defs/missing"})),
            "json_schema",
        ),
    ];
    for (spec, needle) in cases {
        match f.compiler.compile(&spec) {
            Err(GrammarError::Invalid(msg)) => {
                assert!(msg.contains(needle), "{spec:?}: {msg}")
            }
            Ok(_) => panic!("{spec:?} compiled"),
        }
    }
}

#[test]
fn json_layout_is_bounded_unless_the_schema_sets_its_own() {
    let spaces = |n: usize| format!("{{{}\"a\": 1}}", " ".repeat(n));
    let (ok, n, _) = feed(&GrammarSpec::JsonObject, &spaces(16));
    assert_eq!(ok, n, "16 whitespace characters between tokens are allowed");
    let (ok, n, _) = feed(&GrammarSpec::JsonObject, &spaces(40));
    assert!(ok < n, "40 are not");
    let own = GrammarSpec::JsonSchema(
        json!({"type": "object", "x-guidance": {"whitespace_flexible": false}}),
    );
    let (ok, n, _) = feed(&own, &spaces(1));
    assert!(ok < n, "a compact layout allows no whitespace");
    let (ok, n, mut m) = feed(&own, "{\"a\":1}");
    assert_eq!(ok, n);
    assert!(eos_allowed(&mut m));
}

#[test]
fn lark_grammars_embed_json_schemas() {
    let args = wring_grammar::with_json_layout(&json!({
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
        "additionalProperties": false
    }));
    let g = GrammarSpec::Grammar(format!(
        "start: call\ncall: \"get_weather\\\", \\\"arguments\\\": \" args \"}}\"\nargs: %json {args}"
    ));
    let (ok, n, mut m) = feed(&g, r#"get_weather", "arguments": {"city": "Oslo"}}"#);
    assert_eq!(ok, n);
    assert!(m.is_finished() || eos_allowed(&mut m));
    let (ok, n, _) = feed(&g, r#"get_weather", "arguments": {"town": "Oslo"}}"#);
    assert!(ok < n, "the arguments follow the schema");
}

#[test]
fn a_clone_advances_independently() {
    let f = fixture();
    let mut a = f.compiler.compile(&person_schema()).unwrap();
    let mut b = a.clone();
    a.advance(&ids(r#"{"name""#)).unwrap();
    // b is still at the start: a quote is not allowed before the brace.
    assert!(!b.allowed_tokens().unwrap().allows(ids("\"")[0]));
    assert!(b.allowed_tokens().unwrap().allows(ids("{")[0]));
    assert!(a.allowed_tokens().unwrap().allows(ids(":")[0]));
}

/// The grammar of a forced call to one of two tools, as the server writes it (the
/// prompt ends with `{"name": "`).
fn two_tools() -> GrammarSpec {
    let args = |key: &str| {
        json!({"type": "object", "properties": {key: {"type": "string"}},
               "required": [key], "additionalProperties": false})
    };
    GrammarSpec::Grammar(format!(
        "start: call_0 | call_1\n\
         call_0: \"get_weather\\\", \\\"arguments\\\": \" args_0 \"}}\"\n\
         call_1: \"record_person\\\", \\\"arguments\\\": \" args_1 \"}}\"\n\
         args_0: %json {}\nargs_1: %json {}",
        args("city"),
        args("name")
    ))
}

#[test]
fn forced_tokens_are_the_only_ones_allowed_and_leave_the_matcher_where_it_was() {
    let f = fixture();
    let text = |t: &[u32]| f.tokenizer.decode(t, false).unwrap();
    let cases = [
        (
            person_schema(),
            r#"{"name": "Ann", "age": 31}"#,
            vec!["name", "age"],
        ),
        (
            GrammarSpec::Regex("[A-Z]{2}-[0-9]{3}".into()),
            "AB-123",
            vec!["-"],
        ),
        (
            GrammarSpec::Choice(vec!["north pole".into(), "south pole".into()]),
            "north pole",
            vec![" pole"],
        ),
        (
            two_tools(),
            r#"get_weather", "arguments": {"city": "Paris"}}"#,
            // After `get` the name and the arguments key are fixed; llguidance keeps back
            // the bytes a later token could lengthen (the space after the colon).
            vec![
                r#"_weather", "arguments":"#,
                r#"weather", "arguments":"#,
                r#"", "arguments":"#,
                r#" "arguments":"#,
                r#"arguments":"#,
                r#"":"#,
                "city",
            ],
        ),
    ];
    for (spec, output, expected) in cases {
        let mut m = f.compiler.compile(&spec).unwrap();
        let mut runs = Vec::new();
        for t in ids(output) {
            let mut untouched = m.clone();
            let forced = m.forced_tokens(16).unwrap();
            assert!(m.forced_tokens(0).unwrap().is_empty());
            let mask = m.allowed_tokens().unwrap();
            assert_eq!(
                mask.words(),
                untouched.allowed_tokens().unwrap().words(),
                "{spec:?}: asking for the forced tokens changed the mask"
            );
            if let Some(&first) = forced.first() {
                assert_eq!(mask.count(), 1, "{spec:?}: {forced:?} is forced");
                assert!(mask.allows(first));
                assert_eq!(m.allowed_prefix_len(&forced).unwrap(), forced.len());
                assert_eq!(m.forced_tokens(1).unwrap(), vec![first]);
                runs.push(text(&forced));
            }
            m.advance(&[t]).unwrap();
        }
        assert!(m.is_accepting(), "{spec:?}");
        assert_eq!(runs, expected, "{spec:?}");
        // Nothing is forced once the output is complete.
        let mut done = f.compiler.compile(&spec).unwrap();
        done.advance(&ids(output)).unwrap();
        assert!(done.forced_tokens(16).unwrap().is_empty(), "{spec:?}");
    }
}
