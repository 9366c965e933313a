"""OpenAI-wire answers and stream chunks decode into canonical results and events."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from mindrouter.backends.openai_results import decode_embeddings, decode_result
from mindrouter.backends.openai_stream import ChatStreamDecoder
from mindrouter.canonical import (
    Finish,
    ReasoningDelta,
    TextDelta,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
    Usage,
    assemble,
)
from mindrouter.errors import UpstreamUnavailable
from mindrouter.tokens import count_text


def never() -> int:
    raise AssertionError("usage was given; no estimate needed")


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **choice: Any) -> Any:
    c: dict[str, Any] = {"index": choice.pop("index", 0), "delta": delta or {}}
    c["finish_reason"] = finish
    c.update(choice)
    return {"id": "x", "object": "chat.completion.chunk", "choices": [c], "usage": None}


def decode(chunks: list[Any], *, done: bool = True, estimate: Any = never) -> list[Any]:
    """The events, then the usage the stream closed with."""
    d = ChatStreamDecoder("b")
    for c in chunks:
        d.feed(c)
    usage = d.close(saw_end_marker=done, estimate_input=estimate)
    return [*d.out, usage]


USAGE = {
    "prompt_tokens": 10,
    "completion_tokens": 5,
    "total_tokens": 15,
    "prompt_tokens_details": {"cached_tokens": 4},
    "completion_tokens_details": {"reasoning_tokens": 2},
}


def test_non_stream_chat_result() -> None:
    data = {
        "model": "engine-side-name",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "reasoning_content": "hmm",
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": USAGE,
    }
    result = decode_result(data, "asked", never)
    assert result.model == "asked"
    c = result.first
    assert (c.text, c.reasoning, c.finish_reason) == ("", "hmm", "tool_calls")
    assert [(t.id, t.name, t.arguments) for t in c.tool_calls] == [("c1", "f", "{}")]
    assert result.usage == Usage(10, 5, cached_input_tokens=4, reasoning_tokens=2)


@pytest.mark.parametrize(
    ("finish", "stop_reason", "expected", "sequence"),
    [
        ("stop", None, "stop", None),
        ("stop", 151645, "stop", None),
        ("stop", "END", "stop_sequence", "END"),
        ("length", None, "length", None),
        ("content_filter", None, "content_filter", None),
        ("tool_calls", None, "tool_calls", None),
        ("something_new", None, "stop", None),
    ],
)
def test_finish_reasons(finish: str, stop_reason: Any, expected: str, sequence: str | None) -> None:
    data = {
        "choices": [
            {
                "index": 0,
                "message": {"content": "x", "reasoning": "r"},
                "finish_reason": finish,
                "stop_reason": stop_reason,
            }
        ],
        "usage": USAGE,
    }
    c = decode_result(data, "m", never).first
    assert (c.finish_reason, c.stop_sequence, c.reasoning) == (expected, sequence, "r")
    events = decode(
        [chunk({"content": "x"}, finish, stop_reason=stop_reason), {"choices": [], "usage": USAGE}]
    )
    assert events[-2] == Finish(expected, sequence)  # type: ignore[arg-type]


def test_missing_usage_is_estimated() -> None:
    data = {
        "choices": [{"index": 0, "message": {"content": "hello world"}, "finish_reason": "stop"}]
    }
    result = decode_result(data, "m", lambda: 42)
    assert result.usage == Usage(42, count_text("hello world"), estimated=True)
    events = decode(
        [chunk({"content": "hello "}), chunk({"content": "world"}, "stop")], estimate=lambda: 42
    )
    assert events[-1] == Usage(42, count_text("hello world"), estimated=True)


def test_llamacpp_timings_give_usage() -> None:
    data = {
        "choices": [{"index": 0, "message": {"content": "x"}, "finish_reason": "stop"}],
        "timings": {"cache_n": 3, "prompt_n": 7, "predicted_n": 4},
    }
    assert decode_result(data, "m", never).usage == Usage(10, 4, cached_input_tokens=3)


def test_legacy_completion_result() -> None:
    data = {
        "choices": [
            {"index": 1, "text": "b", "finish_reason": "length"},
            {"index": 0, "text": "a", "finish_reason": "stop", "stop_reason": "\n"},
        ],
        "usage": USAGE,
    }
    result = decode_result(data, "m", never, completion=True)
    assert [(c.index, c.text, c.finish_reason) for c in result.choices] == [
        (0, "a", "stop_sequence"),
        (1, "b", "length"),
    ]


def test_stream_text_reasoning_both_names_and_usage() -> None:
    events = decode(
        [
            chunk({"role": "assistant", "content": ""}),
            chunk({"reasoning_content": "think "}),
            chunk({"reasoning": "more", "reasoning_content": "more"}),
            chunk({"content": "Hi"}),
            chunk({}, "stop"),
            {"choices": [], "usage": USAGE},
        ]
    )
    assert events == [
        ReasoningDelta("think "),
        ReasoningDelta("more"),
        TextDelta("Hi"),
        Finish("stop"),
        Usage(10, 5, cached_input_tokens=4, reasoning_tokens=2),
    ]


def test_finish_on_the_last_content_chunk() -> None:
    events = decode([chunk({"content": "Hi"}, "length"), {"choices": [], "usage": USAGE}])
    assert events[:2] == [TextDelta("Hi"), Finish("length")]


ARGS = '{"city": "Oslo", "days": [1, 2]}'


@pytest.mark.parametrize("cut", range(len(ARGS) + 1))
def test_tool_call_arguments_split_anywhere(cut: int) -> None:
    first, rest = ARGS[:cut], ARGS[cut:]
    chunks = [
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "c0",
                        "type": "function",
                        "function": {"name": "f", "arguments": first},
                    }
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": rest}}]}),
        chunk(
            {"tool_calls": [{"index": 1, "id": "c1", "function": {"name": "g", "arguments": ""}}]}
        ),
        chunk({"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]}),
        chunk({}, "tool_calls"),
        {"choices": [], "usage": USAGE},
    ]
    events = decode(chunks)
    assert events[0] == ToolCallStart(0, "c0", "f")
    ends = [e for e in events if isinstance(e, ToolCallEnd)]
    assert ends == [ToolCallEnd(0), ToolCallEnd(1)]
    # The first call ends before the second starts, and both end before the finish.
    kinds = [type(e).__name__ for e in events]
    assert kinds.index("ToolCallEnd") < kinds.index("ToolCallStart", 1)
    assert events[-2] == Finish("tool_calls")
    result = assemble("m", [e for e in events if not isinstance(e, Usage)])
    assert [(t.id, t.name, t.arguments) for t in result.first.tool_calls] == [
        ("c0", "f", ARGS),
        ("c1", "g", "{}"),
    ]


def test_tool_call_name_after_first_fragment_and_missing_id() -> None:
    events = decode(
        [
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a"'}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": ":1}"}}]}),
            chunk({}, "stop"),
            {"choices": [], "usage": USAGE},
        ]
    )
    start = events[0]
    assert isinstance(start, ToolCallStart)
    assert start.name == "f"
    assert start.id.startswith("call_")
    assert events[1:5] == [
        ToolCallArgs(0, '{"a"'),
        ToolCallArgs(0, ":1}"),
        ToolCallEnd(0),
        Finish("tool_calls"),  # "stop" with calls made means the model called tools
    ]


def test_several_choices_finish_separately() -> None:
    events = decode(
        [
            chunk({"content": "a"}, index=0),
            chunk({"content": "b"}, index=1),
            chunk({}, "stop", index=1),
            chunk({}, "length", index=0),
            {"choices": [], "usage": USAGE},
        ]
    )
    assert events[:4] == [
        TextDelta("a", 0),
        TextDelta("b", 1),
        Finish("stop", None, 1),
        Finish("length", None, 0),
    ]


def test_legacy_completion_chunks() -> None:
    events = decode(
        [
            {"choices": [{"index": 0, "text": "Once", "finish_reason": None}]},
            {"choices": [{"index": 0, "text": " upon", "finish_reason": "length"}]},
            {"choices": [], "usage": USAGE},
        ]
    )
    assert events[:3] == [TextDelta("Once"), TextDelta(" upon"), Finish("length")]


def test_error_payload_mid_stream_raises() -> None:
    d = ChatStreamDecoder("b")
    d.feed(chunk({"content": "a"}))
    with pytest.raises(UpstreamUnavailable, match="engine overloaded"):
        d.feed(
            {"error": {"message": "engine overloaded", "type": "InternalServerError", "code": 500}}
        )


def test_stream_cut_before_finish_is_an_error_but_no_done_marker_is_fine() -> None:
    with pytest.raises(UpstreamUnavailable, match="ended before"):
        decode([chunk({"content": "a"})], done=False)
    events = decode([chunk({"content": "a"}, "stop"), {"choices": [], "usage": USAGE}], done=False)
    assert events[1] == Finish("stop")
    # An empty stream that said [DONE] still finishes its one choice.
    assert decode([{"choices": [], "usage": USAGE}])[0] == Finish("stop")


def test_payloads_are_parsed_and_done_ends_the_stream() -> None:
    d = ChatStreamDecoder("b")
    # Engines may name every field of a delta, with null for those not in this chunk.
    payload = (
        b'{"choices":[{"index":0,"delta":{"content":"Hi","reasoning_content":null,'
        b'"tool_calls":null},"finish_reason":null}],"usage":null}'
    )
    assert d.feed_data(payload) is True
    assert d.feed_data(b'{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}') is True
    assert not d.saw_done
    assert d.feed_data(b"[DONE]") is False
    assert d.saw_done
    assert d.out == [TextDelta("Hi"), Finish("stop")]
    with pytest.raises(UpstreamUnavailable, match="b: sent a body that is not a JSON object"):
        d.feed_data(b'{"choices": [')


def test_reasoning_can_be_withheld() -> None:
    d = ChatStreamDecoder("b", keep_reasoning=False)
    d.feed(chunk({"reasoning": "secret"}))
    d.feed(chunk({"content": "x"}, "stop"))
    assert d.out == [TextDelta("x"), Finish("stop")]


def test_embeddings_float_and_base64() -> None:
    data = {
        "data": [
            {"index": 1, "embedding": "AACAPwAAAEA="},  # [1.0, 2.0] as float32
            {"index": 0, "embedding": [0.5, 0.25]},
        ],
        "usage": {"prompt_tokens": 6, "total_tokens": 6},
    }
    result = decode_embeddings(data, "e", never)
    assert result.vectors == [[0.5, 0.25], [1.0, 2.0]]
    assert result.usage == Usage(6, 0)
    assert decode_embeddings({"data": []}, "e", lambda: 3).usage == Usage(3, estimated=True)


@pytest.mark.parametrize("reported", [10, 10.0])
def test_token_counts_are_whole_numbers(reported: Any) -> None:
    # Counts are charged and stored as integers: a PostgreSQL integer column refuses `10.0`,
    # which would leave the request's audit record pending and its tokens uncharged.
    usage = {
        "prompt_tokens": reported,
        "completion_tokens": reported,
        "prompt_tokens_details": {"cached_tokens": reported},
        "completion_tokens_details": {"reasoning_tokens": reported},
    }
    got = decode([chunk({"content": "x"}, "stop"), {"choices": [], "usage": usage}])[-1]
    assert got == Usage(10, 10, cached_input_tokens=10, reasoning_tokens=10)
    counts = (got.input_tokens, got.output_tokens, got.cached_input_tokens, got.reasoning_tokens)
    assert all(type(v) is int for v in counts)
    timings = {"cache_n": reported, "prompt_n": reported, "predicted_n": reported}
    data = {"choices": [{"index": 0, "message": {"content": "x"}}], "timings": timings}
    assert decode_result(data, "m", never).usage == Usage(20, 10, cached_input_tokens=10)


@pytest.mark.parametrize("count", [10.5, -3, True, "10", None, 2**31, 1e19, float("inf")])
def test_a_count_that_is_not_one_leaves_the_usage_to_the_estimate(count: Any) -> None:
    usage = {"prompt_tokens": count, "completion_tokens": 4}
    estimated = Usage(7, count_text("hello"), estimated=True)
    stream = [chunk({"content": "hello"}, "stop"), {"choices": [], "usage": usage}]
    assert decode(stream, estimate=lambda: 7)[-1] == estimated
    # The details are extras: a bad one is 0, the main counts stand.
    details = {"prompt_tokens": 3, "completion_tokens": 2}
    details["prompt_tokens_details"] = {"cached_tokens": count}
    details["completion_tokens_details"] = count
    stream = [chunk({"content": "x"}, "stop"), {"choices": [], "usage": details}]
    assert decode(stream)[-1] == Usage(3, 2)
    timings = {"prompt_n": count, "predicted_n": 4}
    data = {"choices": [{"index": 0, "message": {"content": "hello"}}], "timings": timings}
    assert decode_result(data, "m", lambda: 7).usage == estimated


def test_a_usage_that_is_not_an_object_is_no_usage() -> None:
    events = decode(
        [chunk({"content": "hello"}, "stop"), {"choices": [], "usage": [1, 2]}],
        estimate=lambda: 7,
    )
    assert events[-1] == Usage(7, count_text("hello"), estimated=True)


@pytest.mark.parametrize(
    "piece",
    [
        {"choices": "abc"},
        {"choices": [1]},
        {"choices": [{"delta": "x"}]},
        {"choices": [{"delta": {"content": 5}}]},
        {"choices": [{"text": ["x"]}]},
        {"choices": [{"index": "a", "delta": {"content": "x"}}]},
        {"choices": [{"delta": {"reasoning_content": {"x": 1}}}]},
        {"choices": [{"delta": {"tool_calls": [1]}}]},
        {"choices": [{"delta": {"tool_calls": [{"function": "f"}]}}]},
        {"choices": [{"delta": {"tool_calls": [{"index": "0", "function": {"name": "f"}}]}}]},
        {"choices": [{"delta": {"tool_calls": [{"id": 5, "function": {"name": "f"}}]}}]},
        {"choices": [{"delta": {"tool_calls": [{"function": {"name": ["f"]}}]}}]},
        {"choices": [{"delta": {"content": "x"}, "finish_reason": [5]}]},
    ],
)
def test_a_chunk_of_an_unexpected_shape_is_the_engine_failing(piece: Any) -> None:
    # Raised as the engine's failure (before the first event the request goes to another
    # backend); a wrong-typed value relayed on would fail later, in the encoder or in the
    # clean-up that writes the audit record and settles the limits.
    d = ChatStreamDecoder("b")
    with pytest.raises(UpstreamUnavailable, match="unexpected shape"):
        d.feed_data(orjson.dumps(piece))
