"""Two `mindrouter serve` processes sharing PostgreSQL and Redis, as a two-replica deployment.

One pair is started for the module (a fresh PostgreSQL database migrated by `mindrouter migrate`,
a private Redis prefix) in front of one simulated vLLM engine in this process. The engine sits
behind a gate: while it is closed, requests that reach the engine wait there, holding their
gateway slot, so a burst is certain to arrive while the first requests are in flight however slow
the machine is.

- A key revoked (CLI or admin API), or its user deactivated, is refused by BOTH processes; the
  time from the change's own database timestamp (or from just before the admin call) to the first
  refusal, polling every 20 ms, is printed (well under a second on a quiet machine). The bound
  itself (a cached key is trusted at most `max_staleness` after the last epoch read, 1 s) is
  proved with an injected clock in tests/identity/test_authenticator.py, not with wall time
  here, which a loaded machine stretches.
- 200 concurrent requests from one user with max_concurrent 4 and rpm 60, sent alternately to the
  two processes: exactly 4 are admitted and 196 refused with 429 + Retry-After; the refusals
  reserve nothing, so exactly 56 more fit in the minute afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from mindrouter.serving import ThreadServer
from mindrouter.sim import SimState
from tests.gateway.databases import fresh_database, redis_namespace, stores_at
from tests.gateway.procs import (
    MODEL,
    EngineGate,
    GatewayProcess,
    bearer,
    cli,
    created_key,
    gateway_config,
    gateway_processes,
    http,
    sim_app,
    write_config,
)
from tests.stores.conftest import run_in_thread

POLL_S = 0.02
MAX_CONCURRENT = 4
RPM = 60
BURST = 200
QUICK = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
HELD = {"model": MODEL, "messages": [{"role": "user", "content": "hold the slot"}]}


@dataclass
class Pair:
    procs: list[GatewayProcess]
    config: Path
    database_url: str
    sim: SimState
    gate: EngineGate
    cli_key: str  # made by `mindrouter keys create`, user `tester`
    admin_key: str
    burst_key: str  # user `burst`, group `capped`
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def urls(self) -> list[str]:
        return [p.url for p in self.procs]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    tmp = tmp_path_factory.mktemp("two-processes")
    engine = sim_app(slots=8)
    gate = EngineGate(engine)
    with contextlib.ExitStack() as stack:
        sim = ThreadServer(gate).start()
        stack.callback(sim.stop)
        url = stack.enter_context(fresh_database("postgresql", tmp, migrated=False))
        redis = stack.enter_context(redis_namespace())
        groups: list[dict[str, Any]] = [
            {"name": "testers"},
            {"name": "capped", "max_concurrent": MAX_CONCURRENT, "rpm": RPM},
        ]
        users = [
            {"name": "tester", "group": "testers"},
            {"name": "ops", "group": "testers"},
            {"name": "burst", "group": "capped"},
        ]
        config = write_config(
            tmp / "mindrouter.yaml",
            gateway_config(
                sim.url,
                url,
                groups=groups,
                users=users,
                redis_url=redis.url,
                redis_prefix=redis.prefix,
                # The burst opens up to 200 connections from one address at once: the limits
                # are the subject here, not the per-address connection cap (0: none).
                max_connections_per_client=0,
            ),
        )
        cli("migrate", "--config", str(config))
        pool = stack.enter_context(ThreadPoolExecutor(1))
        # The key is made while the gateways start: each takes seconds of imports.
        made = pool.submit(cli, "keys", "create", "--config", str(config), "--user", "tester")
        procs = stack.enter_context(gateway_processes(config, tmp))
        admin_key, burst_key = run_in_thread(_keys(url, ("ops", True), ("burst", False)))
        yield Pair(
            procs=procs,
            config=config,
            database_url=url,
            sim=engine.state.sim,
            gate=gate,
            cli_key=created_key(made.result()),
            admin_key=admin_key,
            burst_key=burst_key,
        )


async def _keys(url: str, *wanted: tuple[str, bool]) -> list[str]:
    async with stores_at(url) as stores:
        return [(await stores.keys.create_key(u, admin=a)).key for u, a in wanted]


async def _new_user_key(url: str, name: str) -> str:
    async with stores_at(url) as stores:
        await stores.directory.create_user(name, "testers")
        return (await stores.keys.create_key(name)).key


async def _revoked_at(url: str, key: str) -> datetime:
    async with stores_at(url) as stores:
        info = await stores.keys.get_key(key)
    assert info.revoked_at is not None
    return info.revoked_at


# -- revocation --------------------------------------------------------------------------------


class Poller(threading.Thread):
    """Asks one gateway with `key` every 20 ms; notes the wall time of the first 401."""

    def __init__(self, url: str, key: str, deadline_s: float = 30.0) -> None:
        super().__init__(daemon=True)
        self.url, self.key, self.deadline_s = url, key, deadline_s
        self.accepted = 0
        self.refused_at: float | None = None
        self.body: Any = None
        self.error: str | None = None
        self.first_ok = threading.Event()

    def run(self) -> None:
        deadline = time.monotonic() + self.deadline_s
        with httpx.Client(base_url=self.url, headers=bearer(self.key), timeout=5) as client:
            while time.monotonic() < deadline:
                try:
                    r = client.get("/v1/models")
                except httpx.HTTPError as exc:
                    self.error = f"request failed: {exc!r}"
                    break
                if r.status_code == 401:
                    self.refused_at = time.time()
                    self.body = r.json()
                    break
                if r.status_code != 200:
                    self.error = f"unexpected {r.status_code}: {r.text}"
                    break
                self.accepted += 1
                self.first_ok.set()
                time.sleep(POLL_S)
        self.first_ok.set()


def _chat_status(url: str, key: str) -> httpx.Response:
    return http.post(url + "/v1/chat/completions", json=QUICK, headers=bearer(key), timeout=30)


@pytest.mark.parametrize("change", ["cli-revoke", "api-revoke", "api-deactivate"])
def test_a_change_to_a_key_reaches_both_processes(pair: Pair, change: str) -> None:
    if change == "cli-revoke":
        key, user = pair.cli_key, "tester"
    else:
        user = f"u-{change}-{time.monotonic_ns() % 10**8}"
        key = run_in_thread(_new_user_key(pair.database_url, user))
    # The key works end to end on both processes before the change, and is cached by both.
    for url in pair.urls:
        r = _chat_status(url, key)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"]
    pollers = [Poller(url, key) for url in pair.urls]
    for p in pollers:
        p.start()
    for p in pollers:
        assert p.first_ok.wait(10) and p.accepted > 0, p.error
    if change == "cli-revoke":
        out = cli("keys", "revoke", "--config", str(pair.config), key)
        assert "revoked" in out
        changed_at = run_in_thread(_revoked_at(pair.database_url, key)).timestamp()
        reason = "API key revoked"
    elif change == "api-revoke":
        changed_at = time.time()  # before the request: the commit can only be later
        r = http.post(
            f"{pair.urls[0]}/admin/keys/{key[:12]}/revoke",
            headers=bearer(pair.admin_key),
            timeout=10,
        )
        assert r.status_code == 200, r.text
        assert r.json()["revoked_at"] is not None
        reason = "API key revoked"
    else:
        changed_at = time.time()
        r = http.patch(
            f"{pair.urls[1]}/admin/users/{user}",
            json={"active": False},
            headers=bearer(pair.admin_key),
            timeout=10,
        )
        assert r.status_code == 200, r.text
        assert r.json()["active"] is False
        reason = "inactive"
    for p in pollers:
        p.join(35)
    latencies = []
    for url, p in zip(pair.urls, pollers, strict=True):
        assert p.error is None, p.error
        assert p.refused_at is not None, f"{url} still accepted the key"
        assert p.body["error"]["type"] == "authentication_error"
        assert reason in p.body["error"]["message"]
        latencies.append(p.refused_at - changed_at)
    pair.figures[change] = latencies
    print(f"\n{change}: refused {', '.join(f'{s * 1000:.0f} ms' for s in latencies)} after")
    assert all(lat >= 0 for lat in latencies), latencies  # refused after the change, not before
    # Refused for inference too, in the OpenAI shape, on both.
    for url in pair.urls:
        r = _chat_status(url, key)
        assert r.status_code == 401
        assert r.json()["error"]["type"] == "authentication_error"


# -- limits shared through Redis -----------------------------------------------------------------


@dataclass
class Outcome:
    process: int
    status: int
    retry_after: str | None
    body: Any


async def _burst(urls: list[str], key: str, gate: EngineGate) -> list[Outcome]:
    limits = httpx.Limits(max_connections=BURST * 2, max_keepalive_connections=BURST * 2)
    async with httpx.AsyncClient(limits=limits, timeout=60, headers=bearer(key)) as client:
        # Warm both processes (key verified and cached, usage seeded) without using a limit.
        for url in urls:
            assert (await client.get(url + "/v1/usage")).status_code == 200
        done: list[Outcome] = []
        at_engine = gate.arrived

        async def one(i: int) -> Outcome:
            process = i % len(urls)
            r = await client.post(urls[process] + "/v1/chat/completions", json=HELD)
            outcome = Outcome(process, r.status_code, r.headers.get("retry-after"), r.json())
            done.append(outcome)
            return outcome

        async def open_gate_when_settled() -> None:
            # Every request has either been answered or is waiting at the engine: only then may
            # the admitted ones finish (and free their slots).
            deadline = time.monotonic() + 60
            while len(done) + gate.arrived - at_engine < BURST and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            gate.open.set()

        gate.open.clear()
        try:
            opener = asyncio.ensure_future(open_gate_when_settled())
            outcomes = await asyncio.gather(*(one(i) for i in range(BURST)))
            await opener
        finally:
            gate.open.set()
        return outcomes


def test_a_burst_across_both_processes_admits_exactly_the_concurrency_limit(pair: Pair) -> None:
    seen_before = len(pair.sim.records)
    started = time.monotonic()
    outcomes = asyncio.run(_burst(pair.urls, pair.burst_key, pair.gate))
    elapsed = time.monotonic() - started

    statuses = Counter(o.status for o in outcomes)
    assert statuses == {200: MAX_CONCURRENT, 429: BURST - MAX_CONCURRENT}, statuses
    admitted = [o for o in outcomes if o.status == 200]
    refused = [o for o in outcomes if o.status == 429]
    for o in refused:
        assert o.retry_after is not None and re.fullmatch(r"[1-9][0-9]*", o.retry_after)
        assert o.body["error"]["type"] == "rate_limit_error"
        assert "concurrent" in o.body["error"]["message"]
    # Both processes refused: the limit is shared, not per process.
    per_process = Counter(o.process for o in refused)
    assert per_process[0] >= BURST // 2 - MAX_CONCURRENT
    assert per_process[1] >= BURST // 2 - MAX_CONCURRENT
    # Only the admitted requests reached the engine.
    assert len(pair.sim.records) - seen_before == MAX_CONCURRENT

    for url in pair.urls:
        usage = http.get(url + "/v1/usage", headers=bearer(pair.burst_key), timeout=10).json()
        assert usage["in_flight"] == 0
        assert usage["reserved_tokens"] == 0
        assert usage["requests_last_minute"] == MAX_CONCURRENT

    # Refusals reserve nothing, not even a place in the per-minute window: the rest of the
    # minute's allowance is still there, and not one request more, whichever process is asked.
    more = 0
    with httpx.Client(headers=bearer(pair.burst_key), timeout=30) as client:
        while True:
            url = pair.urls[more % 2]
            r = client.post(url + "/v1/chat/completions", json=QUICK)
            if r.status_code != 200:
                break
            more += 1
            assert more <= RPM, "the per-minute limit was never applied"
    assert r.status_code == 429, r.text
    assert "per minute" in r.json()["error"]["message"]
    assert re.fullmatch(r"[1-9][0-9]*", r.headers["retry-after"])
    assert 1 <= int(r.headers["retry-after"]) <= 60
    assert more == RPM - MAX_CONCURRENT
    pair.figures["burst"] = {
        "per_process_refused": dict(per_process),
        "admitted_by_process": dict(Counter(o.process for o in admitted)),
        "seconds": round(elapsed, 2),
    }
    print(f"\nburst: {pair.figures['burst']}")
