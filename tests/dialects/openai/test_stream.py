"""Stream encoders: every chunk passes the SDK's strict models and the SDK rebuilds the reply."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types import Completion
from openai.types.chat import ChatCompletionChunk

from mindrouter.canonical import (
    Done,
    Finish,
    ReasoningDelta,
    ReasoningSignature,
    StreamEvent,
    StreamFailed,
    TextDelta,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from mindrouter.dialects.openai import ChatStreamEncoder, CompletionStreamEncoder, ReasoningField
from mindrouter.errors import UpstreamUnavailable

from .sse import DONE, chunks, payloads

USAGE = Usage(input_tokens=3, output_tokens=2, cached_input_tokens=1, reasoning_tokens=1)


def run_chat(
    events: Iterable[StreamEvent],
    *,
    include_usage: bool = False,
    reasoning_field: ReasoningField = "reasoning_content",
    n: int = 1,
) -> tuple[bytes, list[bytes]]:
    enc = ChatStreamEncoder(
        request_id="chatcmpl-1",
        model="m",
        created=1767225600,
        include_usage=include_usage,
        reasoning_field=reasoning_field,
        n=n,
    )
    assert enc.content_type == "text/event-stream"
    per_event = [enc.start(), *(enc.encode(e) for e in events)]
    return b"".join(per_event), per_event


def validated_chunks(raw: bytes) -> list[ChatCompletionChunk]:
    out = []
    for chunk in chunks(raw):
        parsed = ChatCompletionChunk.model_validate(chunk, strict=True)
        assert (parsed.id, parsed.created, parsed.model) == ("chatcmpl-1", 1767225600, "m")
        assert parsed.object == "chat.completion.chunk"
        out.append(parsed)
    return out


TOOL_EVENTS: list[StreamEvent] = [
    ReasoningDelta("Need "),
    ReasoningDelta("weather."),
    ReasoningSignature("sig"),
    TextDelta("Checking"),
    TextDelta(" now."),
    ToolCallStart(index=0, id="call_1", name="get_weather"),
    ToolCallArgs(index=0, fragment='{"ci'),
    ToolCallArgs(index=0, fragment='ty":"Oslo"}'),
    ToolCallEnd(index=0),
    ToolCallStart(index=1, id="call_2", name="get_time"),
    ToolCallArgs(index=1, fragment="{}"),
    ToolCallEnd(index=1),
    Finish("tool_calls"),
    Done(USAGE),
]


def test_first_chunk_is_the_role() -> None:
    raw, per_event = run_chat([TextDelta("Hi"), Finish("stop"), Done(USAGE)])
    first = orjson.loads(payloads(per_event[0])[0])
    assert first["choices"] == [
        {
            "index": 0,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": None,
            "finish_reason": None,
        }
    ]
    parsed = validated_chunks(raw)
    assert [c.choices[0].delta.content for c in parsed[:2]] == ["", "Hi"]
    last = parsed[-1].choices[0]
    assert last.finish_reason == "stop" and last.delta.content is None


def test_each_event_gives_its_own_chunk_at_once() -> None:
    _, per_event = run_chat(TOOL_EVENTS)
    sizes = [len(payloads(b)) if b else 0 for b in per_event]
    # start, 2 reasoning, signature (nothing), 2 text, start+2 args, end (nothing), start+args,
    # end (nothing), finish, then [DONE] only (no usage requested).
    assert sizes == [1, 1, 1, 0, 1, 1, 1, 1, 1, 0, 1, 1, 0, 1, 1]


def test_tool_calls_are_rebuilt_by_the_sdk() -> None:
    raw, _ = run_chat(TOOL_EVENTS, include_usage=True)
    state = ChatCompletionStreamState()
    parsed = validated_chunks(raw)
    for chunk in parsed:
        state.handle_chunk(chunk)
    final = state.get_final_completion()
    message = final.choices[0].message
    assert message.content == "Checking now."
    assert message.tool_calls is not None
    assert [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls] == [
        ("call_1", "get_weather", '{"city":"Oslo"}'),
        ("call_2", "get_time", "{}"),
    ]
    assert final.choices[0].finish_reason == "tool_calls"
    assert getattr(parsed[1].choices[0].delta, "reasoning_content") == "Need "


def test_tool_call_delta_shapes() -> None:
    raw, _ = run_chat(TOOL_EVENTS)
    deltas = [c["choices"][0]["delta"] for c in chunks(raw) if c["choices"]]
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert calls[0] == {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": ""},
    }
    assert calls[1] == {"index": 0, "function": {"arguments": '{"ci'}}
    assert all("index" in c for c in calls)


def test_usage_chunk_only_when_asked() -> None:
    with_usage = chunks(run_chat(TOOL_EVENTS, include_usage=True)[0])
    assert all(c["usage"] is None for c in with_usage[:-1])
    assert with_usage[-1]["choices"] == []
    assert with_usage[-1]["usage"] == {
        "prompt_tokens": 3,
        "completion_tokens": 2,
        "total_tokens": 5,
        "prompt_tokens_details": {"cached_tokens": 1},
        "completion_tokens_details": {"reasoning_tokens": 1},
    }
    assert with_usage[-2]["choices"][0]["finish_reason"] == "tool_calls"
    without = chunks(run_chat(TOOL_EVENTS)[0])
    assert all("usage" not in c and c["choices"] for c in without)


@pytest.mark.parametrize(
    ("field", "keys"),
    [
        ("reasoning_content", ["reasoning_content"]),
        ("reasoning", ["reasoning"]),
        ("both", ["reasoning_content", "reasoning"]),
    ],
)
def test_reasoning_delta_field(field: ReasoningField, keys: list[str]) -> None:
    raw, _ = run_chat([ReasoningDelta('a "quote"'), Done(USAGE)], reasoning_field=field)
    validated_chunks(raw)
    assert chunks(raw)[1]["choices"][0]["delta"] == dict.fromkeys(keys, 'a "quote"')


def test_several_choices_by_index() -> None:
    events: list[StreamEvent] = [
        TextDelta("a", choice=0),
        TextDelta("b", choice=1),
        Finish("stop", choice=1),
        Finish("length", choice=0),
        Done(USAGE),
    ]
    raw, _ = run_chat(events, n=2, include_usage=True)
    state = ChatCompletionStreamState()
    for chunk in validated_chunks(raw):
        state.handle_chunk(chunk)
    # The snapshot, because the SDK's final parse refuses a "length" finish.
    final = state.current_completion_snapshot
    assert [(c.index, c.message.content, c.finish_reason) for c in final.choices] == [
        (0, "a", "length"),
        (1, "b", "stop"),
    ]


def test_a_choice_first_seen_late_is_opened_before_its_first_chunk() -> None:
    raw, per_event = run_chat([TextDelta("a"), TextDelta("b", choice=1), Done(USAGE)])
    parsed = validated_chunks(raw)
    assert [(c.choices[0].index, c.choices[0].delta.role) for c in parsed[:4]] == [
        (0, "assistant"),
        (0, None),
        (1, "assistant"),
        (1, None),
    ]
    assert len(payloads(per_event[2])) == 2
    finishes = {c.choices[0].index: c.choices[0].finish_reason for c in parsed[-2:]}
    assert finishes == {0: "stop", 1: "stop"}


def test_unfinished_choices_are_finished_at_done() -> None:
    raw, _ = run_chat(
        [ToolCallStart(0, "c", "f"), ToolCallArgs(0, "{}"), TextDelta("x", choice=1), Done(USAGE)],
        n=2,
    )
    finishes = {
        c.choices[0].index: c.choices[0].finish_reason
        for c in validated_chunks(raw)
        if c.choices[0].finish_reason
    }
    assert finishes == {0: "tool_calls", 1: "stop"}


def test_finish_reason_mapping_in_stream() -> None:
    raw, _ = run_chat([Finish("context_exceeded"), Done(USAGE)])
    assert validated_chunks(raw)[-1].choices[0].finish_reason == "length"


def test_failure_mid_stream_is_an_error_payload_then_done() -> None:
    enc = ChatStreamEncoder(request_id="chatcmpl-1", model="m", created=1, include_usage=True)
    raw = enc.start() + enc.encode(TextDelta("par"))
    tail = enc.encode(StreamFailed(UpstreamUnavailable("backend went away")))
    items = payloads(tail)
    assert items[-1] == DONE and len(items) == 2
    error = orjson.loads(items[0])
    assert error == {
        "error": {
            "message": "backend went away",
            "type": "server_error",
            "param": None,
            "code": "upstream_error",
        }
    }
    assert enc.encode(TextDelta("late")) == b"" and enc.encode(Done(USAGE)) == b""
    assert len(payloads(raw)) == 2


def test_encode_before_start_sends_the_opening_first() -> None:
    enc = ChatStreamEncoder(
        request_id="chatcmpl-1", model="m", created=1767225600, include_usage=False
    )
    raw = enc.encode(TextDelta("hi"))
    parsed = validated_chunks(raw + enc.encode(Done(USAGE)))
    assert parsed[0].choices[0].delta.role == "assistant"
    assert enc.start() == b""
    failed = ChatStreamEncoder(request_id="x", model="m", created=1, include_usage=False)
    assert payloads(failed.encode(StreamFailed(UpstreamUnavailable("x"))))[-1] == DONE


@settings(max_examples=60, deadline=None, database=None)
@given(
    st.lists(st.text(), max_size=8),
    st.lists(st.text(), max_size=8),
    st.booleans(),
)
def test_fragments_reassemble_exactly(text: list[str], args: list[str], usage: bool) -> None:
    events: list[StreamEvent] = [TextDelta(t) for t in text]
    events += [ToolCallStart(0, "call_x", "f"), *(ToolCallArgs(0, a) for a in args), ToolCallEnd(0)]
    events += [Finish("tool_calls"), Done(USAGE)]
    raw, _ = run_chat(events, include_usage=usage)
    parsed = chunks(raw)
    assert ("usage" in parsed[-1] and parsed[-1]["choices"] == []) is usage
    deltas = [c["choices"][0]["delta"] for c in parsed if c["choices"]]
    assert "".join(d.get("content") or "" for d in deltas) == "".join(text)
    fragments = [d["tool_calls"][0]["function"]["arguments"] for d in deltas if "tool_calls" in d]
    assert "".join(fragments) == "".join(args)


def completion_chunk(chunk: dict[str, Any]) -> Completion:
    # OpenAI streams `finish_reason: null` until the end, which the SDK's shared Completion model
    # does not allow; the SDK parses stream chunks leniently, so check everything else strictly.
    patched = {
        **chunk,
        "choices": [{**c, "finish_reason": c["finish_reason"] or "stop"} for c in chunk["choices"]],
    }
    return Completion.model_validate(patched, strict=True)


def test_completion_stream() -> None:
    enc = CompletionStreamEncoder(request_id="chatcmpl-2", model="m", created=9, include_usage=True)
    assert enc.start() == b""
    events: list[StreamEvent] = [
        ReasoningDelta("hidden"),
        TextDelta(" there"),
        ToolCallStart(0, "c", "f"),
        TextDelta(" was"),
        Finish("tool_calls"),
        Done(USAGE),
    ]
    per_event = [enc.encode(e) for e in events]
    assert per_event[0] == b"" and per_event[2] == b""
    parsed = chunks(b"".join(per_event))
    comps = [completion_chunk(c) for c in parsed]
    assert all(c.object == "text_completion" and c.id == "chatcmpl-2" for c in comps)
    assert [c["choices"][0]["text"] for c in parsed[:-1]] == [" there", " was", ""]
    assert [c["choices"][0]["finish_reason"] for c in parsed[:-1]] == [None, None, "stop"]
    assert parsed[-1]["choices"] == [] and parsed[-1]["usage"]["total_tokens"] == 5
    assert enc.encode(TextDelta("late")) == b""


def test_completion_stream_without_usage_and_failure() -> None:
    enc = CompletionStreamEncoder(request_id="c", model="m", created=1, include_usage=False)
    raw = enc.encode(TextDelta("x")) + enc.encode(Done(USAGE))
    parsed = chunks(raw)
    assert [c["choices"][0]["finish_reason"] for c in parsed] == [None, "stop"]
    assert all("usage" not in c for c in parsed)
    failing = CompletionStreamEncoder(request_id="c", model="m", created=1, include_usage=False)
    items = payloads(failing.encode(StreamFailed(UpstreamUnavailable("gone"))))
    assert orjson.loads(items[0])["error"]["message"] == "gone" and items[1] == DONE
