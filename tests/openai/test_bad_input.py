"""Every kind of bad input gets the right 4xx with an OpenAI-shaped JSON error;
clients that vanish mid-stream free their KV blocks; the server keeps answering."""

import json
import time

import httpx
import pytest

from conftest import API_KEY

AUTH = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}
CHAT = "/v1/chat/completions"
CMPL = "/v1/completions"
MSGS = [{"role": "user", "content": "hi"}]


def body(**kw):
    kw.setdefault("model", "smol")
    return json.dumps(kw).encode()


# (name, method, path, headers, body bytes, status, expected param or None, substring of message)
CASES = [
    ("malformed json", "POST", CHAT, AUTH, b'{"model": "smol", "messages": [', 400, None, "parse the JSON"),
    ("not an object", "POST", CHAT, AUTH, b"[1, 2]", 400, None, "JSON object"),
    ("empty body", "POST", CMPL, AUTH, b"", 400, None, "empty"),
    ("non utf-8", "POST", CHAT, AUTH, b'{"model": "smol", "messages": [{"role": "user", "content": "\xff\xfe"}]}', 400, None, "UTF-8"),
    ("wrong type temperature", "POST", CHAT, AUTH, body(messages=MSGS, temperature="hot"), 400, "temperature", "temperature"),
    ("wrong type messages", "POST", CHAT, AUTH, body(messages="hi"), 400, "messages", "messages"),
    ("wrong type max_tokens", "POST", CMPL, AUTH, body(prompt="x", max_tokens="ten"), 400, "max_tokens", "max_tokens"),
    ("wrong type stream", "POST", CHAT, AUTH, body(messages=MSGS, stream="yes"), 400, "stream", "stream"),
    ("unknown field", "POST", CHAT, AUTH, body(messages=MSGS, frobnicate=1), 400, "frobnicate", "Unrecognized"),
    ("unknown message field", "POST", CHAT, AUTH, body(messages=[{"role": "user", "content": "x", "mood": 1}]), 400, "messages[0].mood", "mood"),
    ("max_tokens 0", "POST", CHAT, AUTH, body(messages=MSGS, max_tokens=0), 400, "max_tokens", "at least 1"),
    ("max_tokens negative", "POST", CMPL, AUTH, body(prompt="x", max_tokens=-5), 400, "max_tokens", "at least 1"),
    ("max_completion_tokens 0", "POST", CHAT, AUTH, body(messages=MSGS, max_completion_tokens=0), 400, "max_completion_tokens", "at least 1"),
    ("temperature out of range", "POST", CHAT, AUTH, body(messages=MSGS, temperature=5), 400, "temperature", "between"),
    ("top_p zero", "POST", CHAT, AUTH, body(messages=MSGS, top_p=0), 400, "top_p", "top_p"),
    ("stop wrong type", "POST", CHAT, AUTH, body(messages=MSGS, stop=7), 400, "stop", "stop"),
    ("empty messages", "POST", CHAT, AUTH, body(messages=[]), 400, "messages", "at least one"),
    ("bad role", "POST", CHAT, AUTH, body(messages=[{"role": "robot", "content": "x"}]), 400, "messages[0].role", "role"),
    ("missing prompt", "POST", CMPL, AUTH, body(), 400, "prompt", "required"),
    ("token id out of vocab", "POST", CMPL, AUTH, body(prompt=[10**9]), 400, "prompt", "vocabulary"),
    ("prompt too long chat", "POST", CHAT, AUTH, body(messages=[{"role": "user", "content": "hello " * 20000}]), 400, "messages", "maximum context length"),
    ("prompt too long completion", "POST", CMPL, AUTH, body(prompt="hello " * 20000, max_tokens=4), 400, "prompt", "maximum context length"),
    ("max_tokens beyond context", "POST", CMPL, AUTH, body(prompt="hi", max_tokens=10**7), 400, "prompt", "maximum context length"),
    ("stream_options without stream", "POST", CHAT, AUTH, body(messages=MSGS, stream_options={"include_usage": True}), 400, "stream_options", "stream"),
    ("n = 0", "POST", CHAT, AUTH, body(messages=MSGS, n=0), 400, "n", "at least 1"),
    ("too many choices", "POST", CMPL, AUTH, body(prompt=["a", "b"], n=40), 400, "n", "At most"),
    ("mixed prompt batch", "POST", CMPL, AUTH, body(prompt=["a", [1, 2]]), 400, "prompt", "all strings"),
    ("wrong content type", "POST", CHAT, {"Authorization": f"Bearer {API_KEY}", "Content-Type": "text/plain"}, body(messages=MSGS), 415, None, "application/json"),
    ("form content type", "POST", CMPL, {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/x-www-form-urlencoded"}, body(prompt="x"), 415, None, "Content-Type"),
    ("content null", "POST", CHAT, AUTH, body(messages=[{"role": "user", "content": None}]), 400, "messages[0].content", "null"),
    ("tool_choice without tools", "POST", CHAT, AUTH, body(messages=MSGS, tool_choice="auto"), 400, "tool_choice", "only allowed when"),
    ("named tool missing", "POST", CHAT, AUTH, body(messages=MSGS, tools=[{"type": "function", "function": {"name": "f"}}], tool_choice={"type": "function", "function": {"name": "g"}}), 400, "tool_choice", "not in `tools`"),
    ("bad tool name", "POST", CHAT, AUTH, body(messages=MSGS, tools=[{"type": "function", "function": {"name": "two words"}}]), 400, "tools[0].function.name", "Function names"),
    ("bad tool arguments", "POST", CHAT, AUTH, body(messages=[{"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]}]), 400, "messages[0].tool_calls[0].function.arguments", "JSON"),
    ("logit_bias key", "POST", CHAT, AUTH, body(messages=MSGS, logit_bias={"hello": 1}), 400, "logit_bias", "token ids"),
    ("logit_bias range", "POST", CMPL, AUTH, body(prompt="x", logit_bias={"5": 500}), 400, "logit_bias", "between -100 and 100"),
    ("min_tokens above max_tokens", "POST", CMPL, AUTH, body(prompt="x", max_tokens=2, min_tokens=5), 400, "min_tokens", "must not exceed"),
    ("echo with logprobs", "POST", CMPL, AUTH, body(prompt="x", echo=True, logprobs=1), 400, "echo", "logprobs"),
    ("bad json schema", "POST", CHAT, AUTH, body(messages=MSGS, response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}), 400, "response_format", "json_schema"),
    ("bad guided regex", "POST", CMPL, AUTH, body(prompt="x", guided_regex="(a"), 400, "guided_regex", "regex"),
    ("two constraints", "POST", CHAT, AUTH, body(messages=MSGS, guided_regex="a", guided_choice=["a"]), 400, "guided_choice", "Only one"),
    ("tokenize needs the key", "POST", "/tokenize", {}, body(prompt="x"), 401, None, "API key"),
    ("tokenize both inputs", "POST", "/tokenize", AUTH, body(prompt="x", messages=MSGS), 400, None, "exactly one"),
    ("detokenize out of vocab", "POST", "/detokenize", AUTH, body(tokens=[10**9]), 400, "tokens", "vocabulary"),
    ("unknown model", "POST", CHAT, AUTH, body(model="gpt-5", messages=MSGS), 404, "model", "does not exist"),
    ("unknown model completions", "POST", CMPL, AUTH, body(model="gpt-5", prompt="x"), 404, "model", "does not exist"),
    ("bad api key", "POST", CHAT, {"Authorization": "Bearer nope"}, body(messages=MSGS), 401, None, "API key"),
    ("missing api key", "POST", CHAT, {}, body(messages=MSGS), 401, None, "API key"),
    ("models need the key", "GET", "/v1/models", {}, b"", 401, None, "API key"),
    ("admin needs the key", "POST", "/admin/suffix-cache/reset", {}, b"", 401, None, "API key"),
    ("oversized body", "POST", CHAT, AUTH, b'{"messages": "' + b"a" * (9 << 20) + b'"}', 413, None, "larger than"),
    ("wrong method", "GET", CHAT, AUTH, b"", 405, None, "not allowed"),
    ("unknown route", "POST", "/v1/nothing", AUTH, b"{}", 404, None, "No route"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gets_openai_error(server, case):
    name, method, path, headers, content, status, param, needle = case
    r = httpx.request(method, server.base + path, headers=headers, content=content, timeout=60)
    assert r.status_code == status, f"{name}: {r.status_code} {r.text[:300]}"
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    assert needle in err["message"], f"{name}: {err['message']}"
    if param is not None:
        assert err["param"] == param, f"{name}: {err}"


def wait_idle(server, timeout=60.0):
    deadline = time.time() + timeout
    while True:
        m = server.metrics()
        running = next(v for k, v in m.items() if k.startswith("vllm:num_requests_running"))
        used = next(v for k, v in m.items() if k.startswith("wring:kv_blocks_used"))
        if running == 0 and used == 0:
            return m
        assert time.time() < deadline, f"still busy: running={running} kv_blocks_used={used}"
        time.sleep(0.2)


def test_disconnects_mid_stream_free_everything(server):
    payload = {"model": "smol", "messages": [{"role": "user", "content": "Tell me a long story about a dragon."}],
               "max_tokens": 400, "temperature": 0, "stream": True, "ignore_eos": True}
    for _ in range(4):
        with httpx.stream("POST", server.base + CHAT, headers=AUTH, json=payload, timeout=60) as r:
            assert r.status_code == 200
            seen = 0
            for line in r.iter_lines():
                if line.startswith("data: "):
                    seen += 1
                if seen >= 3:
                    break  # leave mid-stream: closing the connection must abort the request
    m = wait_idle(server)
    assert m[next(k for k in m if k.startswith("vllm:num_requests_waiting"))] == 0
    # The server still answers normally.
    r = httpx.post(server.base + CHAT, headers=AUTH, timeout=60,
                   json={"model": "smol", "messages": MSGS, "max_tokens": 3, "temperature": 0})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 1
    wait_idle(server)


def test_non_stream_disconnect_frees_everything(server):
    payload = {"model": "smol", "messages": MSGS, "max_tokens": 400, "temperature": 0, "ignore_eos": True}
    with pytest.raises(httpx.TimeoutException):
        httpx.post(server.base + CHAT, headers=AUTH, json=payload, timeout=1.0)
    wait_idle(server)


def test_metrics_use_vllm_names(server):
    text = httpx.get(server.base + "/metrics", timeout=10).text
    for name in [
        "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
        "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
        "vllm:time_to_first_token_seconds_bucket", "vllm:time_per_output_token_seconds_bucket",
        "vllm:e2e_request_latency_seconds_bucket", "vllm:spec_decode_num_drafts_total",
        "vllm:spec_decode_num_draft_tokens_total", "vllm:spec_decode_num_accepted_tokens_total",
        "vllm:request_success_total", "wring:kv_blocks_free", "wring:kv_blocks_used",
    ]:
        assert name in text, name


def test_admin_reset_with_key(server):
    r = httpx.post(server.base + "/admin/suffix-cache/reset", headers=AUTH, timeout=30)
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    assert httpx.get(server.base + "/health", timeout=5).status_code == 200
