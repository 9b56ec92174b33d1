"""Starts one real `wring serve` on loopback (default model) for the whole session.

Environment:
  WRING_BIN      the wring binary (default: <repo>/target/release/wring, else target/debug/wring)
  WRING_SERVE_ARGS  extra flags for `wring serve` (split on spaces)
"""

import os
import pathlib
import shlex
import signal
import socket
import subprocess
import time

import httpx
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
API_KEY = "wring-test-key"


def wring_bin() -> str:
    env = os.environ.get("WRING_BIN")
    if env:
        return env
    for profile in ("release", "debug"):
        p = REPO / "target" / profile / "wring"
        if p.exists():
            return str(p)
    raise RuntimeError("no wring binary: build it (cargo build -p wring) or set WRING_BIN")


def repo_test_data() -> pathlib.Path:
    """The repository's test data (golden outputs, corpus fixtures): tests/data."""
    return REPO / "tests" / "data"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, proc: subprocess.Popen, base: str, log_path: pathlib.Path):
        self.proc = proc
        self.base = base
        self.log_path = log_path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def metrics(self) -> dict:
        """Samples of /metrics as {'name{labels}': value} (model_name label dropped)."""
        text = httpx.get(self.base + "/metrics", timeout=10).text
        out = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
        return out

    def metric(self, name: str) -> float:
        for key, value in self.metrics().items():
            if key == name or key.startswith(name + "{"):
                return value
        raise KeyError(name)


def spawn(args, log_path: pathlib.Path, wait_path: str | None = "/health", timeout: float = 300):
    """Starts `wring serve ARGS` on a free loopback port; waits for `wait_path` to answer 200
    (None: returns at once). The caller stops it (`stop`)."""
    port = free_port()
    cmd = [wring_bin(), "serve", "--host", "127.0.0.1", "--port", str(port)] + list(args)
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    srv = Server(proc, f"http://127.0.0.1:{port}", log_path)
    if wait_path is None:
        return srv
    deadline = time.time() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"wring serve exited with {proc.returncode}:\n{srv.log()}")
        try:
            if httpx.get(srv.base + wait_path, timeout=2).status_code == 200:
                return srv
        except httpx.HTTPError:
            pass
        if time.time() > deadline:
            proc.kill()
            raise RuntimeError(f"wring serve did not answer {wait_path}:\n{srv.log()}")
        time.sleep(0.2)


def stop(srv: "Server", timeout: float = 60) -> int:
    """SIGTERM, then the exit code (killed and raised past `timeout`)."""
    if srv.proc.poll() is None:
        srv.proc.send_signal(signal.SIGTERM)
    try:
        return srv.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        srv.proc.kill()
        raise


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    port = free_port()
    log_path = tmp_path_factory.mktemp("wring") / "serve.log"
    args = [
        wring_bin(), "serve", "--host", "127.0.0.1", "--port", str(port),
        "--api-key", API_KEY, "--served-model-name", "smol", "--max-num-seqs", "64",
        # The float32 reference: test_completions_on_token_ids_match_the_golden_outputs
        # compares against its greedy outputs (the default, auto, runs the file's 4 bits).
        "--cpu-weights", "f32",
        # CORS is off by default; test_cors_preflight_from_a_browser checks one allowed origin.
        "--allowed-origins", "http://localhost:5173",
    ] + shlex.split(os.environ.get("WRING_SERVE_ARGS", ""))
    log = open(log_path, "w")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 300
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"wring serve exited with {proc.returncode}:\n{log_path.read_text()}")
        try:
            if httpx.get(base + "/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.time() > deadline:
            proc.kill()
            raise RuntimeError("wring serve did not become healthy:\n" + log_path.read_text())
        time.sleep(0.5)
    srv = Server(proc, base, log_path)
    yield srv
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    log.close()
    assert code == 0, f"wring serve exited with {code} after SIGTERM:\n{srv.log()[-4000:]}"


@pytest.fixture(scope="session")
def client(server):
    import openai

    return openai.OpenAI(base_url=server.base + "/v1", api_key=API_KEY, max_retries=0, timeout=300)


@pytest.fixture(scope="session")
def aclient(server):
    import openai

    return openai.AsyncOpenAI(base_url=server.base + "/v1", api_key=API_KEY, max_retries=0, timeout=600)
