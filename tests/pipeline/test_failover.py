"""Failed attempts, in process: retried on another backend, failed over, and the statuses when
no backend can serve. The backend meant to fail gets `priority: 3`, so the router tries it first
whenever it is usable; the fake engines' calls and the audit trail show what the gateway did.

What the engine adapters make of refused connections and error statuses is tested against real
HTTP in tests/backends; here the fake engines raise what the adapters raise."""

from __future__ import annotations

import json

import pytest

from mindrouter.errors import UpstreamError
from tests.pipeline.conftest import Factory
from tests.pipeline.fakes import refused, server_error
from tests.pipeline.harness import DIALECTS, backend, error_message, variant


async def test_a_failed_attempt_is_retried_on_another_backend(gateway_factory: Factory) -> None:
    # A breaker that never opens keeps the flaky backend first in line for every request, so
    # each one of its failures is retried on the other backend.
    g = await gateway_factory(
        [backend("flaky", priority=3), backend("steady")], breaker_threshold=1000
    )
    flaky = g.engines["flaky"]
    script: list[UpstreamError | None] = [
        server_error("flaky") if i % 3 else None for i in range(24)
    ]
    flaky.fail_next(*script)
    for i in range(24):
        status, body = await g.post(*variant(i))
        assert status == 200, body
    failed = sum(1 for c in flaky.calls if c.outcome == "failed")
    assert g.seen("flaky") == 24
    assert failed == 16
    assert g.seen("steady") == failed
    rows = await g.audit(24)
    assert all(r["status"] == "ok" for r in rows)
    assert sum(r["attempts"] for r in rows) == 24 + failed
    assert all((r["attempts"] == 2) == (r["backend"] == "steady") for r in rows)
    assert (await g.breaker("flaky"))["state"] == "closed"


async def test_a_backend_that_stops_answering_fails_over(gateway_factory: Factory) -> None:
    # No health round notices: the requests find out first.
    g = await gateway_factory([backend("down", priority=3), backend("up")])
    g.engines["down"].failing = lambda: refused("down")
    assert (await g.backends())["down"]["status"] == "HEALTHY"
    for i in range(12):
        status, body = await g.post(*variant(i))
        assert status == 200, body
    rows = await g.audit(12)
    assert all(r["status"] == "ok" and r["backend"] == "up" for r in rows)
    # Three refused connections (the breaker threshold), then the breaker keeps it out.
    assert [r["attempts"] for r in rows] == [2, 2, 2] + [1] * 9
    assert g.seen("up") == 12
    assert g.seen("down") == 3
    down = (await g.backends())["down"]
    assert down["breaker"]["state"] == "open"
    assert "cannot connect" in down["last_error"]


@pytest.mark.parametrize("status", [500, 503, 429])
async def test_every_backend_failing_is_a_bad_gateway(
    gateway_factory: Factory, status: int
) -> None:
    g = await gateway_factory([backend("a"), backend("b")], breaker_threshold=1000)
    for name in ("a", "b"):
        g.engines[name].failing = lambda name=name: server_error(name, status)
    for dialect in DIALECTS:
        for stream in (False, True):
            code, body = await g.post(dialect, stream)
            assert code == 502, (dialect, stream, body)
            error_message(dialect, body)
            if dialect == "openai":
                assert json.loads(body)["error"]["type"] == "server_error"
            elif dialect == "anthropic":
                assert json.loads(body)["error"]["type"] == "api_error"
    # Retried on the other backend every time: two attempts per request.
    assert [row["attempts"] for row in await g.audit(6)] == [2] * 6
    assert g.seen("a") == g.seen("b") == 6


async def test_every_backend_refusing_connections_is_a_bad_gateway(
    gateway_factory: Factory,
) -> None:
    g = await gateway_factory([backend("a"), backend("b")], breaker_threshold=1000)
    for name in ("a", "b"):
        g.engines[name].failing = lambda name=name: refused(name)
    for dialect in DIALECTS:
        for stream in (False, True):
            code, body = await g.post(dialect, stream)
            assert code == 502, (dialect, stream, body)
            assert "cannot connect" in error_message(dialect, body)
    assert [row["attempts"] for row in await g.audit(6)] == [2] * 6
