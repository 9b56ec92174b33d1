//! Structured output in the engine, on the real default model (greedy, CPU): the
//! grammar decides the shape of every output (JSON schema, regex, choice, Lark),
//! a request ends with `stop` when its grammar is complete, constrained output with
//! suffix speculation (padded fixed K, unpadded adaptive K) equals constrained output
//! without it token for token, the tokens a grammar forces are drafted and accepted,
//! and unconstrained requests sharing the steps are untouched.

mod common;

use std::sync::{Arc, OnceLock};

use common::*;
use serde_json::{json, Value};
use wring_engine::{
    EngineHandle, FinishReason, GenerateRequest, KPolicy, ProposerKind, SamplingParams, SpecConfig,
};
use wring_grammar::{GrammarCompiler, GrammarMatcher, GrammarSpec};
use wring_model::{ChatTemplate, Tokenizer};

struct Fixture {
    plain: EngineHandle,
    /// Suffix drafts padded to a fixed K of 4.
    spec: EngineHandle,
    /// Suffix drafts of the adaptive policy's K, unpadded (the CPU's `--speculative suffix`).
    adaptive: EngineHandle,
    compiler: GrammarCompiler,
    tokenizer: Arc<Tokenizer>,
    template: Arc<ChatTemplate>,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let model = load_default();
        let compiler = GrammarCompiler::new(
            &model.tokenizer,
            &model.eos_token_ids,
            model.config.vocab_size,
        )
        .expect("grammar compiler");
        let tokenizer = model.tokenizer.clone();
        let template = model
            .chat_template
            .clone()
            .expect("the default model has a template");
        let (plain, _) = start(config(8, SpecConfig::default()));
        let spec_cfg = SpecConfig {
            method: ProposerKind::Suffix,
            k_policy: KPolicy::Fixed(4),
            ..SpecConfig::default()
        };
        let (spec, _) = start(config(8, spec_cfg));
        let adaptive_cfg = SpecConfig {
            method: ProposerKind::Suffix,
            k_policy: KPolicy::Adaptive,
            pad: false,
            ..SpecConfig::default()
        };
        let (adaptive, _) = start(config(8, adaptive_cfg));
        Fixture {
            plain,
            spec,
            adaptive,
            compiler,
            tokenizer,
            template,
        }
    })
}

fn chat(user: &str) -> Vec<u32> {
    let f = fixture();
    let text = f
        .template
        .render_json(&json!([{"role": "user", "content": user}]), None, true)
        .unwrap();
    f.tokenizer.encode(&text).unwrap()
}

/// Tools offered for a forced call, and the record one of them takes.
fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
        {"type": "function", "function": {"name": "record_person", "description": "Store a person's record.",
            "parameters": person_schema()}}
    ])
}

/// A chat prompt offering `tools()` that ends with the opening of a forced Hermes
/// call, as the server writes it for `tool_choice: "required"`.
fn tool_call_prompt(user: &str) -> Vec<u32> {
    let f = fixture();
    let system = format!(
        "# Tools\n\nYou may call functions to help with the user's request. They are described in JSON inside <tools></tools>:\n<tools>\n{}\n</tools>\n\nTo call a function, reply with one JSON object per call, each inside <tool_call></tool_call> tags:\n<tool_call>\n{{\"name\": \"<function name>\", \"arguments\": <JSON object of arguments>}}\n</tool_call>",
        tools().as_array().unwrap().iter().map(Value::to_string).collect::<Vec<_>>().join("\n")
    );
    let text = f
        .template
        .render_json(
            &json!([{"role": "system", "content": system}, {"role": "user", "content": user}]),
            None,
            true,
        )
        .unwrap();
    f.tokenizer
        .encode(&format!("{text}<tool_call>\n{{\"name\": \""))
        .unwrap()
}

/// The grammar of a forced call to one of `tools()`: the rest of the name, then
/// arguments under its `parameters` schema (closed to the declared keys) and the
/// closing brace (what the server's `forced_call_grammar` writes).
fn tool_call_grammar() -> GrammarSpec {
    let mut rules = vec!["start: call_0 | call_1".to_string()];
    for (i, t) in tools().as_array().unwrap().iter().enumerate() {
        let name = t["function"]["name"].as_str().unwrap();
        let mut params = t["function"]["parameters"].clone();
        params["additionalProperties"] = json!(false);
        let head = Value::String(format!("{name}\", \"arguments\": ")).to_string();
        rules.push(format!("call_{i}: {head} args_{i} \"}}\""));
        rules.push(format!(
            "args_{i}: %json {}",
            wring_grammar::with_json_layout(&params)
        ));
    }
    GrammarSpec::Grammar(rules.join("\n"))
}

fn matcher(spec: &GrammarSpec) -> GrammarMatcher {
    fixture()
        .compiler
        .compile(spec)
        .expect("the constraint compiles")
}

fn constrained(prompt: &[u32], spec: &GrammarSpec, max_tokens: u32) -> GenerateRequest {
    GenerateRequest {
        grammar: Some(matcher(spec)),
        ..greedy(prompt, max_tokens)
    }
}

fn person_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 16},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "city": {"enum": ["Paris", "London", "Tokyo"]}
        },
        "required": ["name", "age", "city"],
        "additionalProperties": false
    })
}

/// Checks `v` against `person_schema` by hand (types, bounds, no extra keys).
fn check_person(v: &Value) {
    let o = v.as_object().expect("an object");
    assert_eq!(o.len(), 3, "{v}");
    let name = o["name"].as_str().expect("name is a string");
    assert!(name.chars().count() <= 16, "{v}");
    let age = o["age"].as_i64().expect("age is an integer");
    assert!((0..=150).contains(&age), "{v}");
    assert!(
        ["Paris", "London", "Tokyo"].contains(&o["city"].as_str().expect("city")),
        "{v}"
    );
}

fn assert_stopped(o: &Outcome, what: &str) {
    assert_eq!(o.error, None, "{what}");
    assert_eq!(o.reason, Some(FinishReason::Stop), "{what}: {:?}", o.text);
}

#[test]
fn json_schema_output_parses_and_validates() {
    let f = fixture();
    let prompt = chat("Describe a person who lives in a big city, as JSON.");
    let o = collect(
        f.plain
            .submit(constrained(
                &prompt,
                &GrammarSpec::JsonSchema(person_schema()),
                96,
            ))
            .unwrap(),
    );
    assert_stopped(&o, "json schema");
    let v: Value = serde_json::from_str(&o.text).unwrap_or_else(|e| panic!("{e}: {:?}", o.text));
    check_person(&v);

    let o = collect(
        f.plain
            .submit(constrained(&prompt, &GrammarSpec::JsonObject, 96))
            .unwrap(),
    );
    assert_eq!(o.error, None);
    if o.reason == Some(FinishReason::Stop) {
        let v: Value =
            serde_json::from_str(&o.text).unwrap_or_else(|e| panic!("{e}: {:?}", o.text));
        assert!(v.is_object(), "{v}");
    } else {
        // Cut by max_tokens: still the start of an object.
        assert!(o.text.trim_start().starts_with('{'), "{:?}", o.text);
    }
}

#[test]
fn regex_choice_and_grammar_are_honoured() {
    let f = fixture();
    let prompt = chat("Give me a product code.");
    let rx = "[A-Z]{2}-[0-9]{3}";
    let o = collect(
        f.plain
            .submit(constrained(&prompt, &GrammarSpec::Regex(rx.into()), 32))
            .unwrap(),
    );
    assert_stopped(&o, "regex");
    assert!(
        regex::Regex::new(&format!("^{rx}$"))
            .unwrap()
            .is_match(&o.text),
        "{:?}",
        o.text
    );
    assert!(
        o.ids.len() <= 8,
        "ends as soon as the regex is complete: {:?}",
        o.ids
    );

    let prompt = chat("Is the sky green? Answer yes or no.");
    let choices = vec!["yes".to_string(), "no".into(), "it depends".into()];
    let o = collect(
        f.plain
            .submit(constrained(
                &prompt,
                &GrammarSpec::Choice(choices.clone()),
                16,
            ))
            .unwrap(),
    );
    assert_stopped(&o, "choice");
    assert!(choices.contains(&o.text), "{:?}", o.text);

    let lark = "start: dir (\", \" dir)*\ndir: \"north\" | \"south\" | \"east\" | \"west\"";
    let prompt = chat("Give directions.");
    let o = collect(
        f.plain
            .submit(constrained(&prompt, &GrammarSpec::Grammar(lark.into()), 24))
            .unwrap(),
    );
    assert_eq!(o.error, None);
    let body = o.text.as_str();
    let parts: Vec<&str> = body.split(", ").collect();
    let complete = if o.reason == Some(FinishReason::Stop) {
        parts.len()
    } else {
        parts.len() - 1
    };
    for p in &parts[..complete] {
        assert!(["north", "south", "east", "west"].contains(p), "{body:?}");
    }
}

/// Prompts with a constraint each (schema, object, regex, choice) and their max_tokens.
fn cases() -> Vec<(Vec<u32>, GrammarSpec, u32)> {
    vec![
        (
            chat("Describe a person who lives in a big city, as JSON."),
            GrammarSpec::JsonSchema(person_schema()),
            96,
        ),
        (
            chat("Write a JSON object about your favourite book."),
            GrammarSpec::JsonObject,
            64,
        ),
        (
            chat("Give me a product code."),
            GrammarSpec::Regex("[A-Z]{2}-[0-9]{3}( [a-z]+){0,3}".into()),
            16,
        ),
        (
            chat("Is the sky green? Answer yes or no."),
            GrammarSpec::Choice(vec!["yes".into(), "no".into()]),
            8,
        ),
        (
            chat("Where does Santa Claus live?"),
            GrammarSpec::Choice(vec![
                "at the north pole".into(),
                "at the south pole".into(),
                "nowhere at all".into(),
            ]),
            12,
        ),
        (
            tool_call_prompt("Store a record of Ann, 31, who lives in Paris."),
            tool_call_grammar(),
            64,
        ),
    ]
}

#[test]
fn speculative_constrained_output_equals_plain_constrained_output() {
    let f = fixture();
    let cases = cases();
    for (engine, what) in [(&f.spec, "padded K 4"), (&f.adaptive, "adaptive K")] {
        let (mut drafted, mut accepted) = (0, 0);
        for (prompt, spec, max_tokens) in &cases {
            let plain = collect(
                f.plain
                    .submit(constrained(prompt, spec, *max_tokens))
                    .unwrap(),
            );
            // The drafter first learns the unconstrained answer, so its drafts for the
            // constrained request are often tokens the grammar forbids.
            let free = collect(engine.submit(greedy(prompt, 32)).unwrap());
            assert_eq!(free.error, None);
            for _ in 0..2 {
                let spec_out = collect(
                    engine
                        .submit(constrained(prompt, spec, *max_tokens))
                        .unwrap(),
                );
                assert_eq!(spec_out.error, None, "{what} {spec:?}");
                assert_eq!(
                    spec_out.ids, plain.ids,
                    "{what} {spec:?}: speculation changed the output"
                );
                assert_eq!(spec_out.reason, plain.reason, "{what} {spec:?}");
                eprintln!(
                    "{what} {}: {:?} ({} tokens, {:?}), drafted {} accepted {}",
                    spec.kind(),
                    spec_out.text,
                    spec_out.ids.len(),
                    spec_out.reason,
                    spec_out.usage.draft_tokens,
                    spec_out.usage.accepted_tokens
                );
                drafted += spec_out.usage.draft_tokens;
                accepted += spec_out.usage.accepted_tokens;
            }
        }
        assert!(drafted > 0, "{what}: nothing was drafted");
        assert!(accepted > 0, "{what}: no draft token was accepted");
        assert!(
            accepted < drafted,
            "{what}: some drafts must have been rejected ({accepted}/{drafted})"
        );
    }
}

#[test]
fn tokens_a_grammar_forces_are_drafted_and_accepted() {
    // An engine of its own, so its counters see only these requests; a fresh suffix
    // tree, so drafts of a forced run come from the grammar. The forced call's name
    // and arguments key follow its first token (`get` or `record`), and each JSON key
    // follows its opening quote: tokens no other output could have.
    let f = fixture();
    let cfg = SpecConfig {
        method: ProposerKind::Suffix,
        k_policy: KPolicy::Fixed(8),
        pad: false,
        ..SpecConfig::default()
    };
    let (engine, _) = start(config(4, cfg));
    let prompt = tool_call_prompt("What is the weather like in Oslo today?");
    let plain = collect(
        f.plain
            .submit(constrained(&prompt, &tool_call_grammar(), 64))
            .unwrap(),
    );
    assert_stopped(&plain, "forced call");
    let spec_out = collect(
        engine
            .submit(constrained(&prompt, &tool_call_grammar(), 64))
            .unwrap(),
    );
    assert_eq!(
        spec_out.ids, plain.ids,
        "speculation changed the forced call"
    );
    let m = wait_idle(&engine);
    eprintln!(
        "{:?}: {} tokens, {} drafted ({} by the grammar), {} accepted ({} of the grammar's), {} steps",
        spec_out.text,
        spec_out.ids.len(),
        m.spec_num_draft_tokens,
        m.grammar_draft_tokens,
        m.spec_num_accepted_tokens,
        m.grammar_draft_accepted_tokens,
        m.steps
    );
    // At least the run after the name's first token (the rest of the name, `", "` and
    // `arguments":`) and the first key of the arguments.
    assert!(
        m.grammar_draft_tokens >= 5,
        "the grammar's forced tokens were not drafted: {m:?}"
    );
    // Under its mask a forced token is the only one allowed: the greedy target takes it.
    assert_eq!(m.grammar_draft_accepted_tokens, m.grammar_draft_tokens);

    // Sampling: after the mask a forced token has probability 1, so rejection sampling
    // accepts every one of them, and the call still follows the grammar.
    for seed in 0..3 {
        let before = engine.metrics();
        let req = GenerateRequest {
            sampling: SamplingParams {
                temperature: 1.0,
                seed: Some(seed),
                ..Default::default()
            },
            ..constrained(&prompt, &tool_call_grammar(), 64)
        };
        let o = collect(engine.submit(req).unwrap());
        assert_eq!(o.error, None, "seed {seed}");
        let m = wait_idle(&engine);
        let forced = m.grammar_draft_tokens - before.grammar_draft_tokens;
        let taken = m.grammar_draft_accepted_tokens - before.grammar_draft_accepted_tokens;
        assert!(forced >= 5, "seed {seed}: {forced} forced draft tokens");
        assert_eq!(
            taken, forced,
            "seed {seed}: a forced draft token was rejected"
        );
        if o.reason == Some(FinishReason::Stop) {
            let call: Value = serde_json::from_str(&format!("{{\"name\": \"{}", o.text))
                .unwrap_or_else(|e| panic!("seed {seed}: {e}: {:?}", o.text));
            assert!(call["arguments"].is_object(), "{call}");
        }
    }

    // Speculation off: nothing is drafted, the grammar's tokens included.
    let before = f.plain.metrics();
    let again = collect(
        f.plain
            .submit(constrained(&prompt, &tool_call_grammar(), 64))
            .unwrap(),
    );
    assert_eq!(again.ids, plain.ids);
    assert_eq!(again.usage.draft_tokens, 0);
    assert_eq!(
        f.plain.metrics().grammar_draft_tokens,
        before.grammar_draft_tokens
    );
}

#[test]
fn greedy_constrained_steps_mask_inside_the_argmax_as_the_host_masks_the_logits() {
    // Without logprobs a greedy constrained step hands its masks to the runner's argmax
    // (on the device where there is one) and gets ids back; asking for logprobs brings the
    // logits back and masks them on the host. Both must pick the same tokens, with and
    // without speculation. Engines of its own: the argmax path is for steps whose rows
    // are all greedy, so a sampled request of another test sharing a step would send that
    // step's masks to the host and the counter below would not move.
    let (plain, _) = start(config(8, SpecConfig::default()));
    let spec_cfg = SpecConfig {
        method: ProposerKind::Suffix,
        k_policy: KPolicy::Fixed(4),
        ..SpecConfig::default()
    };
    let (speculating, _) = start(config(8, spec_cfg));
    for (prompt, spec, max_tokens) in cases() {
        for engine in [&plain, &speculating] {
            let before = engine.metrics().constrained_steps_masked_argmax;
            let ids_path = collect(
                engine
                    .submit(constrained(&prompt, &spec, max_tokens))
                    .unwrap(),
            );
            let logits_path = collect(
                engine
                    .submit(GenerateRequest {
                        sampling: SamplingParams {
                            logprobs: Some(1),
                            ..Default::default()
                        },
                        ..constrained(&prompt, &spec, max_tokens)
                    })
                    .unwrap(),
            );
            assert_eq!(ids_path.error, None, "{spec:?}");
            assert_eq!(logits_path.error, None, "{spec:?}");
            assert!(!ids_path.ids.is_empty(), "{spec:?}");
            assert_eq!(
                ids_path.ids, logits_path.ids,
                "{spec:?}: the masked argmax and the host's masked logits disagree"
            );
            assert_eq!(ids_path.reason, logits_path.reason, "{spec:?}");
            assert!(
                engine.metrics().constrained_steps_masked_argmax > before,
                "{spec:?}: no step applied the masks inside the argmax"
            );
        }
    }
}

#[test]
fn unconstrained_requests_in_the_same_steps_are_unchanged() {
    let f = fixture();
    let free_prompt = chat("Tell me about the ocean.");
    let alone = collect(f.plain.submit(greedy(&free_prompt, 40)).unwrap());
    let json_prompt = chat("Describe a person who lives in a big city, as JSON.");
    let reqs = vec![
        constrained(&json_prompt, &GrammarSpec::JsonSchema(person_schema()), 96),
        greedy(&free_prompt, 40),
        constrained(
            &json_prompt,
            &GrammarSpec::Choice(vec!["a".into(), "b".into()]),
            8,
        ),
    ];
    let outs = run_all(&f.plain, reqs);
    assert_eq!(
        outs[1].ids, alone.ids,
        "a grammar in the batch changed an unconstrained request"
    );
    assert_stopped(&outs[0], "json in a batch");
    check_person(&serde_json::from_str(&outs[0].text).unwrap());
    assert!(
        ["a", "b"].contains(&outs[2].text.as_str()),
        "{:?}",
        outs[2].text
    );
}

#[test]
fn sampled_constrained_output_keeps_the_shape_with_and_without_speculation() {
    let f = fixture();
    let prompt = chat("Describe a person who lives in a big city, as JSON.");
    for (engine, what) in [(&f.plain, "plain"), (&f.spec, "speculative")] {
        for seed in 0..3 {
            let req = GenerateRequest {
                sampling: SamplingParams {
                    temperature: 1.0,
                    top_p: 0.95,
                    seed: Some(seed),
                    ..Default::default()
                },
                ..constrained(&prompt, &GrammarSpec::JsonSchema(person_schema()), 96)
            };
            let o = collect(engine.submit(req).unwrap());
            assert_eq!(o.error, None, "{what} seed {seed}");
            if o.reason == Some(FinishReason::Stop) {
                let v: Value = serde_json::from_str(&o.text)
                    .unwrap_or_else(|e| panic!("{what} seed {seed}: {e}: {:?}", o.text));
                check_person(&v);
            }
        }
    }
}

#[test]
fn logprobs_of_a_constrained_request_cover_only_allowed_tokens() {
    let f = fixture();
    let prompt = chat("Is the sky green? Answer yes or no.");
    let choices = ["yes", "no"];
    let req = GenerateRequest {
        sampling: SamplingParams {
            logprobs: Some(5),
            ..Default::default()
        },
        ..constrained(
            &prompt,
            &GrammarSpec::Choice(choices.iter().map(|c| c.to_string()).collect()),
            8,
        )
    };
    let mut h = f.plain.submit(req).unwrap();
    let mut first = None;
    while let Some(ev) = h.events.blocking_recv() {
        match ev {
            wring_engine::EngineEvent::Tokens { logprobs, .. } => {
                if first.is_none() {
                    first = logprobs.and_then(|l| l.into_iter().next());
                }
            }
            wring_engine::EngineEvent::Finished { .. } => break,
            wring_engine::EngineEvent::Error { message } => panic!("{message}"),
        }
    }
    let lp = first.expect("logprobs of the first token");
    assert!(lp.logprob.is_finite() && lp.logprob <= 0.0);
    assert!(!lp.top.is_empty());
    let mut mass = 0.0f32;
    for (t, l) in &lp.top {
        let piece = f.tokenizer.decode(&[*t], false).unwrap();
        assert!(
            choices.iter().any(|c| c.starts_with(piece.as_str())),
            "top token {piece:?} cannot start a choice"
        );
        mass += l.exp();
    }
    assert!(mass <= 1.0 + 1e-4);
}

#[test]
fn a_grammar_with_ignore_eos_still_ends_when_complete() {
    let f = fixture();
    let prompt = chat("Pick a number.");
    let req = GenerateRequest {
        ignore_eos: true,
        ..constrained(&prompt, &GrammarSpec::Regex("[0-9]{2}".into()), 16)
    };
    let o = collect(f.plain.submit(req).unwrap());
    assert_stopped(&o, "regex with ignore_eos");
    assert_eq!(o.text.len(), 2, "{:?}", o.text);
}

/// The first index k >= 3 of `ids` whose token does not occur before it (a stand-in for
/// a reasoning model's `</think>`: the grammar must bind only after its first emission).
fn first_new_token_from(ids: &[u32], from: usize) -> usize {
    (from..ids.len())
        .find(|&k| !ids[..k].contains(&ids[k]))
        .expect("a token the free output has not emitted before")
}

#[test]
fn a_grammar_that_waits_for_the_end_of_thinking_leaves_the_thinking_free() {
    // GrammarStart::After { close }: the tokens up to the first `close` are the model's
    // own (here: its unconstrained greedy output), the rest follows the grammar; with
    // suffix speculation (drafts that cross `close` included) the output is the same.
    let f = fixture();
    let prompt = chat("Describe a person who lives in a big city, as JSON.");
    let free = collect(f.plain.submit(greedy(&prompt, 24)).unwrap());
    assert_eq!(free.error, None);
    let k = first_new_token_from(&free.ids, 3);
    let close = free.ids[k];
    let schema = GrammarSpec::JsonSchema(person_schema());
    let waiting = |start: wring_engine::GrammarStart| GenerateRequest {
        grammar_start: start,
        ..constrained(&prompt, &schema, 128)
    };
    let after = wring_engine::GrammarStart::After { close };
    let out = collect(f.plain.submit(waiting(after)).unwrap());
    assert_stopped(&out, "grammar after the closing token");
    assert_eq!(
        out.ids[..=k],
        free.ids[..=k],
        "the grammar bound before the closing token"
    );
    let answer = f.tokenizer.decode(&out.ids[k + 1..], true).unwrap();
    let v: Value = serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{e}: {answer:?}"));
    check_person(&v);
    let bound_at_once = collect(f.plain.submit(constrained(&prompt, &schema, 128)).unwrap());
    assert_ne!(
        bound_at_once.ids.get(..=k),
        Some(&free.ids[..=k]),
        "the test needs a free output the grammar would forbid"
    );
    for (engine, what) in [(&f.spec, "padded K 4"), (&f.adaptive, "adaptive K")] {
        // Twice: the second time the drafter knows the output and drafts across `close`.
        for round in 0..2 {
            let spec_out = collect(engine.submit(waiting(after)).unwrap());
            assert_eq!(
                spec_out.ids, out.ids,
                "{what}: speculation changed the output"
            );
            assert_eq!(spec_out.reason, out.reason, "{what}");
            if round == 1 {
                assert!(
                    spec_out.usage.accepted_tokens > 0,
                    "{what}: {:?}",
                    spec_out.usage
                );
            }
        }
    }

    // FirstOr: the model's first token is `open` (its own argmax): the grammar waits as
    // above. A first token that is not `open` is the grammar's: the output is that of a
    // grammar binding from the start.
    let first_or = wring_engine::GrammarStart::FirstOr {
        open: free.ids[0],
        close,
    };
    let o = collect(f.plain.submit(waiting(first_or)).unwrap());
    assert_eq!(o.ids, out.ids, "a first token `open` starts the thinking");
    let never_first = (0..f.tokenizer.vocab_size() as u32)
        .rev()
        .find(|t| !free.ids.contains(t) && !bound_at_once.ids.contains(t))
        .unwrap();
    let o = collect(
        f.plain
            .submit(waiting(wring_engine::GrammarStart::FirstOr {
                open: never_first,
                close,
            }))
            .unwrap(),
    );
    assert_eq!(
        o.ids, bound_at_once.ids,
        "without `open` first the grammar binds from the first token"
    );
    let o = collect(f.spec.submit(waiting(first_or)).unwrap());
    assert_eq!(o.ids, out.ids, "padded K 4 with FirstOr");

    // A closing token that never comes: nothing is constrained.
    let absent = (0..f.tokenizer.vocab_size() as u32)
        .rev()
        .find(|t| !free.ids.contains(t))
        .unwrap();
    let never = GenerateRequest {
        grammar_start: wring_engine::GrammarStart::After { close: absent },
        ..constrained(&prompt, &schema, 24)
    };
    for engine in [&f.plain, &f.spec] {
        let o = collect(engine.submit(never.clone()).unwrap());
        assert_eq!(
            o.ids, free.ids,
            "a grammar that never binds changes nothing"
        );
        assert_eq!(o.reason, Some(FinishReason::Length));
    }
}
