"""What applications reach for beyond plain generation, through the official
`openai` client against the real `wring serve`: n > 1, batched prompts, echo,
logit_bias, min_tokens, stop_token_ids, ignore_eos, /tokenize + /detokenize,
CORS preflights and the max_tokens default."""

import json

import httpx
import pytest

from conftest import API_KEY, repo_test_data

MODEL = "smol"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def golden():
    path = repo_test_data() / "golden" / "smollm2_q41_f32_greedy.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def tokenize(server, **body):
    r = httpx.post(server.base + "/tokenize", json=body, headers=AUTH, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def detokenize(server, tokens):
    r = httpx.post(server.base + "/detokenize", json={"tokens": tokens}, headers=AUTH, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["prompt"]


def test_chat_n_samples_are_seeded_and_counted_once(client):
    def run():
        return client.chat.completions.create(
            model=MODEL, messages=QUESTION, n=3, temperature=1.0, seed=5, max_tokens=12)

    r = run()
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert len({c.message.content for c in r.choices}) > 1, "samples should differ"
    assert [c.message.content for c in run().choices] == [c.message.content for c in r.choices]
    solo = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=1)
    assert r.usage.prompt_tokens == solo.usage.prompt_tokens, "the prompt counts once"
    assert r.usage.completion_tokens <= 36


def test_chat_n_streamed_choices_reassemble(client):
    stream = client.chat.completions.create(
        model=MODEL, messages=QUESTION, n=2, temperature=0, max_tokens=10, stream=True,
        stream_options={"include_usage": True})
    texts, finishes, usage = ["", ""], [None, None], None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            texts[c.index] += c.delta.content or ""
            finishes[c.index] = c.finish_reason or finishes[c.index]
    full = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0, max_tokens=10)
    assert texts == [full.choices[0].message.content] * 2
    assert all(f in ("stop", "length") for f in finishes)
    assert usage.completion_tokens == 2 * full.usage.completion_tokens


def test_completions_batch_with_echo(client):
    prompts = ["The capital of France is", "One, two, three,"]
    r = client.completions.create(model=MODEL, prompt=prompts, max_tokens=4, temperature=0, echo=True)
    assert [c.index for c in r.choices] == [0, 1]
    for p, c in zip(prompts, r.choices):
        alone = client.completions.create(model=MODEL, prompt=p, max_tokens=4, temperature=0)
        assert c.text == p + alone.choices[0].text
    ids = [rec["prompt_ids"][:20] for rec in golden()[:2]]
    r = client.completions.create(model=MODEL, prompt=ids, max_tokens=2, temperature=0)
    assert len(r.choices) == 2 and r.usage.prompt_tokens == sum(len(i) for i in ids)


def test_logit_bias_bans_and_forces_tokens(client, server):
    plain = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=3, temperature=0)
    first = tokenize(server, prompt=plain.choices[0].text, add_special_tokens=False)["tokens"][0]
    banned = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=3,
                                       temperature=0, logit_bias={str(first): -100})
    assert banned.choices[0].text != plain.choices[0].text
    assert tokenize(server, prompt=banned.choices[0].text, add_special_tokens=False)["tokens"][0] != first
    forced_id = tokenize(server, prompt=" banana", add_special_tokens=False)["tokens"][0]
    forced = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=2,
                                       temperature=0, logit_bias={str(forced_id): 100})
    assert forced.choices[0].text.startswith(detokenize(server, [forced_id]))


def test_min_tokens_holds_off_the_end(client):
    plain = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0, max_tokens=64)
    assert plain.choices[0].finish_reason == "stop"
    n = plain.usage.completion_tokens
    longer = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0, max_tokens=64,
                                            extra_body={"min_tokens": n + 6})
    assert longer.usage.completion_tokens >= n + 6


def test_stop_token_ids_and_ignore_eos(client, server):
    rec = next(r for r in golden() if r["greedy_text"].endswith("<|im_end|>"))
    greedy = rec["greedy_ids"]
    i = next(i for i in range(2, len(greedy)) if greedy[i] not in greedy[:i])
    r = client.completions.create(model=MODEL, prompt=rec["prompt_ids"], max_tokens=len(greedy), temperature=0,
                                  extra_body={"stop_token_ids": [greedy[i]]})
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens == i + 1
    assert r.choices[0].text == detokenize(server, greedy[:i])
    past_eos = len(greedy) + 5
    r = client.completions.create(model=MODEL, prompt=rec["prompt_ids"], max_tokens=past_eos, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == past_eos


def test_tokenize_matches_chat_usage_and_detokenize_round_trips(client, server):
    t = tokenize(server, messages=QUESTION, model=MODEL)
    r = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=1)
    assert t["count"] == len(t["tokens"]) == r.usage.prompt_tokens
    assert t["max_model_len"] > t["count"]
    plain = tokenize(server, prompt="Hello, world!", return_token_strs=True)
    assert len(plain["token_strs"]) == plain["count"]
    assert detokenize(server, plain["tokens"]).endswith("Hello, world!")


def test_cors_preflight_from_a_browser(server):
    """The session's server allows one origin (`--allowed-origins http://localhost:5173`):
    its preflights are answered, other origins get no CORS headers."""
    origin = "http://localhost:5173"
    r = httpx.options(server.base + "/v1/chat/completions", timeout=30, headers={
        "Origin": origin,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type",
    })
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == origin
    assert "authorization" in r.headers["access-control-allow-headers"].lower()
    r = httpx.get(server.base + "/v1/models", headers={**AUTH, "Origin": origin}, timeout=30)
    assert r.headers["access-control-allow-origin"] == origin
    r = httpx.get(server.base + "/v1/models", headers={**AUTH, "Origin": "http://evil.example"}, timeout=30)
    assert "access-control-allow-origin" not in r.headers