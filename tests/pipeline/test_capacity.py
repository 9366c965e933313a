"""The capacity wait, in process: with every backend slot taken, a request waits in the fair
gate and is served when a slot frees; with no wait left (`capacity_wait_s`) it is refused as
overloaded, with the status of each dialect (docs/failures.md)."""

from __future__ import annotations

import asyncio
import json

from tests.pipeline.asgi import begin
from tests.pipeline.conftest import Factory
from tests.pipeline.harness import DIALECTS, backend, error_message, until


async def test_a_request_waits_for_a_slot_and_is_served_when_it_frees(
    gateway_factory: Factory,
) -> None:
    g = await gateway_factory([backend("one", max_concurrent=1)], capacity_wait_s=600)
    engine = g.engines["one"]
    engine.hold_at = 1
    held = await g.send("openai", stream=True)  # the only slot, while this stream is open
    assert held.status == 200
    await engine.reached(1, tokens=1)
    waiting = [asyncio.create_task(g.post(d)) for d in DIALECTS]
    await until(lambda: g.gate.waiting == 3, "the requests to queue")
    assert g.seen("one") == 1 and not any(w.done() for w in waiting)
    engine.release()  # the stream ends, its slot goes to the first waiter, then the next
    assert b"[DONE]" in await held.read()
    for status, body in await asyncio.gather(*waiting):
        assert status == 200, body
    assert g.seen("one") == 4
    # One after the other: each engine call began once the one before had finished.
    assert [(c.outcome, c.alongside) for c in engine.calls] == [("done", 0)] * 4
    rows = await g.audit(4)
    assert all(r["status"] == "ok" and r["backend"] == "one" for r in rows)
    assert all(r["queued_ms"] > 0 for r in rows[1:])
    assert g.gate.waiting == 0


async def test_no_capacity_within_the_wait_is_overloaded(gateway_factory: Factory) -> None:
    g = await gateway_factory([backend("one", max_concurrent=1)], capacity_wait_s=0)
    engine = g.engines["one"]
    engine.hold_at = 1
    held = await g.send("openai", stream=True, max_tokens=200)
    assert held.status == 200
    await engine.reached(1, tokens=1)
    expected = {"openai": 503, "anthropic": 529, "ollama": 503}
    for dialect in DIALECTS:
        for stream in (False, True):
            status, body = await g.post(dialect, stream)
            assert status == expected[dialect], (dialect, body)
            assert "no backend had room" in error_message(dialect, body)
            if dialect == "openai":
                assert json.loads(body)["error"]["code"] == "overloaded"
            elif dialect == "anthropic":
                assert json.loads(body)["error"]["type"] == "overloaded_error"
    assert g.seen("one") == 1
    engine.release()
    await held.read()
    rows = await g.audit(7)
    assert [r["status"] for r in rows] == ["ok"] + ["error"] * 6


async def test_a_request_waiting_for_a_backend_that_is_disabled_is_not_found(
    gateway_factory: Factory,
) -> None:
    """Disabling a model's last backend refuses the requests waiting for it, as it refuses the
    ones sent after; they do not wait out their capacity wait for a slot that cannot come."""
    g = await gateway_factory([backend("one", max_concurrent=1)], capacity_wait_s=600)
    engine = g.engines["one"]
    engine.hold_at = 1
    held = await g.send("openai", stream=True)
    await engine.reached(1, tokens=1)
    waiting = [asyncio.create_task(g.post(d)) for d in DIALECTS]
    await until(lambda: g.gate.waiting == 3, "the requests to queue")
    r = await begin(
        g.app, "PATCH", "/admin/backends/one", json_body={"enabled": False}, headers=g.auth
    ).start()
    assert r.status == 200, await r.read()
    done, _ = await asyncio.wait(waiting, timeout=10)
    assert len(done) == 3, "the waiting requests were not refused"
    for dialect, (status, body) in zip(DIALECTS, await asyncio.gather(*waiting), strict=True):
        assert status == 404, (dialect, body)
        expected = "not found" if dialect == "ollama" else "does not exist or is not served here"
        assert expected in error_message(dialect, body), (dialect, body)
    assert g.seen("one") == 1 and g.gate.waiting == 0
    engine.release()
    assert b"[DONE]" in await held.read()  # a stream under way when it was disabled finishes
    rows = await g.audit(4)
    assert [r["status"] for r in rows] == ["ok", "error", "error", "error"], rows
    assert all("does not exist" in r["error_message"] for r in rows[1:]), rows
