"""The real `wring serve` driven by the official `openai` package: chat and
completions, stream and non-stream, usage, stop strings, seeds, logprobs, and
64 concurrent greedy streams that must equal the solo output."""

import asyncio
import json

import openai
import pytest

from conftest import repo_test_data

MODEL = "smol"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def chat(client, **kw):
    kw.setdefault("model", MODEL)
    kw.setdefault("messages", QUESTION)
    kw.setdefault("temperature", 0)
    return client.chat.completions.create(**kw)


def collect_chat_stream(stream):
    """(text, finish_reason, usage, chunks) of a chat stream; checks chunk order."""
    text, finish, usage, chunks = "", None, None, 0
    for chunk in stream:
        chunks += 1
        assert finish is None or not chunk.choices, "content after finish_reason"
        if chunk.usage is not None:
            assert chunk.choices == [], "usage chunk must have no choices"
            usage = chunk.usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            if choice.finish_reason is not None:
                finish = choice.finish_reason
    return text, finish, usage, chunks


def test_models_lists_the_served_name(client):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL


def test_chat_non_stream_has_exact_usage(client):
    r = chat(client, max_tokens=8)
    choice = r.choices[0]
    assert r.object == "chat.completion" and r.model == MODEL
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    u = r.usage
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    assert 1 <= u.completion_tokens <= 8
    if choice.finish_reason == "length":
        assert u.completion_tokens == 8
    assert "Paris" in choice.message.content


def test_chat_stream_equals_non_stream(client):
    full = chat(client, max_tokens=12)
    stream = chat(client, max_tokens=12, stream=True, stream_options={"include_usage": True})
    text, finish, usage, _ = collect_chat_stream(stream)
    assert text == full.choices[0].message.content
    assert finish == full.choices[0].finish_reason
    assert usage is not None
    assert usage.completion_tokens == full.usage.completion_tokens
    assert usage.prompt_tokens == full.usage.prompt_tokens


def test_chat_stream_without_usage_option_sends_no_usage(client):
    text, finish, usage, _ = collect_chat_stream(chat(client, max_tokens=4, stream=True))
    assert usage is None and finish in ("stop", "length") and text


def test_completions_stream_and_non_stream(client):
    full = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=10, temperature=0)
    assert full.object == "text_completion"
    assert full.usage.completion_tokens == 10 and full.choices[0].finish_reason == "length"
    text, finish, usage = "", None, None
    for chunk in client.completions.create(
        model=MODEL, prompt="The capital of France is", max_tokens=10, temperature=0,
        stream=True, stream_options={"include_usage": True},
    ):
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            text += c.text
            finish = c.finish_reason or finish
    assert text == full.choices[0].text
    assert finish == "length"
    assert usage.completion_tokens == 10
    assert usage.prompt_tokens == full.usage.prompt_tokens


def test_completions_on_token_ids_match_the_golden_outputs(client):
    """Token-id prompts through HTTP reproduce the independent float32 reference."""
    path = repo_test_data() / "golden" / "smollm2_q41_f32_greedy.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for rec in records[:4]:
        r = client.completions.create(
            model=MODEL, prompt=rec["prompt_ids"], max_tokens=len(rec["greedy_ids"]), temperature=0,
        )
        expected = rec["greedy_text"].removesuffix("<|im_end|>")
        assert r.choices[0].text == expected, rec["corpus"]
        ended = rec["greedy_text"].endswith("<|im_end|>")
        assert r.choices[0].finish_reason == ("stop" if ended else "length")


@pytest.mark.parametrize("stream", [False, True])
def test_stop_string_cuts_exactly(client, stream):
    base = chat(client, max_tokens=16).choices[0].message.content
    assert len(base) > 6
    stop = base[3:6]
    cut = base[: base.index(stop)]
    if stream:
        text, finish, _, _ = collect_chat_stream(chat(client, max_tokens=16, stop=[stop], stream=True))
    else:
        r = chat(client, max_tokens=16, stop=stop)
        text, finish = r.choices[0].message.content, r.choices[0].finish_reason
    assert text == cut
    assert finish == "stop"


def test_seed_makes_sampling_reproducible(client):
    def sample(seed):
        return chat(client, max_tokens=12, temperature=1.0, top_p=0.95, seed=seed).choices[0].message.content

    assert sample(1234) == sample(1234)
    outputs = {sample(s) for s in range(6)}
    assert len(outputs) > 1, "different seeds should not all give one output"


def test_chat_logprobs(client):
    r = chat(client, max_tokens=6, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    # One entry per generated token, the final stop token included (it counts in usage too).
    assert len(content) == r.usage.completion_tokens
    for entry in content:
        assert entry.logprob <= 0
        assert len(entry.top_logprobs) == 3
        # Greedy: the chosen token is the most likely one.
        assert entry.top_logprobs[0].token == entry.token
        assert abs(entry.top_logprobs[0].logprob - entry.logprob) < 1e-4
        assert [t.logprob for t in entry.top_logprobs] == sorted((t.logprob for t in entry.top_logprobs), reverse=True)


def test_completion_logprobs(client):
    r = client.completions.create(model=MODEL, prompt="One, two, three,", max_tokens=5, temperature=0, logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 5
    assert "".join(lp.tokens) == r.choices[0].text
    assert all(len(t) <= 2 for t in lp.top_logprobs)


def test_workload_tag_and_extra_fields_are_accepted(client):
    r = chat(client, max_tokens=3, extra_body={"workload": "chat", "top_k": 5, "min_p": 0.05},
             extra_headers={"X-Wring-Workload": "chat"}, user="tester")
    assert r.choices[0].message.content is not None


def test_64_concurrent_streams_equal_solo_greedy(client, aclient):
    prompts = [
        "Name three primary colors.",
        "Write a Python function that reverses a string.",
        "What is 12 times 7?",
        "Describe the moon in one sentence.",
    ]
    max_tokens = 10
    solo = [chat(client, messages=[{"role": "user", "content": p}], max_tokens=max_tokens).choices[0].message.content
            for p in prompts]

    async def one(i):
        stream = await aclient.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": prompts[i % len(prompts)]}],
            max_tokens=max_tokens, temperature=0, stream=True, stream_options={"include_usage": True},
        )
        text, finish, usage = "", None, None
        async for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for c in chunk.choices:
                text += c.delta.content or ""
                finish = c.finish_reason or finish
        return text, finish, usage

    async def all_of_them():
        return await asyncio.gather(*(one(i) for i in range(64)))

    results = asyncio.run(all_of_them())
    for i, (text, finish, usage) in enumerate(results):
        assert text == solo[i % len(prompts)], f"client {i}"
        assert finish in ("stop", "length") and usage is not None


def test_client_errors_map_to_openai_exceptions(client, server):
    with pytest.raises(openai.BadRequestError) as e:
        chat(client, n=0)
    assert e.value.body["param"] == "n"
    with pytest.raises(openai.BadRequestError):
        chat(client, max_tokens=0)
    with pytest.raises(openai.NotFoundError):
        chat(client, model="no-such-model")
    bad = openai.OpenAI(base_url=server.base + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        chat(bad, max_tokens=2)


def test_plain_requests_end_without_looping_to_the_cap(client):
    """What most clients send: no temperature, no max_tokens. For the default model the server
    fills in its card's sampling, the DRY loop penalty and the empty system message (what
    `wring chat` uses), says so in /v1/models, and every answer ends by itself."""
    card = client.models.retrieve(MODEL).model_extra
    assert card["default_system_message"] == "", "wring chat's system message for this model"
    defaults = card["sampling_defaults"]
    assert defaults["dry_multiplier"] == pytest.approx(0.8)
    assert defaults["dry_base"] == pytest.approx(1.75) and defaults["dry_allowed_length"] == 2
    assert defaults["temperature"] == 0 and defaults["max_tokens"] == 2048, "greedy: measured to end every answer"
    for seed in (1, 2, 3, 4):
        r = client.chat.completions.create(model=MODEL, messages=QUESTION, seed=seed)
        assert r.choices[0].finish_reason == "stop", (seed, r.choices[0].message.content[-300:])
        assert r.usage.completion_tokens < 256, (seed, r.usage)
    # A request's own dry_multiplier wins; 0 turns the penalty off.
    off = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=4, extra_body={"dry_multiplier": 0})
    assert off.choices[0].message.content
