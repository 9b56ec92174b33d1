"""The Gateway API Inference Extension's model-server protocol, checked against a live
`wring serve` under load: /metrics parses as Prometheus text, and every metric the endpoint
picker reads is there with the protocol's name, type, labels and meaning; a server without
LoRA adapters leaves the LoRA metric out entirely. Readiness follows the server's life:
`loading` until the model is loaded and warmed up, `ready`, `draining` after SIGTERM."""

import asyncio
import signal
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import spawn, stop

MAX_SEQS = 2


@pytest.fixture(scope="module")
def busy_server(tmp_path_factory):
    # Two running slots, so a burst of requests leaves some waiting.
    srv = spawn(["--served-model-name", "smol", "--max-num-seqs", str(MAX_SEQS), "--stats-interval", "0"],
                tmp_path_factory.mktemp("protocol") / "serve.log")
    yield srv
    assert stop(srv) == 0, srv.log()[-3000:]


def scrape(srv):
    r = httpx.get(srv.base + "/metrics", timeout=10)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    return r.text, {f.name: f for f in text_string_to_metric_families(r.text)}


def only_sample(family):
    assert len(family.samples) == 1, family.samples
    return family.samples[0]


def test_metrics_the_endpoint_picker_reads_are_there_under_load(busy_server):
    srv = busy_server
    body = {"model": "smol", "prompt": "Tell me a long story about a lighthouse keeper.",
            "max_tokens": 48, "ignore_eos": True, "temperature": 0}
    seen = {"waiting": 0.0, "running": 0.0, "kv": 0.0}
    scrapes = []

    async def load():
        async with httpx.AsyncClient(base_url=srv.base, timeout=300) as client:
            async def one():
                r = await client.post("/v1/completions", json=body)
                assert r.status_code == 200, r.text

            async def watch(tasks):
                while not all(t.done() for t in tasks):
                    text, fams = await asyncio.to_thread(scrape, srv)
                    scrapes.append(fams)
                    seen["waiting"] = max(seen["waiting"], only_sample(fams["vllm:num_requests_waiting"]).value)
                    seen["running"] = max(seen["running"], only_sample(fams["vllm:num_requests_running"]).value)
                    seen["kv"] = max(seen["kv"], only_sample(fams["vllm:kv_cache_usage_perc"]).value)
                    await asyncio.sleep(0.05)

            tasks = [asyncio.create_task(one()) for _ in range(8)]
            await asyncio.gather(watch(tasks), *tasks)

    asyncio.run(load())
    assert scrapes, "scraped while the requests ran"
    # Names and types (the protocol's table: TotalQueuedRequests, TotalRunningRequests,
    # KVCacheUtilization, BlockSize and NumGPUBlocks).
    fams = scrapes[-1]
    for name in ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc",
                 "vllm:cache_config_info"):
        assert fams[name].type == "gauge", (name, fams[name].type)
        assert only_sample(fams[name]).labels["model_name"] == "smol"
    # Meanings: a queue formed behind the two running slots; usage is a fraction of 1.
    assert seen["waiting"] >= 1, seen
    assert 1 <= seen["running"] <= MAX_SEQS, seen
    assert 0 < seen["kv"] <= 1, seen
    info = only_sample(fams["vllm:cache_config_info"])
    assert info.value == 1
    assert info.labels["block_size"] == "16"
    total = only_sample(fams["wring:kv_blocks_total"]).value
    assert int(info.labels["num_gpu_blocks"]) == total > 0
    # Counters the picker's other scorers and dashboards read.
    assert fams["vllm:prefix_cache_queries"].type == "counter"
    assert fams["vllm:time_to_first_token_seconds"].type == "histogram"
    # After the load: nothing left running or waiting.
    _, after = scrape(srv)
    assert only_sample(after["vllm:num_requests_waiting"]).value == 0
    assert only_sample(after["vllm:num_requests_running"]).value == 0


def test_a_server_without_adapters_leaves_the_lora_metric_out(busy_server):
    text, fams = scrape(busy_server)
    assert "vllm:lora_requests_info" not in fams
    assert "lora" not in text.lower(), "no HELP/TYPE line, no empty family"


def test_readiness_says_loading_then_ready_then_draining(tmp_path):
    srv = spawn(["--served-model-name", "smol", "--stats-interval", "0", "--drain-timeout", "60"],
                tmp_path / "serve.log", wait_path=None)
    try:
        phases, health, refused = [], [], []
        deadline = time.time() + 300
        while time.time() < deadline:
            assert srv.proc.poll() is None, srv.log()
            try:
                r = httpx.get(srv.base + "/ready", timeout=2)
            except httpx.HTTPError:
                time.sleep(0.05)
                continue
            phases.append((r.status_code, r.json()["status"]))
            if r.status_code == 200:
                break
            health.append(httpx.get(srv.base + "/health", timeout=2).status_code)
            r = httpx.post(srv.base + "/v1/completions", json={"prompt": "x", "max_tokens": 1}, timeout=60)
            # (The model may finish loading between the two calls: then it is served.)
            if r.status_code != 200:
                refused.append((r.status_code, r.headers.get("retry-after")))
            time.sleep(0.05)
        assert (503, "loading") in phases, phases
        assert phases[-1] == (200, "ready"), phases
        assert 503 in health and set(health) <= {503, 200}, "not alive until loaded: the startup probe waits"
        assert refused and all(code == 503 and retry for code, retry in refused), refused

        # A long stream is running when SIGTERM arrives: the server drains it.
        async def drain():
            async with httpx.AsyncClient(base_url=srv.base, timeout=300) as client:
                body = {"model": "smol", "prompt": "Count slowly:", "max_tokens": 256,
                        "ignore_eos": True, "stream": True, "temperature": 0}
                async with client.stream("POST", "/v1/completions", json=body) as resp:
                    assert resp.status_code == 200
                    chunks = resp.aiter_lines()
                    await chunks.__anext__()
                    srv.proc.send_signal(signal.SIGTERM)
                    await asyncio.sleep(0.5)
                    ready = await client.get("/ready")
                    assert (ready.status_code, ready.json()["status"]) == (503, "draining")
                    assert (await client.get("/health")).status_code == 200, "alive while draining"
                    late = await client.post("/v1/completions", json={"model": "smol", "prompt": "hi", "max_tokens": 2})
                    assert late.status_code == 503, late.text
                    rest = [line async for line in chunks]
                    assert rest[-2:] == ["data: [DONE]", ""] or "data: [DONE]" in rest, rest[-4:]
                    assert any('"finish_reason":"length"' in line for line in rest)

        asyncio.run(drain())
        assert srv.proc.wait(timeout=60) == 0, srv.log()[-3000:]
    finally:
        if srv.proc.poll() is None:
            srv.proc.kill()
