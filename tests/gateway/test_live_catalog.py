"""The database as the source of truth at run time, across two `mindrouter serve` processes on
PostgreSQL and Redis.

A backend added through the admin API serves requests at both processes soon after (polled with
a generous deadline; the catalog epoch is polled every 0.25 s, so it takes well under a second on
an idle machine); disabled, it gets no new request at either while a stream already on it runs to
its end; the same through the CLI. The new backend serves a model no other backend has, so a
request for it succeeding (or answered as a missing model) shows which catalog a process routes
by.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from mindrouter.serving import ThreadServer
from mindrouter.sim import SimState, build_sim_app
from mindrouter.sim.config import SimConfig, SimModel
from tests.gateway.databases import fresh_database, redis_namespace, stores_at
from tests.gateway.procs import (
    GatewayProcess,
    bearer,
    cli,
    gateway_config,
    gateway_processes,
    http,
    sim_app,
    write_config,
)
from tests.stores.conftest import run_in_thread

EXTRA = "extra"  # served only by the backend the tests add
DEADLINE_S = 20.0  # generous: the machine is shared and slow; the mechanism needs ~0.25 s


@dataclass
class Pair:
    procs: list[GatewayProcess]
    config: Path
    key: str
    admin_key: str
    extra_url: str
    extra: SimState


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    tmp = tmp_path_factory.mktemp("live-catalog")
    # Slow enough that a stream of 40 tokens is still running when the backend is disabled.
    extra_app = build_sim_app(
        SimConfig(engine="vllm", models=[SimModel(EXTRA, 8192)], tokens_per_second=10.0)
    )
    with contextlib.ExitStack() as stack:
        main = ThreadServer(sim_app()).start()
        stack.callback(main.stop)
        extra = ThreadServer(extra_app).start()
        stack.callback(extra.stop)
        url = stack.enter_context(fresh_database("postgresql", tmp, migrated=False))
        redis = stack.enter_context(redis_namespace())
        config = write_config(
            tmp / "mindrouter.yaml",
            gateway_config(
                main.url,
                url,
                groups=[{"name": "testers"}],
                users=[{"name": "tester", "group": "testers"}, {"name": "ops", "group": "testers"}],
                redis_url=redis.url,
                redis_prefix=redis.prefix,
            ),
        )
        cli("migrate", "--config", str(config))
        procs = stack.enter_context(gateway_processes(config, tmp))
        key, admin_key = run_in_thread(_keys(url))
        yield Pair(procs, config, key, admin_key, extra.url, extra_app.state.sim)


async def _keys(url: str) -> tuple[str, str]:
    async with stores_at(url) as stores:
        user = await stores.keys.create_key("tester")
        admin = await stores.keys.create_key("ops", admin=True)
        return user.key, admin.key


def chat(url: str, key: str) -> httpx.Response:
    body = {"model": EXTRA, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    return http.post(url + "/v1/chat/completions", json=body, headers=bearer(key), timeout=30)


def wait_for_status(pair: Pair, status: int) -> list[float]:
    """Seconds until each process answers a request for EXTRA with `status` (asked in turn)."""
    start = time.monotonic()
    took: dict[str, float] = {}
    while len(took) < len(pair.procs):
        for proc in pair.procs:
            if proc.url in took:
                continue
            r = chat(proc.url, pair.key)
            if r.status_code == status:
                took[proc.url] = time.monotonic() - start
            assert time.monotonic() - start < DEADLINE_S, f"{proc.url}: still {r.status_code}"
        time.sleep(0.02)
    return [took[p.url] for p in pair.procs]


def listed(url: str, key: str) -> list[str]:
    return [m["id"] for m in http.get(url + "/v1/models", headers=bearer(key)).json()["data"]]


def test_a_backend_added_and_disabled_through_the_admin_api(pair: Pair) -> None:
    admin = bearer(pair.admin_key)
    assert chat(pair.procs[0].url, pair.key).status_code == 404
    body = {"name": "extra-1", "engine": "vllm", "url": pair.extra_url, "models": [{"name": EXTRA}]}
    r = http.post(pair.procs[0].url + "/admin/backends", json=body, headers=admin)
    assert r.status_code == 201, r.text
    took = wait_for_status(pair, 200)
    print(f"added backend serving at both processes after {took} s")
    for proc in pair.procs:
        assert EXTRA in listed(proc.url, pair.key)

    # A stream already on the backend when it is disabled runs to its end.
    stream_body = {
        "model": EXTRA,
        "messages": [{"role": "user", "content": "a long answer"}],
        "max_tokens": 40,
        "stream": True,
    }
    with httpx.stream(
        "POST",
        pair.procs[1].url + "/v1/chat/completions",
        json=stream_body,
        headers=bearer(pair.key),
        timeout=60,
    ) as stream:
        lines = stream.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
        assert first
        r = http.patch(
            pair.procs[0].url + "/admin/backends/extra-1", json={"enabled": False}, headers=admin
        )
        assert r.status_code == 200, r.text
        took = wait_for_status(pair, 404)
        print(f"disabled backend refused at both processes after {took} s")
        seen = len(pair.extra.records)
        for proc in pair.procs:
            assert chat(proc.url, pair.key).status_code == 404
            assert EXTRA not in listed(proc.url, pair.key)
        assert len(pair.extra.records) == seen, "no new request reached the disabled backend"
        rest = [line for line in lines if line.startswith("data: ")]
    assert rest[-1] == "data: [DONE]"
    reasons = [
        choice.get("finish_reason")
        for line in rest[:-1]
        for choice in json.loads(line.removeprefix("data: "))["choices"]
    ]
    finished = [r for r in reasons if r is not None]
    assert finished, "the stream on the disabled backend ran to its end"


def test_the_same_through_the_cli(pair: Pair) -> None:
    config = str(pair.config)
    with contextlib.suppress(AssertionError):
        cli("backends", "delete", "extra-1", "--config", config)
    cli(
        "backends", "create", "extra-2", "--engine", "vllm", "--url", pair.extra_url,
        "--model", EXTRA, "--config", config,
    )  # fmt: skip
    took = wait_for_status(pair, 200)
    print(f"CLI-added backend serving at both processes after {took} s")
    cli("backends", "update", "extra-2", "--disable", "--config", config)
    took = wait_for_status(pair, 404)
    print(f"CLI-disabled backend refused at both processes after {took} s")
    cli("backends", "update", "extra-2", "--enable", "--config", config)
    wait_for_status(pair, 200)
    cli("backends", "delete", "extra-2", "--config", config)
    wait_for_status(pair, 404)


def routing_status(url: str, key: str, name: str) -> str | None:
    r = http.get(url + "/admin/routing/backends", headers=bearer(key))
    assert r.status_code == 200, r.text
    return next((b["status"] for b in r.json()["data"] if b["name"] == name), None)


def wait_for_routing_status(pair: Pair, name: str, status: str) -> None:
    start = time.monotonic()
    for proc in pair.procs:
        while (seen := routing_status(proc.url, pair.admin_key, name)) != status:
            assert time.monotonic() - start < DEADLINE_S, f"{proc.url}: {name} still {seen}"
            time.sleep(0.02)


def test_a_drain_on_one_process_holds_on_every_process(pair: Pair) -> None:
    admin = bearer(pair.admin_key)
    body = {"name": "extra-2", "engine": "vllm", "url": pair.extra_url, "models": [{"name": EXTRA}]}
    r = http.post(pair.procs[0].url + "/admin/backends", json=body, headers=admin)
    assert r.status_code == 201, r.text
    try:
        wait_for_status(pair, 200)
        r = http.post(pair.procs[0].url + "/admin/routing/backends/extra-2/drain", headers=admin)
        assert r.status_code == 200 and r.json()["status"] == "DRAINING", r.text
        # The other process too: neither sends it anything new (a request for its model waits
        # for capacity, tests/gateway/test_health.py), and a restart would keep the drain.
        wait_for_routing_status(pair, "extra-2", "DRAINING")
        r = http.post(pair.procs[1].url + "/admin/routing/backends/extra-2/undrain", headers=admin)
        assert r.status_code == 200 and r.json()["status"] == "HEALTHY", r.text
        wait_for_routing_status(pair, "extra-2", "HEALTHY")
        wait_for_status(pair, 200)
    finally:
        http.delete(pair.procs[0].url + "/admin/backends/extra-2", headers=admin)
