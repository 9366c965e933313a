"""The circuit breaker, in process, on the gateway's injected clock: a cooldown passes when the
test moves the clock, not by waiting for it.

- it opens after `breaker_threshold` failures, lets exactly one probe through after the
  cooldown, re-opens when the probe fails and closes when it succeeds;
- a probe that ends in the client's error gives the probe back;
- with every breaker open, requests wait (within `capacity_wait_s`) for a backend to come back,
  and with no wait left they are refused as overloaded."""

from __future__ import annotations

import asyncio
import json

from tests.pipeline.conftest import Factory
from tests.pipeline.fakes import server_error
from tests.pipeline.harness import DIALECTS, MODEL, InProcess, backend, error_message, until

COOLDOWN = 30.0


async def served(g: InProcess, n: int = 1) -> None:
    for _ in range(n):
        status, body = await g.post("openai", max_tokens=4)
        assert status == 200, body
        assert json.loads(body)["choices"][0]["message"]["content"]


async def test_breaker_opens_after_three_failures_and_probes_once(gateway_factory: Factory) -> None:
    g = await gateway_factory(
        [backend("bad", priority=3), backend("good")],
        breaker_threshold=3,
        breaker_cooldown_s=COOLDOWN,
    )
    bad = g.engines["bad"]
    bad.failing = lambda: server_error("bad")
    for expected in (1, 2, 3):
        await served(g)
        assert g.seen("bad") == expected
    state = await g.breaker("bad")
    assert (state["state"], state["consecutive_failures"], state["opened_total"]) == (
        "open",
        3,
        1,
    )
    assert 0 < state["reopens_in_s"] <= COOLDOWN
    # Open: the bad backend gets nothing, the requests go straight to the good one.
    await served(g, 5)
    assert g.seen("bad") == 3
    assert (await g.breaker("bad"))["opened_total"] == 1  # still the first opening

    # After the cooldown, one request probes; it fails, so the breaker opens again.
    g.clock.advance(COOLDOWN)
    assert (await g.breaker("bad"))["state"] == "half_open"
    await served(g)
    assert g.seen("bad") == 4
    state = await g.breaker("bad")
    assert (state["state"], state["opened_total"]) == ("open", 2)
    await served(g, 3)
    assert g.seen("bad") == 4

    # Fixed, and held at its first token so the probe is still running when the others
    # arrive: of four concurrent requests exactly one reaches it, and its success closes it.
    bad.failing = None
    bad.hold_at = 0
    g.clock.advance(COOLDOWN)
    assert (await g.breaker("bad"))["state"] == "half_open"
    good_before = g.seen("good")
    requests = [asyncio.create_task(served(g)) for _ in range(4)]
    await bad.reached(5)
    await g.engines["good"].reached(good_before + 3, tokens=4)
    bad.release()
    await asyncio.gather(*requests)
    assert g.seen("bad") == 5
    state = await g.breaker("bad")
    assert (state["state"], state["consecutive_failures"]) == ("closed", 0)
    # Closed again, and preferred again.
    await served(g)
    assert g.seen("bad") == 6
    rows = await g.audit(17)
    assert all(r["status"] == "ok" for r in rows)


async def test_a_probe_that_ends_in_a_client_error_does_not_wedge_the_breaker(
    gateway_factory: Factory,
) -> None:
    g = await gateway_factory(
        [backend("bad", priority=3), backend("good")],
        models=[{"name": MODEL, "context_length": 2048}],
        breaker_threshold=3,
        breaker_cooldown_s=COOLDOWN,
    )
    g.engines["bad"].failing = lambda: server_error("bad")
    await served(g, 3)
    assert (await g.breaker("bad"))["state"] == "open"
    g.clock.advance(COOLDOWN)
    assert (await g.breaker("bad"))["state"] == "half_open"
    # The probe is claimed, then the request turns out too long for the model.
    status, body = await g.post(
        "openai", messages=[{"role": "user", "content": "word " * 3000}], max_tokens=4
    )
    assert status == 400, body
    g.engines["bad"].failing = None
    # Either the probe slot was given back at once, or it comes back within a cooldown.
    if (await g.breaker("bad"))["state"] != "half_open":
        g.clock.advance(COOLDOWN)
    assert (await g.breaker("bad"))["state"] == "half_open"
    await served(g)
    assert g.seen("bad") == 4


async def test_with_every_breaker_open_requests_wait_for_a_backend_to_recover(
    gateway_factory: Factory,
) -> None:
    g = await gateway_factory(
        [backend("a", priority=3), backend("b")],
        breaker_threshold=1,
        breaker_cooldown_s=COOLDOWN,
        capacity_wait_s=600,
    )
    g.engines["a"].failing = lambda: server_error("a")
    g.engines["b"].failing = lambda: server_error("b")
    status, _ = await g.post("openai")
    assert status == 502
    assert (await g.breaker("a"))["state"] == (await g.breaker("b"))["state"] == "open"
    # `b` recovers; `a` does not. Requests sent now wait for the breakers instead of failing.
    g.engines["b"].failing = None
    calls = [asyncio.create_task(g.post(d, s)) for d in DIALECTS for s in (False, True)]
    await until(lambda: g.gate.waiting == len(calls), "every request to wait")
    assert g.seen("b") == 1
    g.clock.advance(COOLDOWN)
    results = await asyncio.gather(*calls)
    assert [status for status, _ in results] == [200] * len(calls)
    rows = await g.audit(len(calls))
    assert all(r["status"] == "ok" and r["backend"] == "b" for r in rows)
    assert all(r["total_ms"] > 0 for r in rows)


async def test_an_open_breaker_on_every_backend_is_overloaded(gateway_factory: Factory) -> None:
    g = await gateway_factory(
        [backend("only")],
        breaker_threshold=3,
        breaker_cooldown_s=COOLDOWN,
        capacity_wait_s=0,
    )
    g.engines["only"].failing = lambda: server_error("only")
    for _ in range(3):
        assert (await g.post("openai"))[0] == 502
    assert (await g.breaker("only"))["state"] == "open"
    expected = {"openai": 503, "anthropic": 529, "ollama": 503}
    for dialect in DIALECTS:
        status, body = await g.post(dialect)
        assert status == expected[dialect], body
        error_message(dialect, body)
    assert g.seen("only") == 3
