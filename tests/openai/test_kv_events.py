"""`--kv-events-endpoint`: a ZMQ subscriber that knows nothing but the events rebuilds the
server's prefix cache, and after 1,000 mixed requests (shared prefixes, chat and completions,
n > 1, streams, sampled and greedy, a cache small enough to evict all the time) its set of
block hashes equals the server's own (`GET /admin/kv-cache/blocks`). The hashes are the ones
a router recomputes from prompt tokens (kv_router.block_hashes)."""

import asyncio
import random

import httpx
import pytest

from conftest import API_KEY, spawn, stop
from kv_router import EventMirror, block_hashes

TOPIC = "kv@replica-a@smol"
SEED = "20240601"
BLOCK = 16
HEADERS = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture(scope="module")
def kv_server(tmp_path_factory):
    mirror = EventMirror()
    srv = spawn(
        [
            "--api-key", API_KEY, "--served-model-name", "smol",
            "--max-num-seqs", "8", "--block-size", str(BLOCK),
            # ~45 blocks of 16 tokens: eviction on nearly every admission.
            "--kv-cache-mib", "32", "--max-model-len", "512",
            "--kv-events-endpoint", mirror.endpoint, "--kv-events-topic", TOPIC,
            "--kv-events-hash-seed", SEED, "--stats-interval", "0",
        ],
        tmp_path_factory.mktemp("kv") / "serve.log",
    )
    yield srv, mirror
    code = stop(srv)
    mirror.close()
    assert code == 0, srv.log()[-3000:]


def server_blocks(srv):
    r = httpx.get(srv.base + "/admin/kv-cache/blocks", headers=HEADERS, timeout=30)
    r.raise_for_status()
    body = r.json()
    assert body["block_size"] == BLOCK and body["hash_scheme"] == "fnv64a-cbor"
    assert body["count"] == len(body["hashes"])
    return set(body["hashes"])


def test_the_admin_listing_needs_the_key(kv_server):
    srv, _ = kv_server
    assert httpx.get(srv.base + "/admin/kv-cache/blocks", timeout=10).status_code == 401


def test_block_hashes_are_the_routers_recomputation_of_the_prompt(kv_server):
    srv, mirror = kv_server
    mirror.wait_for(lambda m: TOPIC in m.first_events)
    assert mirror.first_events[TOPIC] == ["AllBlocksCleared"], "a fresh server says so first"
    rng = random.Random(7)
    prompt = [rng.randrange(100, 40000) for _ in range(3 * BLOCK + 5)]
    r = httpx.post(srv.base + "/v1/completions", headers=HEADERS, timeout=120,
                   json={"model": "smol", "prompt": prompt, "max_tokens": 2, "temperature": 0,
                         "ignore_eos": True})
    assert r.status_code == 200, r.text
    expected = block_hashes(prompt, BLOCK, SEED, "smol")
    assert len(expected) == 3
    mirror.wait_for(lambda m: set(expected) <= m.blocks.get(TOPIC, set()))
    assert set(expected) <= server_blocks(srv)
    with mirror.lock:
        stored = dict(mirror.stored[TOPIC])
    # Each block arrived with its parent and its own tokens, so a router can re-derive it.
    assert stored[expected[0]] == (None, prompt[:BLOCK])
    assert stored[expected[2]] == (expected[1], prompt[2 * BLOCK:3 * BLOCK])
    # A different seed or model name would give other hashes: the chain is keyed by both.
    assert block_hashes(prompt, BLOCK, "other", "smol")[0] != expected[0]
    assert block_hashes(prompt, BLOCK, SEED, "other")[0] != expected[0]


def mixed_requests(n, seed=11):
    rng = random.Random(seed)
    prefixes = [[rng.randrange(100, 40000) for _ in range(rng.choice([16, 32, 48]))] for _ in range(10)]
    words = ["cat", "river", "Rust", "cache", "blue", "seven", "tree", "why", "quickly", "north"]
    reqs = []
    for i in range(n):
        kind = rng.random()
        if kind < 0.55:
            body = {
                "prompt": rng.choice(prefixes) + [rng.randrange(100, 40000) for _ in range(rng.randrange(0, 24))],
                "max_tokens": rng.randrange(1, 4),
            }
            path = "/v1/completions"
        elif kind < 0.8:
            body = {
                "messages": [{"role": "user", "content": " ".join(rng.choice(words) for _ in range(rng.randrange(1, 20)))}],
                "max_tokens": rng.randrange(1, 4),
            }
            path = "/v1/chat/completions"
        else:
            body = {"prompt": " ".join(rng.choice(words) for _ in range(rng.randrange(5, 40))),
                    "max_tokens": rng.randrange(1, 5), "n": rng.choice([1, 2, 3])}
            path = "/v1/completions"
        body["model"] = "smol"
        body["temperature"] = rng.choice([0, 0.8])
        body["seed"] = i
        if rng.random() < 0.3:
            body["stream"] = True
        reqs.append((path, body))
    return reqs


def test_subscriber_rebuilds_the_block_table_after_1000_mixed_requests(kv_server):
    srv, mirror = kv_server
    reqs = mixed_requests(1000)

    async def run():
        sem = asyncio.Semaphore(12)
        async with httpx.AsyncClient(base_url=srv.base, headers=HEADERS, timeout=300) as client:
            async def one(path, body):
                async with sem:
                    r = await client.post(path, json=body)
                    assert r.status_code == 200, r.text
            await asyncio.gather(*(one(p, b) for p, b in reqs))

    asyncio.run(run())
    assert srv.metric("vllm:num_requests_running") == 0
    assert srv.metric("vllm:prefix_cache_hits_total") > 0, "shared prefixes hit the cache"
    mirror.settle(quiet=1.0)
    assert mirror.errors == []
    with mirror.lock:
        seqs = list(mirror.seqs[TOPIC])
    assert seqs == list(range(len(seqs))), "sequence numbers start at 0 and have no gap"
    table = server_blocks(srv)
    rebuilt = mirror.snapshot(TOPIC)
    assert len(table) > 0
    assert rebuilt == table, (len(rebuilt - table), len(table - rebuilt))
    # The cache turned over many times: far more blocks were stored than it holds.
    with mirror.lock:
        assert len(mirror.stored[TOPIC]) > 10 * len(table)
