"""Where a request's clean-up (its slot, audit outcome, settlement and metrics) runs: a whole
answer's in the request's own task, before its response, once its audit record is committed; a
stream's in a task of its own (a cancelled request cannot stop it), as is one whose record's
commit may still be under way."""

from __future__ import annotations

import asyncio
import contextlib
import gc

import orjson
import pytest

from mindrouter.canonical import StreamEvent, TextDelta
from mindrouter.dialects import anthropic
from mindrouter.dialects.openai.stream import ChatStreamEncoder
from mindrouter.errors import UpstreamUnavailable
from mindrouter.pipeline import flight
from mindrouter.stores.audit_records import AuditStart
from tests.pipeline.conftest import Factory
from tests.pipeline.harness import InProcess, backend, until


class Recording(set[asyncio.Task[None]]):
    """`flight._CLOSING`, noting every clean-up task put in it."""

    def __init__(self) -> None:
        super().__init__()
        self.added: list[asyncio.Task[None]] = []

    def add(self, task: asyncio.Task[None]) -> None:
        self.added.append(task)
        super().add(task)


@pytest.fixture
async def watched(
    gateway_factory: Factory, monkeypatch: pytest.MonkeyPatch
) -> tuple[InProcess, Recording]:
    """A gateway with one backend, and the clean-up tasks its requests start."""
    closing = Recording()
    monkeypatch.setattr(flight, "_CLOSING", closing)
    return await gateway_factory([backend("one")]), closing


async def test_a_whole_answer_is_cleaned_up_in_its_own_task_and_a_stream_in_another(
    watched: tuple[InProcess, Recording],
) -> None:
    g, closing = watched

    for dialect in ("openai", "anthropic", "ollama"):
        status, _ = await g.post(dialect)
        assert status == 200
    assert closing.added == []

    r = await g.send("openai", stream=True)
    assert r.status == 200
    await r.read()
    assert len(closing.added) == 1

    rows = await g.audit(4)
    assert [(row["status"], row["stream"]) for row in rows] == [
        ("ok", False),
        ("ok", False),
        ("ok", False),
        ("ok", True),
    ]
    assert all(row["output_tokens"] > 0 for row in rows)
    assert (await g.backends())["one"]["in_flight"] == 0


async def test_a_whole_answer_left_before_its_record_is_committed_is_cleaned_up_in_a_task(
    watched: tuple[InProcess, Recording], monkeypatch: pytest.MonkeyPatch
) -> None:
    g, closing = watched
    # The record's commit is held back until the client has left.
    audit = g.stores.audit
    commit = audit.begin
    held: list[tuple[asyncio.Future[None], asyncio.Future[None]]] = []

    def begin(record: AuditStart) -> asyncio.Future[None]:
        pair = (commit(record), asyncio.get_running_loop().create_future())
        held.append(pair)
        return pair[1]

    monkeypatch.setattr(audit, "begin", begin)
    exchange = g.begin("openai")
    await until(lambda: bool(held), "the record's commit started")
    # The request ends while its record's commit is under way: its clean-up waits for the
    # commit in a task of its own (and the request for the clean-up).
    leaving = asyncio.ensure_future(exchange.leave())
    await until(lambda: bool(closing.added), "the clean-up's task started")
    await asyncio.sleep(0.01)
    assert not closing.added[0].done() and not leaving.done()
    committed, seen = held[0]
    await committed
    seen.set_result(None)
    await leaving
    assert len(closing.added) == 1
    (row,) = await g.audit(1)
    assert (row["status"], row["output_tokens"]) == ("cancelled", None)
    assert g.seen("one") == 0
    assert (await g.backends())["one"]["in_flight"] == 0


@pytest.mark.parametrize("stream", [False, True])
async def test_a_step_of_the_clean_up_that_fails_leaves_the_others_done(
    watched: tuple[InProcess, Recording],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    stream: bool,
) -> None:
    # Whatever fails in the gateway, the request keeps its audit record and its charge: the
    # fair gate's bookkeeping (first step) and the metrics (last) failing change neither.
    g, _ = watched

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(g.gate, "finish", broken)
    monkeypatch.setattr(flight, "record_outcome", broken)
    status, _ = await g.post("openai", stream=stream)
    assert status == 200
    (row,) = await g.audit(1)
    assert row["status"] == "ok" and row["output_tokens"] > 0
    assert await g.period_tokens() == row["input_tokens"] + row["output_tokens"]
    assert (await g.get("/v1/usage"))["in_flight"] == 0
    assert (await g.backends())["one"]["in_flight"] == 0
    logged = capsys.readouterr()
    for step in ("the fair gate", "the metrics and log line"):
        assert step in logged.out + logged.err


async def test_a_failing_fair_queue_charge_still_gives_the_backend_slot_back(
    gateway_factory: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The one slot of the backend must come back, or every later request waits for ever.
    g = await gateway_factory([backend("one", max_concurrent=1)])
    monkeypatch.setattr(flight, "CHARGE_TOKENS", 10**9)  # charged only when the slot is given back
    monkeypatch.setattr(flight, "CHARGE_SECONDS", 10**9)

    def broken(*args: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(g.gate.queue, "charge", broken)
    status, _ = await g.post("openai", stream=True)
    assert status == 200
    (row,) = await g.audit(1)
    assert row["status"] == "ok" and row["output_tokens"] > 0
    assert (await g.backends())["one"]["in_flight"] == 0
    monkeypatch.undo()
    status, _ = await asyncio.wait_for(g.post("openai"), 10)
    assert status == 200


async def test_a_stream_whose_response_fails_at_its_start_is_closed_at_once(
    watched: tuple[InProcess, Recording], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The relay, opened and waiting at its first event, is closed by the response that failed,
    # not left to the garbage collector: its record, slot and limits are dealt with at once.
    g, _ = watched

    def broken(self: object) -> bytes:
        raise RuntimeError("a bug")

    monkeypatch.setattr(ChatStreamEncoder, "start", broken)
    gc.disable()
    try:
        status, body = await g.post("openai", stream=True)
        assert status == 500
        assert orjson.loads(body)["error"]["type"] == "server_error"
        (row,) = await g.audit(1)
        assert row["status"] == "error"
        assert "the stream failed inside the gateway: a bug" in row["error_message"]
        # The engine had answered: its first event is charged, with the prompt.
        assert row["input_tokens"] > 0 and row["output_tokens"] > 0
        assert await g.period_tokens() == row["input_tokens"] + row["output_tokens"]
        assert (await g.backends())["one"]["in_flight"] == 0
        assert (await g.get("/v1/usage"))["in_flight"] == 0
    finally:
        gc.enable()


async def test_an_encoder_failing_in_mid_stream_is_recorded_as_an_error(
    watched: tuple[InProcess, Recording], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The gateway's own failure after the response has started: the client's stream breaks off,
    # and the record says the gateway failed (not that the client left), with what the engine
    # had produced charged.
    g, _ = watched
    encode = ChatStreamEncoder.encode

    def broken(self: ChatStreamEncoder, event: StreamEvent) -> bytes:
        if isinstance(event, TextDelta):
            raise RuntimeError("a bug")
        return encode(self, event)

    monkeypatch.setattr(ChatStreamEncoder, "encode", broken)
    with contextlib.suppress(Exception):  # the body breaks off
        r = await g.send("openai", stream=True)
        await r.read()
    (row,) = await g.audit(1)
    assert row["status"] == "error"
    assert "the stream failed inside the gateway: a bug" in row["error_message"]
    assert row["output_tokens"] > 0
    assert await g.period_tokens() == row["input_tokens"] + row["output_tokens"]
    assert (await g.get("/v1/usage"))["in_flight"] == 0
    assert (await g.backends())["one"]["in_flight"] == 0


async def test_an_anthropic_stream_encoder_failing_at_its_start_is_recorded_as_an_error(
    watched: tuple[InProcess, Recording], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Anthropic's encoder asks for the flight's input estimate when the stream starts.
    g, _ = watched

    def broken(self: object) -> bytes:
        raise RuntimeError("a bug")

    monkeypatch.setattr(anthropic.MessagesStreamEncoder, "start", broken)
    status, body = await g.post("anthropic", stream=True)
    assert status == 500
    assert orjson.loads(body)["error"]["type"] == "api_error"
    (row,) = await g.audit(1)
    assert row["status"] == "error"
    assert "the stream failed inside the gateway: a bug" in row["error_message"]
    assert (await g.backends())["one"]["in_flight"] == 0


async def test_a_gateway_error_raised_by_an_encoder_is_not_the_backends(
    watched: tuple[InProcess, Recording], monkeypatch: pytest.MonkeyPatch
) -> None:
    # An encoder bug that happens to raise one of the gateway's error classes (an upstream
    # one, here) is still the gateway's failure: recorded as such, not counted against the
    # backend's breaker.
    g, _ = watched

    def broken(self: object) -> bytes:
        raise UpstreamUnavailable("a bug that looks like the engine's", "one")

    monkeypatch.setattr(ChatStreamEncoder, "start", broken)
    for _ in range(3):  # the breaker's threshold
        status, _body = await g.post("openai", stream=True)
        assert status == 500
    rows = await g.audit(3)
    assert {row["status"] for row in rows} == {"error"}
    assert all("the stream failed inside the gateway" in r["error_message"] for r in rows)
    assert (await g.breaker("one"))["consecutive_failures"] == 0
