"""A client that hangs up cancels its request, streamed or not, in process: the engine's stream
is closed before it finished, the audit record ends `cancelled`, the caller is charged the
tokens generated until then, and the backend slot is free at once.

The hang-up is the `http.disconnect` a server sends when the connection closes; that uvicorn
sends it when a real socket closes is tested over sockets (tests/gateway/test_disconnect.py,
and test_audit_through_gateway.py on every database)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.pipeline.conftest import Factory
from tests.pipeline.harness import DIALECTS, InProcess, backend

TOKENS = 40  # held before the fourth: the client leaves after three


async def slow(gateway_factory: Factory) -> InProcess:
    g = await gateway_factory([backend("one", max_concurrent=1)])
    g.engines["one"].tokens, g.engines["one"].hold_at = TOKENS, 3
    return g


def long_answer(dialect: str) -> dict[str, Any]:
    if dialect == "ollama":
        return {"options": {"num_predict": TOKENS}}
    return {"max_tokens": TOKENS}


async def check_cancelled(g: InProcess, before_tokens: int) -> dict[str, Any]:
    call = g.engines["one"].calls[-1]
    assert call.outcome == "cancelled"
    assert 3 <= call.sent < TOKENS  # the engine stopped before it would have finished
    (row,) = await g.audit(1)
    assert (row["status"], row["backend"]) == ("cancelled", "one")
    assert row["error_message"] is None
    assert 0 < row["output_tokens"] < TOKENS and row["output"]
    assert abs(row["output_tokens"] - call.sent) <= 1
    charged = await g.period_tokens() - before_tokens
    assert charged == row["input_tokens"] + row["output_tokens"]
    # The only slot was given back: the next request is served at once.
    assert (await g.backends())["one"]["in_flight"] == 0
    g.engines["one"].release()
    status, body = await g.post("openai")
    assert status == 200, body
    return row


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_client_leaving_a_non_streamed_request_cancels_it(
    gateway_factory: Factory, dialect: str
) -> None:
    g = await slow(gateway_factory)
    before = await g.period_tokens()
    r = g.begin(dialect, stream=False, **long_answer(dialect))
    await g.engines["one"].reached(1, tokens=3)
    await r.leave()
    row = await check_cancelled(g, before)
    assert row["stream"] is False


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_client_leaving_mid_stream_cancels_it(
    gateway_factory: Factory, dialect: str
) -> None:
    g = await slow(gateway_factory)
    before = await g.period_tokens()
    r = await g.send(dialect, stream=True, **long_answer(dialect))
    assert r.status == 200
    await g.engines["one"].reached(1, tokens=3)
    await r.leave()
    row = await check_cancelled(g, before)
    assert row["stream"] is True
    assert row["output"].startswith("w0 w1 w2 ")
