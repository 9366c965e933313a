"""Every way an engine can fail becomes the right `mindrouter.errors` class, raised, not yielded."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mindrouter.backends import Timeouts
from mindrouter.canonical import ChatRequest, TextDelta, text_message
from mindrouter.errors import (
    ContextLengthExceeded,
    MindRouterError,
    ModelNotFound,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
)

from .fake_engine import FakeEngine, Recorded, Reply, ndjson, sse

Make = Callable[..., Any]
CHAT_PATH = {
    "vllm": "/v1/chat/completions",
    "llamacpp": "/v1/chat/completions",
    "ollama": "/api/chat",
}


def chat() -> ChatRequest:
    return ChatRequest(model="m", messages=[text_message("user", "Hi")])


async def call(adapter: Any, stream: bool) -> Any:
    if stream:
        return [event async for event in adapter.chat_stream(chat())]
    return await adapter.chat(chat())


CASES: list[tuple[str, int, Any, type[MindRouterError]]] = [
    (
        "vllm",
        404,
        {
            "error": {
                "message": "The model `m` does not exist.",
                "type": "NotFoundError",
                "code": 404,
            }
        },
        ModelNotFound,
    ),
    (
        "vllm",
        400,
        {
            "object": "error",
            "message": "This model's maximum context length is 8192 tokens. "
            "However, you requested 9000 tokens.",
            "type": "BadRequestError",
            "code": 400,
        },
        ContextLengthExceeded,
    ),
    (
        "vllm",
        400,
        {
            "error": {
                "message": "Prompt is too long for this model",
                "type": "BadRequestError",
                "code": 400,
            }
        },
        ContextLengthExceeded,
    ),
    (
        "vllm",
        400,
        {
            "error": {
                "message": "tool_choice auto needs --enable-auto-tool-choice",
                "type": "BadRequestError",
                "code": 400,
            }
        },
        UpstreamRejected,
    ),
    ("vllm", 422, {"detail": [{"msg": "field required"}]}, UpstreamRejected),
    ("vllm", 429, {"error": {"message": "slow down", "code": 429}}, UpstreamUnavailable),
    ("vllm", 500, {"error": {"message": "engine died", "code": 500}}, UpstreamUnavailable),
    ("vllm", 503, b"Service Unavailable", UpstreamUnavailable),
    ("vllm", 401, {"error": {"message": "bad key"}}, UpstreamUnavailable),
    (
        "llamacpp",
        400,
        {
            "error": {
                "code": 400,
                "message": "request (9412 tokens) exceeds the available context size "
                "(8192 tokens), try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": 9412,
                "n_ctx": 8192,
            }
        },
        ContextLengthExceeded,
    ),
    (
        "llamacpp",
        503,
        {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}},
        UpstreamUnavailable,
    ),
    ("ollama", 404, {"error": 'model "m" not found, try pulling it first'}, ModelNotFound),
    ("ollama", 400, {"error": '"m" does not support thinking'}, UpstreamRejected),
    ("ollama", 500, {"error": "llama runner process has terminated"}, UpstreamUnavailable),
    ("ollama", 502, {"error": "cloud model unreachable"}, UpstreamUnavailable),
]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize(("kind", "status", "body", "error"), CASES)
async def test_status_and_body_map_to_errors(
    kind: str,
    status: int,
    body: Any,
    error: type[MindRouterError],
    stream: bool,
    engine: FakeEngine,
    make_adapter: Make,
) -> None:
    if isinstance(body, bytes):
        engine.raw(CHAT_PATH[kind], body, status)
    else:
        engine.json(CHAT_PATH[kind], body, status)
    with pytest.raises(error) as caught:
        await call(make_adapter(kind), stream)
    exc = caught.value
    assert type(exc) is error
    if isinstance(exc, UpstreamUnavailable | UpstreamRejected):
        assert exc.status == status
    if isinstance(exc, UpstreamRejected):
        assert exc.message  # the engine's own words go back to the client
    if kind == "llamacpp" and isinstance(exc, ContextLengthExceeded):
        assert (exc.input_tokens, exc.context_length) == (9412, 8192)


async def test_unknown_route_is_a_rejection_not_a_missing_model(
    engine: FakeEngine, make_adapter: Make
) -> None:
    with pytest.raises(UpstreamRejected) as caught:
        await make_adapter("vllm").chat(chat())
    assert caught.value.status == 404


async def test_error_payload_mid_sse_stream(engine: FakeEngine, make_adapter: Make) -> None:
    first = {"choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": None}]}
    error = {"error": {"message": "CUDA out of memory", "type": "InternalServerError", "code": 500}}
    engine.stream("/v1/chat/completions", [sse(first), sse(error, "[DONE]")])
    stream = make_adapter("vllm").chat_stream(chat())
    assert await anext(stream) == TextDelta("a")
    with pytest.raises(UpstreamUnavailable, match="CUDA out of memory"):
        await anext(stream)


async def test_error_line_mid_ndjson_stream(engine: FakeEngine, make_adapter: Make) -> None:
    first = {"message": {"role": "assistant", "content": "a"}, "done": False}
    engine.stream("/api/chat", [ndjson(first), ndjson({"error": "runner crashed"})])
    with pytest.raises(UpstreamUnavailable, match="runner crashed"):
        await call(make_adapter("ollama"), stream=True)


@pytest.mark.parametrize("kind", ["vllm", "ollama"])
async def test_connection_dropped_mid_stream(
    kind: str, engine: FakeEngine, make_adapter: Make
) -> None:
    async def drop(req: Recorded, reply: Reply) -> None:
        await reply.start(200, "text/event-stream")
        await reply.write(b'data: {"choices": [{"index": 0, "delta": {"content": "a"}}]}\n\n')
        await asyncio.sleep(0.01)
        raise RuntimeError("simulated crash: the server drops the connection")

    engine.on(CHAT_PATH[kind], drop)
    with pytest.raises(UpstreamUnavailable):
        await call(make_adapter(kind), stream=True)


@pytest.mark.parametrize("kind", ["vllm", "ollama"])
async def test_stream_ending_before_the_answer_is_finished(
    kind: str, engine: FakeEngine, make_adapter: Make
) -> None:
    if kind == "ollama":
        engine.stream("/api/chat", [ndjson({"message": {"content": "a"}, "done": False})])
    else:
        engine.stream(
            CHAT_PATH[kind], [sse({"choices": [{"index": 0, "delta": {"content": "a"}}]})]
        )
    with pytest.raises(UpstreamUnavailable, match="ended before"):
        await call(make_adapter(kind), stream=True)


async def test_answer_without_choices(engine: FakeEngine, make_adapter: Make) -> None:
    engine.json("/v1/chat/completions", {"choices": [], "usage": {"prompt_tokens": 1}})
    with pytest.raises(UpstreamUnavailable, match="no choices"):
        await make_adapter("vllm").chat(chat())


async def test_non_json_success_body(engine: FakeEngine, make_adapter: Make) -> None:
    engine.raw("/api/chat", b"<html>proxy page</html>", 200)
    with pytest.raises(UpstreamUnavailable, match="not a JSON object"):
        await make_adapter("ollama").chat(chat())


# Timeouts and connection failures -----------------------------------------------------------


async def hang_until_gone(req: Recorded, reply: Reply) -> None:
    await req.gone.wait()


async def headers_then_hang(req: Recorded, reply: Reply) -> None:
    await reply.start(200, "text/event-stream")
    await req.gone.wait()


async def trickle(req: Recorded, reply: Reply) -> None:
    """Twenty pieces 20 ms apart, then the end: about 0.4 s of steady output."""
    await reply.start(200, "text/event-stream")
    for _ in range(20):
        await reply.write(sse({"choices": [{"index": 0, "delta": {"content": "x"}}]}))
        await asyncio.sleep(0.02)
    await reply.write(sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    await reply.write(b"data: [DONE]\n\n")


async def one_piece_then_silence(req: Recorded, reply: Reply) -> None:
    await reply.start(200, "text/event-stream")
    await reply.write(sse({"choices": [{"index": 0, "delta": {"content": "x"}}]}))
    await req.gone.wait()


@pytest.mark.parametrize(
    "handler", [hang_until_gone, headers_then_hang], ids=["headers", "first-line"]
)
async def test_first_byte_timeout(handler: Any, engine: FakeEngine, make_adapter: Make) -> None:
    engine.on("/v1/chat/completions", handler)
    adapter = make_adapter("vllm", timeouts=Timeouts(connect=5, first_byte=0.15, total=30))
    with pytest.raises(UpstreamTimeout, match="first byte"):
        await call(adapter, stream=True)


async def test_a_stream_that_goes_silent_ends_after_the_idle_gap(
    engine: FakeEngine, make_adapter: Make
) -> None:
    engine.on("/v1/chat/completions", one_piece_then_silence)
    adapter = make_adapter("vllm", timeouts=Timeouts(first_byte=5, total=30, idle=0.15))
    seen: list[Any] = []
    with pytest.raises(UpstreamTimeout, match=r"silent for 0\.15 s"):
        async for event in adapter.chat_stream(chat()):
            seen.append(event)
    assert [e.text for e in seen if isinstance(e, TextDelta)] == ["x"]


async def pings_then_the_answer(req: Recorded, reply: Reply) -> None:
    """Keep-alive comments for 0.4 s (an engine busy with a long prompt), then the answer."""
    await reply.start(200, "text/event-stream")
    await reply.write(sse({"choices": [{"index": 0, "delta": {"content": "x"}}]}))
    for _ in range(8):
        await asyncio.sleep(0.05)
        await reply.write(b": ping\n\n")
    await reply.write(sse({"choices": [{"index": 0, "delta": {"content": "y"}}]}))
    await reply.write(sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    await reply.write(b"data: [DONE]\n\n")


@pytest.mark.parametrize(
    ("handler", "timeouts", "text"),
    [
        # Pieces keep coming for longer than the total timeout, which bounds whole bodies only.
        (trickle, Timeouts(first_byte=5, total=0.1, idle=5), "x" * 20),
        # Keep-alive comments count as signs of life for the idle timer.
        (pings_then_the_answer, Timeouts(first_byte=5, total=30, idle=0.15), "xy"),
    ],
    ids=["pieces-past-the-total-timeout", "keep-alive-comments-past-the-idle-gap"],
)
async def test_a_stream_that_keeps_showing_life_runs_to_its_end(
    handler: Any, timeouts: Timeouts, text: str, engine: FakeEngine, make_adapter: Make
) -> None:
    engine.on("/v1/chat/completions", handler)
    adapter = make_adapter("vllm", timeouts=timeouts)
    events = await call(adapter, stream=True)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == text


async def one_piece_then_bytes_without_a_line(req: Recorded, reply: Reply) -> None:
    await reply.start(200, "text/event-stream")
    await reply.write(sse({"choices": [{"index": 0, "delta": {"content": "x"}}]}))
    while not req.gone.is_set():
        await reply.write(b":")
        await asyncio.sleep(0.03)


async def test_bytes_trickled_without_a_line_end_the_stream_after_the_idle_gap(
    engine: FakeEngine, make_adapter: Make
) -> None:
    engine.on("/v1/chat/completions", one_piece_then_bytes_without_a_line)
    adapter = make_adapter("vllm", timeouts=Timeouts(first_byte=5, total=30, idle=0.15))
    seen: list[Any] = []
    with pytest.raises(UpstreamTimeout, match=r"silent for 0\.15 s"):
        async for event in adapter.chat_stream(chat()):
            seen.append(event)
    assert [e.text for e in seen if isinstance(e, TextDelta)] == ["x"]


async def one_piece_then_a_line_without_end(req: Recorded, reply: Reply) -> None:
    await reply.start(200, "text/event-stream")
    await reply.write(sse({"choices": [{"index": 0, "delta": {"content": "x"}}]}))
    await reply.write(b"data: ")
    for _ in range(17):  # 17 MiB without a line feed: past the longest line a stream may hold
        await reply.write(b"y" * (1 << 20))
        if req.gone.is_set():
            return
    await reply.end()


async def test_a_line_longer_than_the_limit_fails_the_stream(
    engine: FakeEngine, make_adapter: Make
) -> None:
    engine.on("/v1/chat/completions", one_piece_then_a_line_without_end)
    seen: list[Any] = []
    with pytest.raises(UpstreamUnavailable, match="a line longer than 16777216 bytes"):
        async for event in make_adapter("vllm").chat_stream(chat()):
            seen.append(event)
    assert [e.text for e in seen if isinstance(e, TextDelta)] == ["x"]


async def test_total_timeout_without_streaming(engine: FakeEngine, make_adapter: Make) -> None:
    engine.on("/api/chat", hang_until_gone)
    adapter = make_adapter("ollama", timeouts=Timeouts(connect=5, first_byte=5, total=0.15))
    with pytest.raises(UpstreamTimeout, match="total"):
        await call(adapter, stream=False)


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("kind", ["vllm", "llamacpp", "openai", "ollama"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_connection_refused(
    kind: str, stream: bool, closed_port: int, make_adapter: Make
) -> None:
    adapter = make_adapter(kind, url=f"http://127.0.0.1:{closed_port}")
    with pytest.raises(UpstreamUnavailable, match="cannot connect"):
        await call(adapter, stream)


@pytest.fixture
def unanswered_port() -> Iterator[int]:
    """A port whose accept queue is full, so new connections are never completed."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = int(server.getsockname()[1])
    fillers = []
    for _ in range(4):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        fillers.append(s)
    yield port
    for s in fillers:
        s.close()
    server.close()


async def test_connect_timeout(unanswered_port: int, make_adapter: Make) -> None:
    adapter = make_adapter(
        "vllm",
        url=f"http://127.0.0.1:{unanswered_port}",
        timeouts=Timeouts(connect=0.15, first_byte=5, total=5),
    )
    with pytest.raises(UpstreamTimeout, match="connect"):
        await adapter.chat(chat())
