"""Ollama NDJSON streams: every line is JSON the SDK accepts, done only at the end, calls whole."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from typing import Any

import ollama
from hypothesis import given, settings
from hypothesis import strategies as st

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
from mindrouter.dialects.ollama import ChatStreamEncoder, GenerateStreamEncoder
from mindrouter.errors import ModelNotFound, UpstreamUnavailable


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def iso() -> str:
    return "2026-01-01T10:00:00.000000000Z"


def chat_encoder(clock: Clock) -> ChatStreamEncoder:
    return ChatStreamEncoder(model="qwen3:8b", clock=clock, started_at=100.0, now_iso=iso)


def generate_encoder(clock: Clock) -> GenerateStreamEncoder:
    return GenerateStreamEncoder(model="llama3.2", clock=clock, started_at=100.0, now_iso=iso)


def run(
    encoder: ChatStreamEncoder | GenerateStreamEncoder,
    clock: Clock,
    events: Iterable[StreamEvent],
    step: float = 0.5,
) -> list[dict[str, Any]]:
    """Feed events half a second apart; return the parsed lines, checking the framing."""
    out = [encoder.start()]
    for event in events:
        clock.now += step
        out.append(encoder.encode(event))
    raw = b"".join(out)
    assert raw == b"" or raw.endswith(b"\n")
    lines = raw.decode().split("\n")[:-1]
    assert all(line.strip() for line in lines), "blank lines break the SDK"
    return [json.loads(line) for line in lines]


ARGS = '{"city": "Oslo", "units": ["metric"], "days": 3}'
FRAGMENTS = ['{"ci', 'ty": "Os', 'lo", "units": ["met', 'ric"], "days"', ": 3}"]

CHAT_EVENTS: list[StreamEvent] = [
    ReasoningDelta("The user "),
    ReasoningDelta("wants weather."),
    ReasoningSignature("sig"),
    TextDelta("Let me "),
    TextDelta(""),
    TextDelta("check."),
    ToolCallStart(index=0, id="call_0", name="get_weather"),
    *[ToolCallArgs(index=0, fragment=f) for f in FRAGMENTS],
    ToolCallEnd(index=0),
    Finish("tool_calls"),
    Done(Usage(input_tokens=20, output_tokens=30)),
]


def test_chat_stream() -> None:
    clock = Clock(100.0)
    encoder = chat_encoder(clock)
    assert encoder.content_type == "application/x-ndjson"
    assert encoder.start() == b""
    lines = run(encoder, clock, CHAT_EVENTS)
    responses = [ollama.ChatResponse.model_validate(line) for line in lines]

    assert [r.done for r in responses] == [False] * (len(lines) - 1) + [True]
    thinking = [r.message.thinking for r in responses if r.message.thinking]
    content = [r.message.content for r in responses if r.message.content]
    assert thinking == ["The user ", "wants weather."]
    assert content == ["Let me ", "check."]
    first_content = next(i for i, r in enumerate(responses) if r.message.content)
    assert all(not r.message.thinking for r in responses[first_content:])

    calls = [line["message"]["tool_calls"] for line in lines if "tool_calls" in line["message"]]
    assert len(calls) == 1 and len(calls[0]) == 1, "one chunk holding the whole call"
    call = calls[0][0]
    assert (call["id"], call["function"]["index"], call["function"]["name"]) == (
        "call_0",
        0,
        "get_weather",
    )
    assert call["function"]["arguments"] == json.loads("".join(FRAGMENTS)) == json.loads(ARGS)

    final = lines[-1]
    assert final == {
        "model": "qwen3:8b",
        "created_at": iso(),
        "message": {"role": "assistant", "content": ""},
        "done": True,
        "done_reason": "stop",
        # The first token came 0.5 s after the start; Done, the 15th event, came at 7.5 s.
        "total_duration": 7_500_000_000,
        "load_duration": 0,
        "prompt_eval_count": 20,
        "prompt_eval_duration": 500_000_000,
        "eval_count": 30,
        "eval_duration": 7_000_000_000,
    }
    for line in lines[:-1]:
        assert "done_reason" not in line and "eval_count" not in line


def test_chat_stream_sends_nothing_after_the_end() -> None:
    clock = Clock(100.0)
    encoder = chat_encoder(clock)
    encoder.encode(Done(Usage()))
    assert encoder.encode(TextDelta("late")) == b""
    assert encoder.encode(Done(Usage())) == b""


def test_length_and_no_output() -> None:
    clock = Clock(100.0)
    lines = run(chat_encoder(clock), clock, [Finish("length"), Done(Usage(5, 0))])
    assert len(lines) == 1
    final = ollama.ChatResponse.model_validate(lines[0])
    assert (final.done_reason, final.eval_duration, final.prompt_eval_duration) == (
        "length",
        0,
        1_000_000_000,
    )


def test_unclosed_tool_calls_are_sent_before_the_final_line() -> None:
    clock = Clock(100.0)
    events: list[StreamEvent] = [
        ToolCallStart(index=1, id="call_b", name="b"),
        ToolCallStart(index=0, id="call_a", name="a"),
        ToolCallArgs(index=0, fragment='{"x": 1}'),
        ToolCallArgs(index=7, fragment="ignored: no such call"),
        Done(Usage()),
    ]
    lines = run(chat_encoder(clock), clock, events)
    assert [line["message"].get("tool_calls") for line in lines] == [
        [{"id": "call_a", "function": {"index": 0, "name": "a", "arguments": {"x": 1}}}],
        [{"id": "call_b", "function": {"index": 1, "name": "b", "arguments": {}}}],
        None,
    ]


def test_other_choices_are_ignored() -> None:
    clock = Clock(100.0)
    events: list[StreamEvent] = [
        TextDelta("zero"),
        TextDelta("one", choice=1),
        Finish("length", choice=1),
        Finish("stop"),
        Done(Usage()),
    ]
    lines = run(chat_encoder(clock), clock, events)
    assert [line["message"]["content"] for line in lines] == ["zero", ""]
    assert lines[-1]["done_reason"] == "stop"


def test_failure_mid_stream_is_an_error_line() -> None:
    clock = Clock(100.0)
    encoder = chat_encoder(clock)
    events: list[StreamEvent] = [
        TextDelta("partial"),
        StreamFailed(UpstreamUnavailable("backend went away")),
    ]
    lines = run(encoder, clock, events)
    assert lines[-1] == {"error": "backend went away"}
    assert encoder.encode(Done(Usage())) == b""
    missing = run(chat_encoder(Clock(0)), Clock(0), [StreamFailed(ModelNotFound("x"))])
    assert missing == [{"error": 'model "x" not found, try pulling it first'}]


def test_generate_stream() -> None:
    clock = Clock(100.0)
    events: list[StreamEvent] = [
        ReasoningDelta("hmm"),
        TextDelta("Blue"),
        ToolCallStart(index=0, id="c", name="f"),
        ToolCallEnd(index=0),
        TextDelta(" sky."),
        Finish("stop_sequence", stop_sequence="\n"),
        Done(Usage(input_tokens=3, output_tokens=2)),
    ]
    lines = run(generate_encoder(clock), clock, events)
    responses = [ollama.GenerateResponse.model_validate(line) for line in lines]
    assert [(r.thinking, r.response, r.done) for r in responses] == [
        ("hmm", "", False),
        (None, "Blue", False),
        (None, " sky.", False),
        (None, "", True),
    ]
    final = lines[-1]
    assert (final["done_reason"], final["context"], final["eval_count"]) == ("stop", [], 2)
    assert final["eval_duration"] == 3_000_000_000
    assert all("context" not in line for line in lines[:-1])


@settings(max_examples=60, deadline=None)
@given(
    args=st.dictionaries(
        st.text(max_size=5),
        st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
        max_size=5,
    ),
    cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=6),
)
def test_fragments_anywhere_give_the_same_call(args: dict[str, Any], cuts: list[int]) -> None:
    text = json.dumps(args)
    points = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    fragments = [text[a:b] for a, b in itertools.pairwise(points)]
    events: list[StreamEvent] = [
        ToolCallStart(index=0, id="call_0", name="f"),
        *[ToolCallArgs(index=0, fragment=f) for f in fragments],
        ToolCallEnd(index=0),
        Done(Usage()),
    ]
    clock = Clock(0.0)
    lines = run(chat_encoder(clock), clock, events)
    assert len(lines) == 2
    ollama.ChatResponse.model_validate(lines[0])
    assert lines[0]["message"]["tool_calls"][0]["function"]["arguments"] == args
