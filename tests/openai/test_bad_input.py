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
    ("n = 2", "POST", CHAT, AUTH, body(messages=MSGS, n=2), 400, "n", "n=1"),
    ("n = 3 completions", "POST", CMPL, AUTH, body(prompt="x", n=3), 400, "n", "n=1"),
    ("max_tokens 0", "POST", CHAT, AUTH, body(messages=MSGS, max_tokens=0), 400, "max_tokens", "at least 1"),
    ("max_tokens negative", "POST", CMPL, AUTH, body(prompt="x", max_tokens=-5), 400, "max_tokens", "at least 1"),
    ("max_completion_tokens 0", "POST", CHAT, AUTH, body(messages=MSGS, max_completion_tokens=0), 400, "max_completion_tokens", "at least 1"),
    ("temperature out of range", "POST", CHAT, AUTH, body(messages=MSGS, temperature=5), 400, "temperature", "between"),
    ("top_p zero", "POST", CHAT, AUTH, body(messages=MSGS, top_p=0), 400, "top_p", "top_p"),
    ("stop wrong type", "POST", CHAT, AUTH, body(messages=MSGS, stop=7), 400, "stop", "stop"),
    ("empty messages", "POST", CHAT, AUTH, body(messages=[]), 400, "messages", "at least one"),
    ("bad role", "POST", CHAT, AUTH, body(messages=[{"role": "robot", "content": "x"}]), 400, "messages[0].role", "role"),
    ("missing prompt", "POST", CMPL, AUTH, body(), 400, "prompt", "required"),
    ("batched prompts", "POST", CMPL, AUTH, body(prompt=["a", "b"]), 400, "prompt", "one prompt"),
    ("token id out of vocab", "POST", CMPL, AUTH, body(prompt=[10**9]), 400, "prompt", "vocabulary"),
    ("prompt too long chat", "POST", CHAT, AUTH, body(messages=[{"role": "user", "content": "hello " * 20000}]), 400, "messages", "maximum context length"),
    ("prompt too long completion", "POST", CMPL, AUTH, body(prompt="hello " * 20000, max_tokens=4), 400, "prompt", "maximum context length"),
    ("max_tokens beyond context", "POST", CMPL, AUTH, body(prompt="hi", max_tokens=10**7), 400, "prompt", "maximum context length"),
    ("stream_options without stream", "POST", CHAT, AUTH, body(messages=MSGS, stream_options={"include_usage": True}), 400, "stream_options", "stream"),
    ("tools unsupported", "POST", CHAT, AUTH, body(messages=MSGS, tools=[{"type": "function", "function": {"name": "f"}}]), 400, "tools", "not supported"),
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
