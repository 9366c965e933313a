"""`python -m bench.hostile`: what hostile bodies and leaving clients cost the gateway.

One `mindrouter serve` process (SQLite, the default limits) in front of a simulated vLLM engine
running in this process. Three figures:

- `memory`: two 400 MB chunked bodies sent at once, without a key and then with a valid key;
  the answers, and the gateway's resident memory (VmRSS, sampled every 5 ms) at idle and at its
  peak while the bodies are being sent;
- `stall`: another user's small chat requests, one after another, alone and while three 33 MB
  bodies with a valid key arrive at once; the other user's p50 and p99 latency in both;
- `cancel`: a non-streamed request whose client hangs up while the engine generates; how long
  after the close the engine saw its connection close, over `--rounds` requests.

    .venv/bin/python -m bench.hostile                 # all three
    .venv/bin/python -m bench.hostile --only stall --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import yaml

from mindrouter.serving import ThreadServer
from mindrouter.settings import settings_from_dict
from mindrouter.sim import SimState, build_sim_app
from mindrouter.sim.config import SimConfig, SimModel
from mindrouter.stores.sql import apply_config, open_stores
from mindrouter.stores.sql.migrate import upgrade

MODEL = "m"
CLI = [sys.executable, "-m", "mindrouter.cli"]
MB = 1_000_000
CHUNK = b"x" * 65536
SMALL = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


# As in the overhead benchmark: the gateway on a core of its own, the benchmark (its engine, its
# measuring client, the curl senders) on the other, so that the latencies are the gateway's and
# not the senders' share of a small machine.
_PINNED = (os.cpu_count() or 1) >= 2 and shutil.which("taskset") is not None
GATEWAY_CORE = ["taskset", "-c", "1"] if _PINNED else []


class Gateway:
    """`mindrouter serve` in a child process."""

    def __init__(self, workdir: Path, sim_url: str) -> None:
        config = {
            "database_url": f"sqlite+aiosqlite:///{workdir}/bench.db",
            "log_level": "WARNING",
            "backends": [{"name": "sim", "engine": "vllm", "url": sim_url, "models": [MODEL]}],
            "models": [{"name": MODEL, "context_length": 8192}],
            "groups": [{"name": "g"}],
            "users": [{"name": "bench", "group": "g"}, {"name": "other", "group": "g"}],
        }
        path = workdir / "bench.yaml"
        path.write_text(yaml.safe_dump(config))
        self.key, self.other_key = asyncio.run(self._keys(config))
        self.log = workdir / "gateway.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [*GATEWAY_CORE, *CLI, "serve", "--config", str(path), "--port", "0"],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.url = self._wait_url()

    @staticmethod
    async def _keys(config: dict[str, Any]) -> tuple[str, str]:
        settings = settings_from_dict(config)
        stores = open_stores(settings.database_url)
        try:
            await upgrade(stores.engine)
            await apply_config(stores, settings)
            keys = [(await stores.keys.create_key(u)).key for u in ("bench", "other")]
            return keys[0], keys[1]
        finally:
            await stores.aclose()

    def _wait_url(self) -> str:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            found = re.search(r"MindRouter listening on (http://\S+)", self.log.read_text())
            if found:
                url = found.group(1)
                while httpx.get(url + "/healthz").status_code != 200:
                    time.sleep(0.05)
                return url
            if self.proc.poll() is not None:
                raise SystemExit(f"the gateway exited:\n{self.log.read_text()}")
            time.sleep(0.05)
        raise SystemExit("the gateway did not start")

    def rss_mb(self) -> float:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        kib = int(re.search(r"VmRSS:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
        return kib / 1024

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


class Sampler:
    """The peak of `gateway.rss_mb()` while in the `with` block."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.gateway.rss_mb())
            time.sleep(0.005)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def _chunks(total: int) -> Iterator[bytes]:
    for _ in range(total // len(CHUNK)):
        yield CHUNK


def _upload(url: str, path: str, key: str | None, results: list[str]) -> None:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        r = httpx.post(url + path, content=_chunks(400 * MB), headers=headers, timeout=120)
        results.append(str(r.status_code))
    except httpx.HTTPError as exc:
        # The gateway answered and closed while the client was still sending.
        results.append(type(exc).__name__)


def memory(g: Gateway) -> dict[str, Any]:
    for _ in range(20):
        httpx.post(g.url + "/v1/chat/completions", json=SMALL, headers=_auth(g.key))
    out: dict[str, Any] = {}
    for label, key in (("without a key", None), ("with a valid key", g.key)):
        idle = g.rss_mb()
        results: list[str] = []
        paths = ["/admin/groups", "/v1/chat/completions"]
        threads = [threading.Thread(target=_upload, args=(g.url, p, key, results)) for p in paths]
        with Sampler(g) as sampler:
            started = time.monotonic()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            seconds = time.monotonic() - started
        out[label] = {
            "answers": sorted(results),
            "idle_mb": round(idle, 1),
            "peak_mb": round(sampler.peak, 1),
            "growth_mb": round(sampler.peak - idle, 1),
            "seconds": round(seconds, 2),
        }
    return out


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _latencies(g: Gateway, stop: threading.Event, count: int) -> list[float]:
    out: list[float] = []
    with httpx.Client(base_url=g.url, headers=_auth(g.other_key), timeout=60) as client:
        while len(out) < count or not stop.is_set():
            started = time.perf_counter()
            r = client.post("/v1/chat/completions", json=SMALL)
            out.append(time.perf_counter() - started)
            assert r.status_code == 200, r.text
            if stop.is_set() and len(out) >= count:
                break
    return out


def _big_body() -> bytes:
    text = "lorem ipsum " * (33 * MB // 12)
    return json.dumps(
        {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": 4}
    ).encode()


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1)


def stall(g: Gateway, rounds: int, workdir: Path) -> dict[str, Any]:
    body = _big_body()
    # The bodies are sent by curl, in processes of their own: sending 33 MB from this process
    # would hold up its own measuring client (and the engine it runs), not the gateway.
    body_file = workdir / "big.json"
    body_file.write_bytes(body)
    curl = [
        "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "120",
        "-H", f"Authorization: Bearer {g.key}", "-H", "Content-Type: application/json",
        "--data-binary", f"@{body_file}", g.url + "/v1/chat/completions",
    ]  # fmt: skip
    idle_all: list[float] = []
    busy_all: list[float] = []
    answers: list[int] = []
    for _ in range(rounds):
        stop = threading.Event()
        stop.set()
        idle_all += _latencies(g, stop, 60)
        stop = threading.Event()
        busy: list[float] = []

        def others(into: list[float] = busy, until: threading.Event = stop) -> None:
            into.extend(_latencies(g, until, 20))

        other = threading.Thread(target=others)
        other.start()

        bigs = [subprocess.Popen(curl, stdout=subprocess.PIPE, text=True) for _ in range(3)]
        for proc in bigs:
            out, _ = proc.communicate()
            answers.append(int(out or 0))
        stop.set()
        other.join()
        busy_all += busy
    return {
        "body_mb": round(len(body) / MB, 1),
        "big_answers": sorted(set(answers)),
        "idle": {"n": len(idle_all), "p50_ms": _pct(idle_all, 0.5), "p99_ms": _pct(idle_all, 0.99)},
        "during": {
            "n": len(busy_all),
            "p50_ms": _pct(busy_all, 0.5),
            "p99_ms": _pct(busy_all, 0.99),
        },
    }


def cancel(g: Gateway, state: SimState, rounds: int) -> dict[str, Any]:
    url = urlsplit(g.url)
    body = json.dumps({**SMALL, "max_tokens": 200}).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {url.netloc}\r\n"
        f"Authorization: Bearer {g.key}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    delays = []
    for _ in range(rounds):
        before = len(state.records)
        with socket.create_connection((url.hostname, url.port)) as sock:
            sock.sendall(head + body)
            while len(state.records) <= before or state.records[-1].completion_tokens < 3:
                time.sleep(0.001)
            closed = time.monotonic()
        record = state.records[before]
        while record.cancelled_at is None:
            time.sleep(0.001)
        delays.append((record.cancelled_at - closed) * 1000)
    return {
        "rounds": rounds,
        "median_ms": round(statistics.median(delays), 1),
        "max_ms": round(max(delays), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["memory", "stall", "cancel"])
    parser.add_argument("--rounds", type=int, default=10)
    ns = parser.parse_args()
    if _PINNED:
        os.sched_setaffinity(0, {0})  # and the curl senders, started from here
    sim_app = build_sim_app(
        SimConfig("vllm", [SimModel(MODEL, 8192)], tokens_per_second=50, slots=16)
    )
    sim = ThreadServer(sim_app).start()
    workdir = Path(tempfile.mkdtemp(prefix="mr-bench-hostile-"))
    g = Gateway(workdir, sim.url)
    results: dict[str, Any] = {}
    try:
        if ns.only in (None, "memory"):
            results["memory"] = memory(g)
        if ns.only in (None, "cancel"):
            results["cancel"] = cancel(g, sim_app.state.sim, ns.rounds)
        if ns.only in (None, "stall"):
            # The engine answers at once here, so that latency is the gateway's alone.
            sim_app.state.sim.config.tokens_per_second = 0
            results["stall"] = stall(g, max(1, ns.rounds // 5), workdir)
    finally:
        g.stop()
        sim.stop()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
