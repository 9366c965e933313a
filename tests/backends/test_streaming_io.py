"""Streams are read as they arrive, and closing one early hangs up on the engine at once."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from mindrouter.canonical import ChatRequest, Done, TextDelta, text_message

from .fake_engine import FakeEngine, Recorded, Reply, ndjson, sse

Make = Callable[..., Any]
# Guards against a hang if the adapter buffered the body; not a speed requirement.
DEADLOCK_GUARD = 5.0


def chat() -> ChatRequest:
    return ChatRequest(model="m", messages=[text_message("user", "Hi")])


def openai_chunk(text: str, finish: str | None = None) -> bytes:
    return sse({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]})


def ollama_line(text: str, done: bool = False) -> bytes:
    line: dict[str, Any] = {"message": {"role": "assistant", "content": text}, "done": done}
    if done:
        line.update(done_reason="stop", prompt_eval_count=1, eval_count=1)
    return ndjson(line)


STREAMS: dict[str, tuple[str, Callable[..., bytes], str]] = {
    "vllm": ("/v1/chat/completions", openai_chunk, "text/event-stream"),
    "llamacpp": ("/v1/chat/completions", openai_chunk, "text/event-stream"),
    "openai": ("/v1/chat/completions", openai_chunk, "text/event-stream"),
    "ollama": ("/api/chat", ollama_line, "application/x-ndjson"),
}


@pytest.mark.parametrize("kind", sorted(STREAMS))
async def test_first_event_arrives_before_the_stream_ends(
    kind: str, engine: FakeEngine, make_adapter: Make
) -> None:
    path, piece, content_type = STREAMS[kind]
    gate = threading.Event()

    async def handler(req: Recorded, reply: Reply) -> None:
        await reply.start(200, content_type)
        await reply.write(piece("first"))
        # The rest is held back until the test has seen the first event.
        await asyncio.to_thread(gate.wait, DEADLOCK_GUARD)
        if kind == "ollama":
            await reply.end(piece("", True))
        else:
            await reply.end(openai_chunk("", "stop") + sse("[DONE]"))

    engine.on(path, handler)
    stream = make_adapter(kind).chat_stream(chat())
    first = await asyncio.wait_for(anext(stream), DEADLOCK_GUARD)
    assert first == TextDelta("first")
    assert not gate.is_set()
    gate.set()
    rest = [event async for event in stream]
    assert isinstance(rest[-1], Done)


@pytest.mark.parametrize("kind", sorted(STREAMS))
async def test_aclose_hangs_up_on_the_engine_quickly(
    kind: str, engine: FakeEngine, make_adapter: Make
) -> None:
    path, piece, content_type = STREAMS[kind]

    async def endless(req: Recorded, reply: Reply) -> None:
        await reply.start(200, content_type)
        while not req.gone.is_set():
            await reply.write(piece("tok "))
            await asyncio.sleep(0.005)

    engine.on(path, endless)
    stream = make_adapter(kind).chat_stream(chat())
    assert await anext(stream) == TextDelta("tok ")
    closed_at = time.monotonic()
    await stream.aclose()
    rec = engine.last
    assert await asyncio.to_thread(rec.disconnected.wait, DEADLOCK_GUARD)
    assert rec.disconnected_at is not None
    assert rec.disconnected_at - closed_at < 0.1
