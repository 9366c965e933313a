"""Every adapter against a real HTTP server: the right route, body and headers go out, and the
answer (JSON or a stream cut into arbitrary pieces) comes back as canonical results."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import orjson
import pytest

from mindrouter.backends import OllamaAdapter
from mindrouter.canonical import (
    ChatRequest,
    CompletionRequest,
    Done,
    EmbeddingRequest,
    Finish,
    Reasoning,
    Sampling,
    StreamEvent,
    TextDelta,
    Tool,
    ToolCallStart,
    Usage,
    assemble,
    text_message,
)
from mindrouter.errors import UpstreamUnavailable

from .fake_engine import FakeEngine, Recorded, Reply, ndjson, sse

Make = Callable[..., Any]
USAGE = {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}


def pieces(data: bytes, size: int = 7) -> list[bytes]:
    """Cut bytes at fixed offsets, so lines and JSON break mid-way between network writes."""
    return [data[i : i + size] for i in range(0, len(data), size)]


def chat(text: str = "Hi", **kw: Any) -> ChatRequest:
    return ChatRequest(model="m", messages=[text_message("user", text)], **kw)


async def pulled(stream: Any) -> list[StreamEvent]:
    return [event async for event in stream]


async def collect(stream: Any) -> list[StreamEvent]:
    """The events as the gateway's relay takes them: the first pulled, then pushed to a sink
    (`canonical.Events`) that wants no more after every other batch, so that the stream goes
    back and forth between pushing and being pulled."""
    events: list[StreamEvent] = []
    batches = 0

    def sink(batch: list[StreamEvent]) -> bool:
        nonlocal batches
        assert batch and not isinstance(batch[-1], Done)
        batches += 1
        events.extend(batch)
        return batches % 2 == 1

    push = None
    try:
        while True:
            events.append(await stream.asend(push))
            push = sink
    except StopAsyncIteration:
        pass
    return events


def tool_stream() -> bytes:
    def c(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}], "usage": None}

    call = {
        "index": 0,
        "id": "call_9",
        "type": "function",
        "function": {"name": "f", "arguments": ""},
    }
    return sse(
        c({"role": "assistant", "content": ""}),
        c({"reasoning": "Let me call f."}),
        c({"tool_calls": [call]}),
        c({"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]}),
        c({"tool_calls": [{"index": 0, "function": {"arguments": ' "Oslo"}'}}]}),
        c({}, "tool_calls"),
        b": keep-alive comment",
        {"choices": [], "usage": USAGE},
        "[DONE]",
    )


async def test_vllm_chat(engine: FakeEngine, make_adapter: Make) -> None:
    engine.json(
        "/v1/chat/completions",
        {
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "Hello", "reasoning": "r"},
                    "finish_reason": "stop",
                    "stop_reason": None,
                }
            ],
            "usage": USAGE,
        },
    )
    adapter = make_adapter("vllm", url=engine.url + "/v1/")
    result = await adapter.chat(chat(sampling=Sampling(max_tokens=5, top_k=3)))
    assert (result.first.text, result.first.reasoning) == ("Hello", "r")
    assert result.usage == Usage(9, 4)
    body = engine.last.json
    assert (body["max_tokens"], body["top_k"], body["stream"]) == (5, 3, False)
    assert engine.last.headers["content-type"] == "application/json"
    assert "authorization" not in engine.last.headers


async def test_vllm_stream_with_tool_call_in_pieces(engine: FakeEngine, make_adapter: Make) -> None:
    engine.stream("/v1/chat/completions", pieces(tool_stream()))
    events = await collect(make_adapter("vllm").chat_stream(chat(tools=[Tool("f")])))
    assert isinstance(events[-1], Done)
    assert events[-1].usage == Usage(9, 4)
    assert events[-2] == Finish("tool_calls")
    result = assemble("m", events)
    assert result.first.reasoning == "Let me call f."
    call = result.first.tool_calls[0]
    assert (call.id, call.name, call.arguments) == ("call_9", "f", '{"city": "Oslo"}')
    body = engine.last.json
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


async def test_what_one_read_brought_before_a_malformed_piece_is_still_handed_on(
    engine: FakeEngine, make_adapter: Make
) -> None:
    """The events of one read are handed to the sink together; a piece that is not JSON ends the
    stream, but the events before it in the same read are relayed and charged first."""

    def c(text: str) -> dict[str, Any]:
        return {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}

    engine.stream("/v1/chat/completions", [sse(c("Hello"), c(" big"), c(" world"), "{not json")])
    stream = make_adapter("vllm").chat_stream(chat())
    batches: list[list[StreamEvent]] = []

    def sink(batch: list[StreamEvent]) -> bool:
        batches.append(list(batch))
        return True

    assert await stream.asend(None) == TextDelta("Hello")
    with pytest.raises(UpstreamUnavailable, match="not a JSON object while reading the stream"):
        await stream.asend(sink)
    assert batches == [[TextDelta(" big"), TextDelta(" world")]]


async def test_events_with_crlf_line_ends_and_data_over_several_lines(
    engine: FakeEngine, make_adapter: Make
) -> None:
    """Server-sent events may end their lines with CRLF, and an event's data may span several
    `data:` lines (joined with a line feed); both decode like the common shape."""

    def c(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return orjson.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    split = c({"content": "lo"}).replace(b'"delta":', b'"delta":\ndata: ')
    usage = orjson.dumps({"choices": [], "usage": USAGE})
    payloads = [c({"content": "Hel"}), split, None, c({}, "stop"), usage, b"[DONE]"]
    ends = [b"\r\n\r\n", b"\r\n\r\n", b"\r\n\r\n", b"\n\n", b"\r\n\r\n", b"\r\n\r\n"]
    body = b"".join(
        (b": comment" if data is None else b"data: " + data) + end
        for data, end in zip(payloads, ends, strict=True)
    )
    engine.stream("/v1/chat/completions", pieces(body, 5))
    events = await collect(make_adapter("vllm").chat_stream(chat()))
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hel", "lo"]
    assert events[-2:] == [Finish("stop"), Done(Usage(9, 4))]


async def test_vllm_stream_without_usage_is_estimated(
    engine: FakeEngine, make_adapter: Make
) -> None:
    chunk = {"choices": [{"index": 0, "delta": {"content": "Hello"}, "finish_reason": "stop"}]}
    engine.stream("/v1/chat/completions", [sse(chunk, "[DONE]")])
    events = await collect(make_adapter("vllm").chat_stream(chat()))
    done = events[-1]
    assert isinstance(done, Done)
    assert done.usage.estimated
    assert done.usage.input_tokens > 0
    assert done.usage.output_tokens == 1


async def test_vllm_count_tokens_embeddings_and_completions(
    engine: FakeEngine, make_adapter: Make
) -> None:
    engine.json("/tokenize", {"count": 17, "max_model_len": 8192, "tokens": [1] * 17})
    engine.json(
        "/v1/embeddings",
        {"data": [{"index": 0, "embedding": [0.1, 0.2]}], "usage": {"prompt_tokens": 2}},
    )
    engine.json(
        "/v1/completions",
        {"choices": [{"index": 0, "text": " there", "finish_reason": "length"}], "usage": USAGE},
    )
    adapter = make_adapter("vllm")
    assert await adapter.count_chat_tokens(chat()) == 17
    assert engine.last.json["add_generation_prompt"] is True
    emb = await adapter.embed(EmbeddingRequest("e", ["hi"]))
    assert (emb.vectors, emb.usage.input_tokens) == ([[0.1, 0.2]], 2)
    assert engine.last.json["encoding_format"] == "float"
    done = await adapter.complete(CompletionRequest("m", ["Hi"]))
    assert (done.first.text, done.first.finish_reason) == (" there", "length")
    assert engine.last.json["prompt"] == "Hi"


async def test_completion_stream(engine: FakeEngine, make_adapter: Make) -> None:
    def c(text: str, finish: str | None = None) -> dict[str, Any]:
        return {"choices": [{"index": 0, "text": text, "finish_reason": finish}]}

    engine.stream(
        "/v1/completions",
        pieces(sse(c("Once"), c(" upon", "length"), {"choices": [], "usage": USAGE}, "[DONE]"), 5),
    )
    events = await collect(make_adapter("llamacpp").complete_stream(CompletionRequest("m", ["x"])))
    assert events == [TextDelta("Once"), TextDelta(" upon"), Finish("length"), Done(Usage(9, 4))]


async def test_llamacpp_reasoning_content_and_token_count(
    engine: FakeEngine, make_adapter: Make
) -> None:
    def c(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    final = {
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "timings": {"cache_n": 0, "prompt_n": 5, "predicted_n": 2},
    }
    engine.stream(
        "/v1/chat/completions",
        [sse(c({"reasoning_content": "think"}), c({"content": "ok"}), final, "[DONE]")],
    )
    engine.json("/apply-template", {"prompt": "<user>Hi</user>"})
    engine.json("/tokenize", {"tokens": [1, 2, 3, 4]})
    adapter = make_adapter("llamacpp")
    events = await collect(adapter.chat_stream(chat(reasoning=Reasoning("on"))))
    assert engine.last.json["reasoning_format"] == "deepseek"
    result = assemble("m", events)
    assert (result.first.reasoning, result.first.text) == ("think", "ok")
    assert result.usage == Usage(5, 2)
    assert await adapter.count_chat_tokens(chat()) == 4
    assert [r.path for r in engine.requests[-2:]] == ["/apply-template", "/tokenize"]
    assert engine.last.json == {"content": "<user>Hi</user>", "add_special": True}


async def test_token_count_is_none_without_the_endpoint(
    engine: FakeEngine, make_adapter: Make
) -> None:
    assert await make_adapter("vllm").count_chat_tokens(chat()) is None
    assert await make_adapter("llamacpp").count_chat_tokens(chat()) is None
    assert await make_adapter("openai").count_chat_tokens(chat()) is None
    assert await make_adapter("ollama").count_chat_tokens(chat()) is None


async def test_generic_openai_key_and_urls(engine: FakeEngine, make_adapter: Make) -> None:
    reply = {
        "choices": [{"index": 0, "message": {"content": "x"}, "finish_reason": "stop"}],
        "usage": USAGE,
    }
    engine.json("/v1/chat/completions", reply)
    engine.json("/openai/v1/chat/completions", reply)
    root = make_adapter("openai", api_key="sk-test")
    await root.chat(chat(reasoning=Reasoning("on", "low"), sampling=Sampling(top_k=5)))
    assert engine.last.headers["authorization"] == "Bearer sk-test"
    assert engine.last.json["reasoning_effort"] == "low"
    assert "top_k" not in engine.last.json
    based = make_adapter("openai", url=engine.url + "/openai/v1")
    await based.chat(chat())
    assert engine.last.path == "/openai/v1/chat/completions"


def ollama_chat_lines() -> bytes:
    def line(msg: dict[str, Any], **kw: Any) -> dict[str, Any]:
        return {
            "model": "m",
            "message": {"role": "assistant", "content": "", **msg},
            "done": False,
            **kw,
        }

    return ndjson(
        line({"thinking": "hmm"}),
        line({"content": "Hel"}),
        line({"content": "lo"}),
        line({"tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]}),
        line({}, done=True, done_reason="stop", prompt_eval_count=11, eval_count=6),
    )


async def test_ollama_chat_stream_in_pieces(engine: FakeEngine, make_adapter: Make) -> None:
    engine.stream("/api/chat", pieces(ollama_chat_lines(), 5), "application/x-ndjson")
    adapter: OllamaAdapter = make_adapter(
        "ollama", url=engine.url + "/api", context_lengths={"m": 4096}
    )
    events = await collect(adapter.chat_stream(chat(reasoning=Reasoning("on", "minimal"))))
    assert events[-2:] == [Finish("tool_calls"), Done(Usage(11, 6))]
    result = assemble("m", events)
    assert (result.first.reasoning, result.first.text) == ("hmm", "Hello")
    assert result.first.tool_calls[0].arguments == '{"x":1}'
    body = engine.last.json
    assert (body["stream"], body["think"], body["options"]) == (True, "low", {"num_ctx": 4096})


async def test_ollama_chat_and_embed(engine: FakeEngine, make_adapter: Make) -> None:
    engine.json(
        "/api/chat",
        {
            "model": "m",
            "message": {"role": "assistant", "content": "4 degrees", "thinking": "t"},
            "done": True,
            "done_reason": "length",
            "prompt_eval_count": 31,
            "eval_count": 12,
        },
    )
    engine.json("/api/embed", {"model": "e", "embeddings": [[0.5]], "prompt_eval_count": 3})
    adapter = make_adapter("ollama")
    result = await adapter.chat(chat())
    assert (result.first.text, result.first.reasoning, result.first.finish_reason) == (
        "4 degrees",
        "t",
        "length",
    )
    assert result.usage == Usage(31, 12)
    assert engine.last.json["stream"] is False
    emb = await adapter.embed(EmbeddingRequest("e", ["x"]))
    assert (emb.vectors, emb.usage) == ([[0.5]], Usage(3))


async def test_ollama_generate_runs_prompts_in_sequence(
    engine: FakeEngine, make_adapter: Make
) -> None:
    async def generate(req: Recorded, reply: Reply) -> None:
        prompt = req.json["prompt"]
        await reply.start(200, "application/x-ndjson")
        await reply.write(ndjson({"response": prompt.upper(), "done": False}))
        await reply.end(
            ndjson(
                {
                    "response": "",
                    "done": True,
                    "done_reason": "stop",
                    "prompt_eval_count": 2,
                    "eval_count": 1,
                }
            )
        )

    engine.on("/api/generate", generate)
    adapter = make_adapter("ollama")
    req = CompletionRequest("m", ["ab", "cd"], echo=True)
    events = await collect(adapter.complete_stream(req))
    assert events == [
        TextDelta("ab", 0),
        TextDelta("AB", 0),
        Finish("stop", None, 0),
        TextDelta("cd", 1),
        TextDelta("CD", 1),
        Finish("stop", None, 1),
        Done(Usage(4, 2)),
    ]
    assert [r.json["prompt"] for r in engine.requests] == ["ab", "cd"]
    assert all(r.json["raw"] is True for r in engine.requests)


async def test_ollama_generate_non_stream(engine: FakeEngine, make_adapter: Make) -> None:
    async def generate(req: Recorded, reply: Reply) -> None:
        text = req.json["prompt"][::-1]
        await reply.json(
            {
                "response": text,
                "done": True,
                "done_reason": "stop",
                "prompt_eval_count": 1,
                "eval_count": 1,
            }
        )

    engine.on("/api/generate", generate)
    result = await make_adapter("ollama").complete(CompletionRequest("m", ["ab", "cd"]))
    assert [c.text for c in result.choices] == ["ba", "dc"]
    assert result.usage == Usage(2, 2)


async def test_completed_streams_reuse_the_connection(
    engine: FakeEngine, make_adapter: Make
) -> None:
    engine.stream("/v1/chat/completions", [tool_stream()])
    adapter = make_adapter("vllm")
    for _ in range(3):
        await collect(adapter.chat_stream(chat()))
    assert len({r.client for r in engine.requests}) == 1


async def test_an_error_answer_read_whole_leaves_the_connection_reusable(
    engine: FakeEngine, make_adapter: Make
) -> None:
    engine.json("/v1/chat/completions", {"error": {"message": "busy"}}, status=503)
    adapter = make_adapter("vllm")
    for _ in range(3):
        with pytest.raises(UpstreamUnavailable, match="busy"):
            await collect(adapter.chat_stream(chat()))
    assert len(engine.requests) == 3
    assert len({r.client for r in engine.requests}) == 1


async def test_a_pushed_stream_gives_the_events_a_pulled_one_does(
    engine: FakeEngine, make_adapter: Make
) -> None:
    engine.stream("/v1/chat/completions", pieces(tool_stream(), 3))
    engine.stream("/api/chat", pieces(ollama_chat_lines(), 3), "application/x-ndjson")
    vllm, ollama = make_adapter("vllm"), make_adapter("ollama")
    for adapter in (vllm, ollama):
        req = chat(tools=[Tool("f")], reasoning=Reasoning("on"))
        expected = await pulled(adapter.chat_stream(req))
        assert isinstance(expected[-1], Done) and len(expected) > 5
        assert unnamed(await collect(adapter.chat_stream(req))) == unnamed(expected)


def unnamed(events: list[StreamEvent]) -> list[StreamEvent]:
    """Without the call ids an adapter mints (Ollama sends none)."""
    return [replace(e, id="") if isinstance(e, ToolCallStart) else e for e in events]
