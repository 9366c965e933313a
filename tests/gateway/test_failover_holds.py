"""Failover holds when much of the fleet fails.

- Two of three backends failing half their requests, ranked first and with breakers that keep
  opening and half-opening: at least 99% of the requests succeed (1,000 at concurrency 10 are
  measured by `python -m bench.failover`; a smaller run here).
- Every breaker open, the one probe held by another gateway process: requests wait, within
  `capacity_wait_s`, for the backend to come back rather than failing at once (with one
  process, tests/pipeline/test_breaker.py).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.gateway.databases import redis_namespace
from tests.gateway.test_resilience import (
    DIALECTS,
    MODEL,
    PATHS,
    Cluster,
    backend,
    post,
    request_body,
    start_cluster,
    vllm_sim,
    wait_for,
)
from tests.gateway.test_shared_breaker import Replica


def send_all(
    url: str, key: str, bodies: list[tuple[str, dict[str, Any]]], concurrency: int
) -> list[int]:
    """POST every (path, body) `concurrency` at a time; the statuses (a stream that ended in an
    in-band error counts as 0)."""

    async def run() -> list[int]:
        statuses: list[int] = []
        todo = iter(bodies)

        async def worker(client: httpx.AsyncClient) -> None:
            for path, body in todo:
                r = await client.post(path, json=body, headers={"Authorization": f"Bearer {key}"})
                broken = body.get("stream") and '"error"' in r.text
                statuses.append(0 if broken else r.status_code)

        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            await asyncio.gather(*(worker(client) for _ in range(concurrency)))
        return statuses

    return asyncio.run(run())


def test_two_of_three_backends_failing_half_their_requests(
    cluster_factory: Callable[..., Cluster],
) -> None:
    c = cluster_factory(
        [
            backend("flaky-1", vllm_sim(fail_rate=0.5, seed=1, slots=8), priority=3),
            backend("flaky-2", vllm_sim(fail_rate=0.5, seed=2, slots=8), priority=3),
            backend("steady", vllm_sim(slots=8)),
        ],
        # Short cooldowns: the flaky backends' breakers open and half-open throughout the run.
        breaker_cooldown_s=0.1,
        log_level="ERROR",
    )
    bodies = [
        (PATHS[d], request_body(d, stream))
        for _ in range(20)
        for d in DIALECTS
        for stream in (False, True)
    ]
    statuses = send_all(c.url, c.key, bodies, concurrency=10)
    assert statuses.count(200) >= 0.99 * len(bodies), sorted(statuses)
    failed = sum(
        1 for name in ("flaky-1", "flaky-2") for r in c.states[name].records if r.status == 500
    )
    assert failed > 10  # the flaky backends were met, and failed often
    assert c.backends()["flaky-1"]["breaker"]["opened_total"] > 0


def concurrently(calls: list[Callable[[], int]]) -> list[int]:
    results: list[int] = [0] * len(calls)

    def run(i: int) -> None:
        results[i] = calls[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


@pytest.fixture
def pair() -> Iterator[tuple[Cluster, Replica]]:
    """Two gateways sharing Redis (and so their breakers) in front of one failing engine."""
    with redis_namespace() as redis:
        shared = {
            "redis_url": redis.url,
            "redis_prefix": redis.prefix,
            "breaker_threshold": 1,
            # Longer than an idle gateway's breaker exchange (every 0.5 s), so the second one
            # sees the breaker open before it half-opens.
            "breaker_cooldown_s": 2.0,
            "capacity_wait_s": 20,
        }
        # A slow probe: the other gateway's requests arrive while it runs.
        first = start_cluster([backend("only", vllm_sim(fail_rate=1.0, ttft_ms=300))], **shared)
        try:
            raw = {
                "secret_key": "test-secret",
                "log_level": "WARNING",
                "groups": [{"name": "testers"}],
                "users": [{"name": "tester", "group": "testers"}],
                "backends": [
                    {
                        "name": "only",
                        "engine": "vllm",
                        "url": first.sims["only"].url,
                        "models": [MODEL],
                    }
                ],
                "models": [{"name": MODEL, "context_length": 8192}],
                **shared,
            }
            second = Replica(first, raw)
            try:
                yield first, second
            finally:
                second.server.stop()
        finally:
            first.close()


def test_requests_wait_for_a_probe_held_by_another_gateway(
    pair: tuple[Cluster, Replica],
) -> None:
    first, second = pair
    assert post(first, "openai").status_code == 502
    wait_for(lambda: second.breaker("only")["state"] == "open", "the breaker to open in both")
    first.control("only", fail_rate=0.0)
    wait_for(lambda: second.breaker("only")["state"] == "half_open", "half-open")
    auth = {"Authorization": f"Bearer {second.key}"}

    def via(url: str, headers: dict[str, str]) -> Callable[[], int]:
        body = request_body("openai", False)
        return lambda: (
            httpx.post(url + PATHS["openai"], json=body, headers=headers, timeout=30).status_code
        )

    calls = [via(first.url, first.auth), via(second.url, auth)] * 4
    assert concurrently(calls) == [200] * len(calls)
    assert first.seen("only") == 1 + len(calls)  # one probe, then the rest
