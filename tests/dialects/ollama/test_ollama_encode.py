"""Non-streamed Ollama replies, checked against golden objects and the ollama SDK's models."""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any

import ollama
import pytest

from mindrouter.canonical import (
    ChatResult,
    Choice,
    EmbeddingResult,
    FinishReason,
    ToolCall,
    Usage,
)
from mindrouter.dialects.ollama import (
    Timings,
    encode_chat_load_response,
    encode_chat_response,
    encode_embed_response,
    encode_embeddings_response,
    encode_error,
    encode_generate_load_response,
    encode_generate_response,
    format_rfc3339,
)
from mindrouter.errors import InvalidRequest, ModelNotFound, Overloaded, UpstreamTimeout

CREATED = "2026-01-01T10:00:00.500000000Z"
TIMINGS = Timings(total_ns=812_000_000, load_ns=0, prompt_eval_ns=40_000_000, eval_ns=700_000_000)
USAGE = Usage(input_tokens=31, output_tokens=12)
METRICS = {
    "total_duration": 812_000_000,
    "load_duration": 0,
    "prompt_eval_count": 31,
    "prompt_eval_duration": 40_000_000,
    "eval_count": 12,
    "eval_duration": 700_000_000,
}


def result(**choice: Any) -> ChatResult:
    return ChatResult(model="backend-name", choices=[Choice(**choice)], usage=USAGE)


def roundtrip(body: dict[str, Any]) -> dict[str, Any]:
    """What a client receives: the body as JSON text, parsed again."""
    parsed: dict[str, Any] = json.loads(json.dumps(body))
    return parsed


def test_chat_response_golden() -> None:
    body = encode_chat_response(
        result(text="4°C and raining.", reasoning="The user asked…"),
        model="qwen3:8b",
        created_at=CREATED,
        timings=TIMINGS,
    )
    assert body == {
        "model": "qwen3:8b",
        "created_at": CREATED,
        "message": {
            "role": "assistant",
            "content": "4°C and raining.",
            "thinking": "The user asked…",
        },
        "done": True,
        "done_reason": "stop",
        **METRICS,
    }
    sdk = ollama.ChatResponse.model_validate(roundtrip(body))
    assert sdk.message.thinking == "The user asked…"
    assert sdk.eval_count == 12


def test_chat_response_without_reasoning_has_no_thinking_key() -> None:
    body = encode_chat_response(result(text="hi"), model="m", created_at=CREATED, timings=TIMINGS)
    assert body["message"] == {"role": "assistant", "content": "hi"}


def test_chat_response_with_tool_calls() -> None:
    calls = [
        ToolCall(id="call_a", name="get_weather", arguments='{"city": "Oslo", "days": [1, 2]}'),
        ToolCall(id="call_b", name="now", arguments=""),
        ToolCall(id="call_c", name="broken", arguments='{"city": "Os'),
        ToolCall(id="call_d", name="listy", arguments="[1, 2]"),
    ]
    body = encode_chat_response(
        result(tool_calls=calls, finish_reason="tool_calls"),
        model="m",
        created_at=CREATED,
        timings=TIMINGS,
    )
    assert body["done_reason"] == "stop"
    assert body["message"]["tool_calls"] == [
        {
            "id": "call_a",
            "function": {
                "index": 0,
                "name": "get_weather",
                "arguments": {"city": "Oslo", "days": [1, 2]},
            },
        },
        {"id": "call_b", "function": {"index": 1, "name": "now", "arguments": {}}},
        {
            "id": "call_c",
            "function": {"index": 2, "name": "broken", "arguments": {"_raw": '{"city": "Os'}},
        },
        {
            "id": "call_d",
            "function": {"index": 3, "name": "listy", "arguments": {"_raw": "[1, 2]"}},
        },
    ]
    sdk = ollama.ChatResponse.model_validate(roundtrip(body))
    assert sdk.message.tool_calls is not None
    assert sdk.message.tool_calls[0].function.arguments == {"city": "Oslo", "days": [1, 2]}


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("stop", "stop"),
        ("stop_sequence", "stop"),
        ("tool_calls", "stop"),
        ("length", "length"),
        ("context_exceeded", "length"),
        ("content_filter", "stop"),
        ("error", "stop"),
    ],
)
def test_done_reason_mapping(reason: FinishReason, expected: str) -> None:
    body = encode_chat_response(
        result(text="x", finish_reason=reason), model="m", created_at=CREATED, timings=TIMINGS
    )
    assert body["done_reason"] == expected


def test_generate_response_golden() -> None:
    body = encode_generate_response(
        result(text="Blue light scatters.", reasoning="Rayleigh", finish_reason="length"),
        model="llama3.2",
        created_at=CREATED,
        timings=TIMINGS,
    )
    assert body == {
        "model": "llama3.2",
        "created_at": CREATED,
        "response": "Blue light scatters.",
        "thinking": "Rayleigh",
        "done": True,
        "done_reason": "length",
        "context": [],
        **METRICS,
    }
    sdk = ollama.GenerateResponse.model_validate(roundtrip(body))
    assert (sdk.response, sdk.thinking, sdk.context) == ("Blue light scatters.", "Rayleigh", [])


def test_load_responses_validate() -> None:
    chat = encode_chat_load_response("load", model="m", created_at=CREATED)
    assert ollama.ChatResponse.model_validate(chat).done_reason == "load"
    gen = encode_generate_load_response("unload", model="m", created_at=CREATED)
    assert ollama.GenerateResponse.model_validate(gen).done_reason == "unload"


def test_embed_vectors_are_l2_normalised() -> None:
    embedding = EmbeddingResult(
        model="e", vectors=[[3.0, 4.0], [0.0, 0.0], [1e-3, -2e-3, 2e-3]], usage=Usage(7)
    )
    body = encode_embed_response(embedding, model="nomic", timings=TIMINGS)
    assert body["embeddings"][0] == [0.6, 0.8]
    assert body["embeddings"][1] == [0.0, 0.0]
    assert math.isclose(math.hypot(*body["embeddings"][2]), 1.0)
    assert (body["model"], body["prompt_eval_count"], body["total_duration"]) == (
        "nomic",
        7,
        812_000_000,
    )
    assert embedding.vectors[0] == [3.0, 4.0]  # the result itself is left alone
    ollama.EmbedResponse.model_validate(roundtrip(body))


def test_legacy_embeddings_are_not_normalised() -> None:
    body = encode_embeddings_response(
        EmbeddingResult(model="e", vectors=[[3.0, 4.0]], usage=Usage())
    )
    assert body == {"embedding": [3.0, 4.0]}
    assert ollama.EmbeddingsResponse.model_validate(body).embedding == [3.0, 4.0]
    empty = encode_embeddings_response(EmbeddingResult(model="e", vectors=[], usage=Usage()))
    assert ollama.EmbeddingsResponse.model_validate(empty).embedding == []


def test_errors_are_plain_strings() -> None:
    assert encode_error(ModelNotFound("qwen9:1t")) == {
        "error": 'model "qwen9:1t" not found, try pulling it first'
    }
    assert encode_error(InvalidRequest("think: must be true or false", "think")) == {
        "error": "think: must be true or false"
    }
    assert encode_error(Overloaded("no capacity")) == {"error": "no capacity"}
    body = encode_error(UpstreamTimeout("backend timed out"))
    # The SDK's own parsing of an error body: the string under "error" becomes the message.
    assert ollama.ResponseError(json.dumps(body), 504).error == "backend timed out"


@pytest.mark.parametrize(
    ("epoch", "text"),
    [
        (0, "1970-01-01T00:00:00.000000000Z"),
        (1767261600.5, "2026-01-01T10:00:00.500000000Z"),
        (1767261900.25, "2026-01-01T10:05:00.250000000Z"),
        (-0.25, "1969-12-31T23:59:59.750000000Z"),
    ],
)
def test_format_rfc3339(epoch: float, text: str) -> None:
    assert format_rfc3339(epoch) == text
    assert datetime.fromisoformat(text).timestamp() == epoch


def test_format_rfc3339_keeps_what_a_float_holds() -> None:
    # A float Unix time resolves well under a microsecond; the last digits are float noise.
    assert format_rfc3339(1767261600.123456).startswith("2026-01-01T10:00:00.123456")
    assert format_rfc3339(1767261600.9999999999) == "2026-01-01T10:00:01.000000000Z"


def test_timings_from_marks() -> None:
    assert Timings.from_marks(start=10.0, first_token=10.25, end=12.0) == Timings(
        total_ns=2_000_000_000, load_ns=0, prompt_eval_ns=250_000_000, eval_ns=1_750_000_000
    )
    assert Timings.from_marks(start=10.0, first_token=None, end=11.0, load=0.5) == Timings(
        total_ns=1_000_000_000, load_ns=500_000_000, prompt_eval_ns=1_000_000_000, eval_ns=0
    )
    # Readings out of order never give negative durations.
    assert Timings.from_marks(start=10.0, first_token=9.0, end=8.0) == Timings()
