"""The stream encoder, read back with the SDK's strict event models and its own accumulator."""

from __future__ import annotations

import itertools
import json
from typing import Any

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
from mindrouter.dialects.anthropic import (
    MessagesStreamEncoder,
    decode_messages_request,
    verify_thinking,
)
from mindrouter.errors import Overloaded

from .sse import accumulate, check_block_order, split_events, validate_events

KEY = b"stream-key"
ARGS = (
    '{"city": "Oslo ☔", "days": [1, 2.5e3], "nested": {"q": "a \\"quoted\\" \\u00e9"}, "ok": true}'
)
USAGE = Usage(input_tokens=30, output_tokens=12, cached_input_tokens=10)


def encoder(**options: Any) -> MessagesStreamEncoder:
    return MessagesStreamEncoder(
        message_id="msg_01", model="m", input_tokens_hint=lambda: 25, signing_key=KEY, **options
    )


def run(events: list[StreamEvent], **options: Any) -> bytes:
    enc = encoder(**options)
    return enc.start() + b"".join(enc.encode(event) for event in events)


def tool_events(
    fragments: list[str], index: int = 0, call_id: str = "call_abc"
) -> list[StreamEvent]:
    return [
        ToolCallStart(index=index, id=call_id, name="get_weather"),
        *(ToolCallArgs(index=index, fragment=f) for f in fragments),
        ToolCallEnd(index=index),
    ]


def test_full_stream_reads_back_as_the_message() -> None:
    events: list[StreamEvent] = [
        ReasoningDelta("Let me "),
        ReasoningSignature("backend-signature"),
        ReasoningDelta("see."),
        TextDelta("Checking "),
        TextDelta("now."),
        *tool_events(['{"city": "Os', 'lo"}']),
        Finish("tool_calls"),
        Done(USAGE),
    ]
    raw = run(events)
    stream = validate_events(raw)
    check_block_order(stream)
    names = [name for name, _ in stream]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    start = stream[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert start["usage"]["input_tokens"] == 25
    # One signature, just before the thinking block stops.
    signatures = [
        d
        for n, d in stream
        if n == "content_block_delta" and d["delta"]["type"] == "signature_delta"
    ]
    assert len(signatures) == 1
    assert names[names.index("content_block_stop") - 1] == "content_block_delta"

    message = accumulate(raw)
    thinking, text, tool = message.content
    assert thinking.type == "thinking" and thinking.thinking == "Let me see."
    assert verify_thinking(thinking.thinking, thinking.signature, KEY)
    assert text.type == "text" and text.text == "Checking now."
    assert tool.type == "tool_use"
    assert (tool.id, tool.name, tool.input) == ("call_abc", "get_weather", {"city": "Oslo"})
    assert message.stop_reason == "tool_use" and message.stop_sequence is None
    assert (message.usage.input_tokens, message.usage.output_tokens) == (20, 12)
    assert message.usage.cache_read_input_tokens == 10

    # The client sends the turn back: it decodes, thinking and tool id intact.
    request = {
        "model": "m",
        "max_tokens": 100,
        "messages": [
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": [b.model_dump(exclude_none=True) for b in message.content],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "call_abc", "content": "4°C"}],
            },
        ],
    }
    req = decode_messages_request(request, signing_key=KEY)
    assert req.messages[1].reasoning == "Let me see."
    assert req.messages[1].tool_calls[0].id == "call_abc"
    assert req.messages[2].tool_call_id == "call_abc" and req.messages[2].name == "get_weather"


def test_every_two_way_split_of_the_arguments() -> None:
    expected = json.loads(ARGS)
    for cut in range(len(ARGS) + 1):
        fragments = [ARGS[:cut], ARGS[cut:]]
        raw = run([*tool_events(fragments), Finish("tool_calls"), Done(USAGE)])
        stream = split_events(raw)
        partials = [d["delta"]["partial_json"] for n, d in stream if n == "content_block_delta"]
        assert "".join(partials) == ARGS
        assert accumulate(raw).content[0].input == expected


@st.composite
def splits(draw: st.DrawFn) -> list[str]:
    cuts = sorted(draw(st.sets(st.integers(0, len(ARGS)), max_size=12)))
    bounds = [0, *cuts, len(ARGS)]
    return [ARGS[a:b] for a, b in itertools.pairwise(bounds)]


@settings(max_examples=100, deadline=None)
@given(splits())
def test_any_split_of_the_arguments(fragments: list[str]) -> None:
    raw = run([TextDelta("Sure."), *tool_events(fragments), Finish("tool_calls"), Done(USAGE)])
    check_block_order(validate_events(raw))
    assert accumulate(raw).content[1].input == json.loads(ARGS)


def test_overlapping_tool_calls_stay_whole_and_in_order() -> None:
    # An OpenAI-style backend may start call 1 (and send text) before call 0's arguments end.
    events: list[StreamEvent] = [
        ToolCallStart(index=0, id="call_a", name="a"),
        ToolCallArgs(index=0, fragment='{"x":'),
        ToolCallStart(index=1, id="chatcmpl-tool-b", name="b"),
        ToolCallArgs(index=1, fragment='{"y": '),
        TextDelta("aside"),
        ToolCallArgs(index=0, fragment=" 1}"),
        ToolCallArgs(index=1, fragment="2}"),
        ToolCallEnd(index=0),
        ToolCallArgs(index=7, fragment="never started"),
        ToolCallEnd(index=1),
        Finish("tool_calls"),
        Done(USAGE),
    ]
    raw = run(events)
    check_block_order(validate_events(raw))
    blocks = accumulate(raw).content
    assert [(b.type, getattr(b, "id", None)) for b in blocks] == [
        ("tool_use", "call_a"),
        ("tool_use", "chatcmpl-tool-b"),
        ("text", None),
    ]
    assert blocks[0].input == {"x": 1} and blocks[1].input == {"y": 2}
    assert blocks[2].text == "aside"


def test_unfinished_tool_calls_are_closed_at_the_end() -> None:
    events: list[StreamEvent] = [
        ToolCallStart(index=0, id="call_a", name="a"),
        ToolCallArgs(index=0, fragment="{}"),
        ToolCallStart(index=1, id="call_b", name="b"),
        ToolCallArgs(index=1, fragment='{"k": "v"}'),
        Done(USAGE),
    ]
    raw = run(events)
    check_block_order(validate_events(raw))
    message = accumulate(raw)
    assert [b.input for b in message.content] == [{}, {"k": "v"}]
    assert message.stop_reason == "tool_use"  # inferred: no Finish came


def test_stop_sequence_and_length() -> None:
    raw = run([TextDelta("a"), Finish("stop_sequence", stop_sequence="END"), Done(USAGE)])
    message = accumulate(raw)
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "END")
    assert (
        accumulate(run([TextDelta("a"), Finish("length"), Done(USAGE)])).stop_reason == "max_tokens"
    )
    assert accumulate(run([TextDelta("a"), Done(USAGE)])).stop_reason == "end_turn"


def test_input_hint_survives_when_no_real_count_comes() -> None:
    message = accumulate(run([TextDelta("a"), Finish("stop"), Done(Usage(output_tokens=3))]))
    assert (message.usage.input_tokens, message.usage.output_tokens) == (25, 3)


def test_omitted_reasoning_other_choices_and_empty_deltas_send_nothing() -> None:
    enc = encoder(return_reasoning=False)
    raw = enc.start()
    silent: list[StreamEvent] = [
        ReasoningDelta("hidden"),
        TextDelta(""),
        TextDelta("other choice", choice=1),
        ToolCallStart(index=0, id="c", name="f", choice=1),
        Finish("length", choice=1),
        ReasoningSignature("sig"),
    ]
    assert [enc.encode(event) for event in silent] == [b""] * len(silent)
    raw += enc.encode(TextDelta("shown")) + enc.encode(Finish("stop")) + enc.encode(Done(USAGE))
    message = accumulate(raw)
    assert [b.type for b in message.content] == ["text"]
    assert message.stop_reason == "end_turn"


def test_message_start_is_sent_once_even_if_the_caller_forgets_it() -> None:
    enc = encoder()
    raw = enc.encode(TextDelta("hi")) + enc.start() + enc.encode(Done(USAGE))
    assert [name for name, _ in validate_events(raw)].count("message_start") == 1
    assert enc.encode(TextDelta("after the end")) == b""


def test_ping_anywhere() -> None:
    enc = encoder()
    raw = (
        enc.start() + enc.ping() + enc.encode(TextDelta("x")) + enc.ping() + enc.encode(Done(USAGE))
    )
    stream = validate_events(raw)
    assert [n for n, _ in stream].count("ping") == 2
    check_block_order(stream)
    assert accumulate(raw).content[0].text == "x"


def test_failure_mid_stream_is_an_error_event_without_message_stop() -> None:
    enc = encoder()
    raw = (
        enc.start()
        + enc.encode(ReasoningDelta("thinking"))
        + enc.encode(StreamFailed(Overloaded("Overloaded")))
    )
    stream = validate_events(raw)
    name, data = stream[-1]
    assert (name, data) == (
        "error",
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    )
    assert "message_stop" not in [n for n, _ in stream]
    assert "content_block_stop" not in [n for n, _ in stream]
    assert enc.encode(Done(USAGE)) == b""


def test_no_done_sentinel_and_compact_json() -> None:
    raw = run([TextDelta("x"), Done(USAGE)])
    assert b"[DONE]" not in raw
    assert b'{"type":"message_stop"}' in raw
    assert encoder().content_type == "text/event-stream"
