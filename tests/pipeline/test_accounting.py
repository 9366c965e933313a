"""What a request is charged and what its audit record says, in process.

- the usage charged is what the engine reported (not the gateway's count of the chunks);
- every request has exactly one record, with its final status: `ok`, `error` when no backend
  could serve it or its stream broke off (the tokens relayed before the cut charged), and
  `cancelled` when the client left (see test_cancellation.py)."""

from __future__ import annotations

import json

import pytest

from mindrouter.errors import UpstreamRejected
from tests.pipeline.conftest import Factory
from tests.pipeline.fakes import server_error
from tests.pipeline.harness import DIALECTS, PATHS, backend, error_message, variant


async def test_the_charge_is_the_usage_the_engine_reported(gateway_factory: Factory) -> None:
    g = await gateway_factory([backend("one")])
    engine = g.engines["one"]
    engine.input_tokens, engine.reported_output = 13, 7  # it streams 4 chunks
    before = await g.period_tokens()
    for i in range(6):
        status, body = await g.post(*variant(i))
        assert status == 200, body
    assert await g.period_tokens() - before == 6 * (13 + 7)
    rows = await g.audit(6)
    for i, row in enumerate(rows):
        dialect, stream = variant(i)
        assert (row["status"], row["backend"], row["attempts"]) == ("ok", "one", 1)
        assert (row["input_tokens"], row["output_tokens"]) == (13, 7)
        assert row["output"] == "w0 w1 w2 w3 "
        assert (row["endpoint"], row["stream"]) == (PATHS[dialect], stream)
        assert row["user_name"] == "tester" and row["key_prefix"] == g.key[:12]


async def test_every_request_has_one_record_with_its_final_status(
    gateway_factory: Factory,
) -> None:
    g = await gateway_factory([backend("one")], breaker_threshold=1000)
    engine = g.engines["one"]
    assert (await g.post("openai"))[0] == 200
    engine.fail_next(server_error("one"))
    assert (await g.post("anthropic", stream=True))[0] == 502
    assert (await g.breaker("one"))["consecutive_failures"] == 1
    engine.fail_next(UpstreamRejected("one: bad sampling parameters", 400, "one"))
    status, body = await g.post("ollama")
    assert status == 400 and error_message("ollama", body) == "one: bad sampling parameters"
    # The backend answered the rejected one: that is a success for its breaker.
    assert (await g.breaker("one"))["consecutive_failures"] == 0
    assert (await g.post("openai", stream=True))[0] == 200
    rows = await g.audit(4)
    assert [(r["status"], r["attempts"]) for r in rows] == [
        ("ok", 1),
        ("error", 1),
        ("error", 1),
        ("ok", 1),
    ]
    assert rows[1]["error_message"] == "one: HTTP 500: simulated failure"
    assert rows[1]["output_tokens"] is None  # nothing generated, nothing charged
    assert rows[2]["error_message"] == "one: bad sampling parameters"
    # Exactly one record per request: nothing older, nothing twice.
    everything = await g.get("/admin/audit?limit=100")
    assert len(everything) == 4
    assert len({r["request_id"] for r in everything}) == 4


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_stream_cut_after_its_first_bytes_is_an_error_charged_what_was_sent(
    gateway_factory: Factory, dialect: str
) -> None:
    # Two dropping backends: once bytes reached the client, failover is no longer possible.
    g = await gateway_factory(
        [backend("cut", priority=3), backend("cut-too")], breaker_threshold=1000
    )
    for name in ("cut", "cut-too"):
        g.engines[name].tokens, g.engines[name].drop_after = 12, 3
    before = await g.period_tokens()
    r = await g.send(dialect, stream=True)
    assert r.status == 200
    lines = [line async for line in r.lines() if line]
    if dialect == "openai":
        assert lines[-1] == "data: [DONE]"
        assert set(json.loads(lines[-2][6:])) == {"error"}
    elif dialect == "anthropic":
        assert lines[-2] == "event: error"
    else:
        assert list(json.loads(lines[-1])) == ["error"]
    (row,) = await g.audit(1)
    assert (row["status"], row["backend"], row["attempts"]) == ("error", "cut", 1)
    assert "dropped" in row["error_message"]
    assert row["output_tokens"] == 3 and row["output"] == "w0 w1 w2 "
    assert await g.period_tokens() - before == row["input_tokens"] + 3
    assert g.seen("cut-too") == 0


# What each dialect's stream ends with: the piece a client reads as "the answer is over".
ENDINGS = {"openai": b"[DONE]", "anthropic": b"message_stop", "ollama": b'"done":true'}


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_stream_gives_its_concurrency_back_before_its_ending_is_sent(
    gateway_factory: Factory, dialect: str
) -> None:
    # One request at a time: a client sending its next request as soon as it reads the ending
    # (as agents do) must find the first one over, its tokens charged.
    g = await gateway_factory([backend("one")], groups=[{"name": "testers", "max_concurrent": 1}])
    first = g.begin(dialect, stream=True)
    first.hold_at(ENDINGS[dialect])
    assert (await first.start()).status == 200
    await first.held.wait()  # the app is sending the ending, and has not sent it yet
    status, body = await g.post(dialect)
    assert status == 200, body
    first.resume()
    assert ENDINGS[dialect] in await first.read()
    rows = await g.audit(2)
    assert [r["status"] for r in rows] == ["ok", "ok"]
