"""A router's view of wring replicas, built only from what they export: KV events over ZMQ
(vLLM's wire format: topic, 8-byte big-endian sequence number, msgpack `KVEventBatch`) and
Prometheus metrics. Hashes are recomputed from prompt tokens the way llm-d's KV-cache
indexer does it (FNV-64a over canonical CBOR, chained from a root of seed and model name),
written here independently of the server's Rust code."""

import socket
import struct
import threading
import time

import cbor2
import msgpack
import zmq


def fnv64a(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def _h(value) -> int:
    return fnv64a(cbor2.dumps(value, canonical=True))


def root_hash(seed: str, model: str) -> int:
    return _h([fnv64a(seed.encode()), None, model])


def block_hashes(tokens, block_size: int, seed: str, model: str):
    """Chained hashes of the full blocks of `tokens`."""
    parent, out = root_hash(seed, model), []
    for i in range(len(tokens) // block_size):
        parent = _h([parent, list(tokens[i * block_size:(i + 1) * block_size]), None])
        out.append(parent)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EventMirror:
    """Binds a SUB socket on loopback (servers connect to it, as they do to llm-d's indexer)
    and rebuilds each topic's cached-block set from the events alone."""

    def __init__(self):
        self.port = free_port()
        self.endpoint = f"tcp://127.0.0.1:{self.port}"
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"")
        self.sub.setsockopt(zmq.RCVHWM, 0)
        self.sub.bind(self.endpoint)
        self.lock = threading.Lock()
        self.blocks = {}        # topic -> set of hashes
        self.stored = {}        # topic -> {hash: (parent, tokens of the block)}
        self.seqs = {}          # topic -> sequence numbers seen, in order
        self.first_events = {}  # topic -> the first event received
        self.errors = []
        self.block_size = None
        self.last_message = time.time()
        self._stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        poller = zmq.Poller()
        poller.register(self.sub, zmq.POLLIN)
        while not self._stop:
            if not poller.poll(100):
                continue
            frames = self.sub.recv_multipart()
            try:
                self._apply(frames)
            except Exception as e:  # recorded, asserted by the tests
                self.errors.append(repr(e))

    def _apply(self, frames):
        assert len(frames) == 3, f"{len(frames)} frames"
        topic = frames[0].decode()
        (seq,) = struct.unpack(">Q", frames[1])
        ts, events = msgpack.unpackb(frames[2], raw=False, strict_map_key=False)
        assert isinstance(ts, float)
        with self.lock:
            self.last_message = time.time()
            self.seqs.setdefault(topic, []).append(seq)
            cached = self.blocks.setdefault(topic, set())
            stored = self.stored.setdefault(topic, {})
            for e in events:
                self.first_events.setdefault(topic, e)
                tag = e[0]
                if tag == "BlockStored":
                    _, hashes, parent, tokens, block_size, lora_id, medium = e
                    assert lora_id is None and medium in ("CPU", "GPU"), e
                    assert len(tokens) == len(hashes) * block_size, e
                    self.block_size = block_size
                    for i, h in enumerate(hashes):
                        stored[h] = (parent if i == 0 else hashes[i - 1],
                                     tokens[i * block_size:(i + 1) * block_size])
                    cached.update(hashes)
                elif tag == "BlockRemoved":
                    _, hashes, medium = e
                    for h in hashes:
                        assert h in cached, f"BlockRemoved of {h:#x}, never stored"
                        cached.discard(h)
                elif tag == "AllBlocksCleared":
                    assert len(e) == 1
                    cached.clear()
                else:
                    raise AssertionError(f"unknown event {e!r}")

    def snapshot(self, topic):
        with self.lock:
            return set(self.blocks.get(topic, set()))

    def settle(self, quiet: float = 1.0, timeout: float = 60):
        """Waits until no message has arrived for `quiet` seconds."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            with self.lock:
                idle = time.time() - self.last_message
            if idle >= quiet:
                return
            time.sleep(0.1)
        raise TimeoutError("KV events kept coming")

    def wait_for(self, pred, timeout: float = 30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            with self.lock:
                if pred(self):
                    return
            time.sleep(0.05)
        raise TimeoutError("condition on KV events not met")

    def close(self):
        self._stop = True
        self.thread.join(timeout=5)
        self.sub.close(linger=0)
        self.ctx.term()


def matched_blocks(cached: set, hashes) -> int:
    """Leading blocks of a prompt a replica holds (prefix matching stops at the first miss)."""
    n = 0
    for h in hashes:
        if h not in cached:
            break
        n += 1
    return n
