"""`mindrouter serve --workers 2`: a supervisor and two gateway processes on one port.

One supervisor is started for the module over a fresh PostgreSQL database and a private Redis
prefix, in front of one simulated vLLM engine (behind a gate, as in test_two_processes.py) in
this process. Each worker serves /metrics on its own listener (`metrics_port: 0`) and prints
where, so the test can read each worker's own counters.

- Both workers answer on the one port: /healthz names the worker's pid, and both pids appear,
  each a child of the supervisor.
- A burst of 200 concurrent requests from one user with max_concurrent 4, all to the one port:
  exactly 4 admitted, the rest refused with 429, and both workers refused some (so the limit
  was shared, not counted per worker).
- A SIGKILLed worker is replaced by a new process, and the port answers every request made
  meanwhile.
- SIGTERM to the supervisor: a request held at the engine still completes, and it exits 0.
- Without redis_url, `--workers 2` refuses to start and says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from mindrouter.serving import ThreadServer
from mindrouter.sim import SimState
from tests.gateway.databases import fresh_database, redis_namespace, stores_at
from tests.gateway.procs import (
    CLI,
    MODEL,
    START_TIMEOUT,
    EngineGate,
    bearer,
    child_env,
    cli,
    gateway_config,
    sim_app,
    write_config,
)
from tests.gateway.test_two_processes import BURST, HELD, MAX_CONCURRENT, RPM, _burst
from tests.stores.conftest import run_in_thread

_LISTENING = re.compile(r"MindRouter listening on (http://\S+) \(2 workers\)")
_METRICS = re.compile(r"Metrics of worker (\d) on (http://\S+)")
_SERVING = re.compile(r"MindRouter worker (\d) \(pid (\d+)\) serving")


@dataclass
class Served:
    proc: subprocess.Popen[bytes]
    log_path: Path
    url: str
    sim: SimState
    gate: EngineGate
    key: str  # user `burst`, group `capped`

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def workers(self) -> dict[int, int]:
        """Worker index → pid of the latest process announced for it."""
        return {int(i): int(pid) for i, pid in _SERVING.findall(self.log())}

    def metrics_urls(self) -> dict[int, str]:
        return {int(i): url for i, url in _METRICS.findall(self.log())}


def _children(pid: int) -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                # The parent pid is the 2nd field after the parenthesised command name.
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    found.add(int(entry))
    return found


def _wait(what: str, check: Any, served: Served, timeout: float = START_TIMEOUT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if served.proc.poll() is not None:
            raise AssertionError(f"supervisor exited {served.proc.returncode}:\n{served.log()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not in time:\n{served.log()}")
        time.sleep(0.05)


def _healthz_pid(url: str) -> int | None:
    # A new connection each time: the kernel hands each to whichever worker accepts first.
    try:
        r = httpx.get(url + "/healthz", headers={"Connection": "close"}, timeout=5)
    except httpx.TransportError:
        return None
    return int(r.json()["pid"]) if r.status_code == 200 else None


def _start(config: Path, log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("wb") as log:
        return subprocess.Popen(
            [*CLI, "serve", "--config", str(config), "--port", "0", "--workers", "2"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=child_env(),
            start_new_session=True,
        )


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("workers")
    engine = sim_app(slots=8)
    gate = EngineGate(engine)
    with contextlib.ExitStack() as stack:
        sim = ThreadServer(gate).start()
        stack.callback(sim.stop)
        url = stack.enter_context(fresh_database("postgresql", tmp, migrated=False))
        redis = stack.enter_context(redis_namespace())
        config = write_config(
            tmp / "mindrouter.yaml",
            gateway_config(
                sim.url,
                url,
                groups=[{"name": "capped", "max_concurrent": MAX_CONCURRENT, "rpm": RPM}],
                users=[{"name": "burst", "group": "capped"}],
                redis_url=redis.url,
                redis_prefix=redis.prefix,
                metrics_port=0,
                # The burst comes from one address; the cap is counted per worker process.
                max_connections_per_client=1000,
            ),
        )
        cli("migrate", "--config", str(config))
        log_path = tmp / "supervisor.log"
        proc = _start(config, log_path)

        def stop() -> None:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

        stack.callback(stop)
        served = Served(proc, log_path, "", engine.state.sim, gate, "")
        served.url = _wait("listening", lambda: _LISTENING.search(served.log()), served).group(1)
        _wait("two workers", lambda: len(served.metrics_urls()) == 2, served)
        _wait("answers", lambda: _healthz_pid(served.url), served)
        served.key = run_in_thread(_key(url, "burst"))
        yield served


async def _key(url: str, user: str) -> str:
    async with stores_at(url) as stores:
        return (await stores.keys.create_key(user)).key


def test_both_workers_answer_on_the_one_port(served: Served) -> None:
    pids: Counter[int] = Counter()
    for _ in range(400):
        pid = _healthz_pid(served.url)
        assert pid is not None
        pids[pid] += 1
        if len(pids) == 2 and min(pids.values()) >= 3:
            break
    print(f"\nanswers by worker pid: {dict(pids)}")
    assert set(pids) == set(served.workers().values())
    assert set(pids) <= _children(served.proc.pid)


def _answered_by(metrics_url: str) -> int:
    """Requests the worker finished, whatever their outcome."""
    text = httpx.get(metrics_url, timeout=10).text
    return sum(
        int(float(v)) for v in re.findall(r"^mindrouter_requests_total\{[^}]*\} (\S+)", text, re.M)
    )


def test_a_burst_through_both_workers_admits_exactly_the_concurrency_limit(
    served: Served,
) -> None:
    before = {i: _answered_by(u) for i, u in served.metrics_urls().items()}
    seen = len(served.sim.records)
    outcomes = asyncio.run(_burst([served.url], served.key, served.gate))
    statuses = Counter(o.status for o in outcomes)
    odd = [o.body for o in outcomes if o.status not in (200, 429)][:2]
    assert statuses == {200: MAX_CONCURRENT, 429: BURST - MAX_CONCURRENT}, (statuses, odd)
    assert len(served.sim.records) - seen == MAX_CONCURRENT
    answered = {i: _answered_by(u) - before[i] for i, u in served.metrics_urls().items()}
    print(f"\nburst answered by worker: {answered}")
    assert sum(answered.values()) == BURST
    # Both workers took part of the burst; with per-worker counting the two would have
    # admitted up to twice the limit.
    assert all(n > MAX_CONCURRENT for n in answered.values()), answered


def test_a_killed_worker_is_replaced_and_the_port_keeps_answering(served: Served) -> None:
    old = served.workers()
    victim = old[0]
    failures: list[str] = []
    answered = 0
    stop = threading.Event()

    def keep_asking() -> None:
        nonlocal answered
        while not stop.is_set():
            pid = _healthz_pid(served.url)
            if pid is None:
                failures.append("no answer")
            else:
                answered += 1

    asker = threading.Thread(target=keep_asking, daemon=True)
    asker.start()
    try:
        os.kill(victim, signal.SIGKILL)
        _wait(
            "replacement",
            lambda: served.workers()[0] != victim and _healthz_pid(served.url) is not None,
            served,
        )
        new = served.workers()[0]
        # The replacement serves: its pid answers on the port.
        _wait("replacement answers", lambda: _healthz_pid(served.url) == new, served)
    finally:
        stop.set()
        asker.join(30)
    assert not failures, f"{len(failures)} of {answered + len(failures)} requests unanswered"
    assert new in _children(served.proc.pid) and victim not in _children(served.proc.pid)
    assert "worker 0 exited (killed by SIGKILL)" in served.log()


def test_sigterm_drains_every_worker_and_exits_zero(served: Served) -> None:
    held: dict[str, Any] = {}
    at_engine = served.gate.arrived
    served.gate.open.clear()

    def send() -> None:
        r = httpx.post(
            served.url + "/v1/chat/completions",
            json={**HELD, "max_tokens": 4},
            headers=bearer(served.key),
            timeout=60,
        )
        held["status"] = r.status_code
        held["body"] = r.json()

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    try:
        _wait("held at the engine", lambda: served.gate.arrived > at_engine, served)
        workers = set(served.workers().values())
        served.proc.send_signal(signal.SIGTERM)
        # The workers stop taking new work while the held request waits.
        _wait("draining", lambda: _healthz_pid(served.url) is None or _ready_503(served), served)
    finally:
        served.gate.open.set()
    sender.join(60)
    assert held.get("status") == 200, held
    assert held["body"]["model"] == MODEL
    assert served.proc.wait(60) == 0, served.log()
    assert not any(Path(f"/proc/{pid}").exists() for pid in workers)


def _ready_503(served: Served) -> bool:
    try:
        r = httpx.get(served.url + "/readyz", headers={"Connection": "close"}, timeout=5)
    except httpx.TransportError:
        return True
    return r.status_code == 503


def test_several_workers_without_redis_are_refused(tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "mindrouter.yaml",
        gateway_config(
            "http://127.0.0.1:9", "sqlite+aiosqlite:///" + str(tmp_path / "db"), groups=[], users=[]
        ),
    )
    done = subprocess.run(
        [*CLI, "serve", "--config", str(config), "--workers", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env(),
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--workers 2 needs redis_url" in done.stderr
    assert "shared between worker processes through Redis" in done.stderr
