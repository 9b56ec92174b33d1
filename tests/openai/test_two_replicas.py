"""Two `wring serve` replicas on loopback behind a router that sees only what they export
(the llm-d topology: the router binds one ZMQ SUB socket, every replica connects to it and
publishes on topic kv@<replica>@<model>; queue and KV use come from /metrics). The router
sends a request whose prefix one replica holds to that replica, even while it is busier,
and a request with a fresh prefix to the idle one; the holder's prefix-cache hits show the
routing paid off."""

import asyncio
import random

import httpx
import pytest

from conftest import spawn, stop
from kv_router import EventMirror, block_hashes, matched_blocks

BLOCK = 16
MODEL = "smol"


class Router:
    """Scores replicas like the endpoint picker's default profile: prefix-cache match
    (weight 3), queue (2) and KV-cache use (2); the highest score wins."""

    def __init__(self, mirror, replicas):
        self.mirror, self.replicas = mirror, replicas  # replicas: {name: Server}

    def load(self, srv):
        m = srv.metrics()
        get = lambda n: next(v for k, v in m.items() if k.startswith(n + "{"))
        return get("vllm:num_requests_waiting") + get("vllm:num_requests_running"), get("vllm:kv_cache_usage_perc")

    def pick(self, prompt):
        hashes = block_hashes(prompt, BLOCK, "", MODEL)
        scores = {}
        for name, srv in self.replicas.items():
            prefix = matched_blocks(self.mirror.snapshot(f"kv@{name}@{MODEL}"), hashes) / max(1, len(hashes))
            queue, kv = self.load(srv)
            scores[name] = 3 * prefix + 2 / (1 + queue) + 2 * (1 - kv)
        return max(sorted(scores), key=scores.get), scores


@pytest.fixture(scope="module")
def replicas(tmp_path_factory):
    mirror = EventMirror()
    tmp = tmp_path_factory.mktemp("replicas")
    servers = {}
    try:
        for name in ("a", "b"):
            servers[name] = spawn(
                ["--served-model-name", MODEL, "--block-size", str(BLOCK), "--stats-interval", "0",
                 "--kv-events-endpoint", mirror.endpoint, "--kv-events-topic", f"kv@{name}@{MODEL}"],
                tmp / f"{name}.log",
            )
        mirror.wait_for(lambda m: all(f"kv@{n}@{MODEL}" in m.first_events for n in servers))
        yield mirror, servers
    finally:
        codes = {n: stop(s) for n, s in servers.items()}
        mirror.close()
    assert codes == {"a": 0, "b": 0}


def complete(srv, prompt, max_tokens=2):
    # ignore_eos: a request that ends on its first token leaves its last prompt chunk's
    # blocks out of the cache; two tokens commit every full prompt block.
    r = httpx.post(srv.base + "/v1/completions", timeout=300,
                   json={"model": MODEL, "prompt": prompt, "max_tokens": max_tokens,
                         "temperature": 0, "ignore_eos": True})
    assert r.status_code == 200, r.text
    return r.json()


def hits(srv):
    return srv.metric("vllm:prefix_cache_hits_total")


def test_a_repeated_prefix_goes_to_the_replica_that_holds_it(replicas):
    mirror, servers = replicas
    router = Router(mirror, servers)
    rng = random.Random(3)
    shared = [rng.randrange(100, 40000) for _ in range(6 * BLOCK)]

    # 1. Nobody holds the prefix: the router balances (both idle, so its tie-break picks).
    first, _ = router.pick(shared + [11, 12, 13])
    complete(servers[first], shared + [11, 12, 13])
    holder, other = first, "b" if first == "a" else "a"
    want = block_hashes(shared, BLOCK, "", MODEL)
    mirror.wait_for(lambda m: set(want) <= m.blocks.get(f"kv@{holder}@{MODEL}", set()))
    assert not set(want) & mirror.snapshot(f"kv@{other}@{MODEL}")

    async def scenario():
        async with httpx.AsyncClient(timeout=300) as client:
            # 2. Keep the holder busy with a long request.
            long = {"model": MODEL, "prompt": "Count from one to one hundred:", "max_tokens": 400,
                    "ignore_eos": True, "stream": True, "temperature": 0}
            async with client.stream("POST", servers[holder].base + "/v1/completions", json=long) as busy:
                lines = busy.aiter_lines()
                await lines.__anext__()
                assert router.load(servers[holder])[0] >= 1

                # 3. A fresh prefix goes to the idle replica: the queue decides.
                fresh = [rng.randrange(100, 40000) for _ in range(4 * BLOCK)]
                to, scores = router.pick(fresh)
                assert to == other, scores

                # 4. The repeated prefix goes to the holder although it is busier: the KV
                #    events decide, and the holder serves most of the prompt from cache.
                repeat = shared + [21, 22, 23, 24]
                to, scores = router.pick(repeat)
                assert to == holder, scores
                before = hits(servers[holder])
                r = await client.post(servers[to].base + "/v1/completions",
                                      json={"model": MODEL, "prompt": repeat, "max_tokens": 2, "temperature": 0})
                assert r.status_code == 200, r.text
                assert r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == len(shared)
                assert hits(servers[holder]) - before == len(shared)
                async for _ in lines:
                    pass

    asyncio.run(scenario())
    # What the other replica would have paid: the same prompt there is a full miss.
    out = complete(servers[other], shared + [31])
    assert out["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
