"""Whole replies, token counts, model lists, errors and signatures, checked with SDK models."""

from __future__ import annotations

from typing import Any

import pytest
from anthropic.types import Message as SDKMessage
from anthropic.types import MessageTokensCount, ModelInfo
from anthropic.types.shared import ErrorResponse

from mindrouter.canonical import ChatResult, Choice, FinishReason, ToolCall, Usage
from mindrouter.dialects.anthropic import (
    decode_messages_request,
    encode_count_tokens_response,
    encode_error,
    encode_messages_response,
    encode_model_list,
    sign_thinking,
    verify_thinking,
)
from mindrouter.errors import (
    ContextLengthExceeded,
    Forbidden,
    InternalError,
    InvalidRequest,
    MindRouterError,
    ModelNotFound,
    NotFound,
    Overloaded,
    PayloadTooLarge,
    RateLimited,
    Unauthenticated,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
)

KEY = b"response-key"


def result(**choice: Any) -> ChatResult:
    usage = choice.pop("usage", Usage(input_tokens=41, output_tokens=22))
    return ChatResult(model="backend-model", choices=[Choice(**choice)], usage=usage)


def encode(res: ChatResult, **options: Any) -> dict[str, Any]:
    body = encode_messages_response(res, message_id="msg_01", model="m", signing_key=KEY, **options)
    SDKMessage.model_validate(body)
    return body


def test_text_reply() -> None:
    body = encode(result(text="It is 4°C."))
    assert body == {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": "It is 4°C."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 41,
            "output_tokens": 22,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def test_thinking_text_and_tools_in_order() -> None:
    calls = [
        ToolCall(id="call_abc", name="get_weather", arguments='{"city": "Oslo"}'),
        ToolCall(id="chatcmpl-tool-9", name="broken", arguments='{"city": "Os'),
        ToolCall(id="call_x", name="noargs", arguments=""),
        ToolCall(id="call_y", name="listy", arguments="[1, 2]"),
    ]
    body = encode(
        result(
            reasoning="User wants Oslo.",
            text="Checking.",
            tool_calls=calls,
            finish_reason="tool_calls",
        )
    )
    thinking, text, *tools = body["content"]
    assert thinking["type"] == "thinking" and thinking["thinking"] == "User wants Oslo."
    assert verify_thinking("User wants Oslo.", thinking["signature"], KEY)
    assert text == {"type": "text", "text": "Checking."}
    assert [(t["id"], t["input"]) for t in tools] == [
        ("call_abc", {"city": "Oslo"}),
        ("chatcmpl-tool-9", {"_raw": '{"city": "Os'}),
        ("call_x", {}),
        ("call_y", {"_raw": "[1, 2]"}),
    ]
    assert body["stop_reason"] == "tool_use"


def test_reply_replays_as_the_next_turn() -> None:
    calls = [ToolCall(id="call_1", name="f", arguments='{"a": 1}')]
    body = encode(result(reasoning="hmm", text="ok", tool_calls=calls, finish_reason="tool_calls"))
    message = SDKMessage.model_validate(body)
    request = {
        "model": "m",
        "max_tokens": 100,
        "messages": [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": [b.model_dump(exclude_none=True) for b in message.content],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "1"}],
            },
        ],
    }
    req = decode_messages_request(request, signing_key=KEY)
    assert req.messages[1].reasoning == "hmm"
    assert req.messages[1].tool_calls == [ToolCall(id="call_1", name="f", arguments='{"a":1}')]
    assert req.messages[2].name == "f"


def test_omitted_reasoning_and_empty_reply() -> None:
    body = encode(result(reasoning="secret", text="visible"), return_reasoning=False)
    assert [b["type"] for b in body["content"]] == ["text"]
    assert encode(result(text="", finish_reason="length"))["content"] == []


@pytest.mark.parametrize(
    ("reason", "stop_reason"),
    [
        ("stop", "end_turn"),
        ("length", "max_tokens"),
        ("tool_calls", "tool_use"),
        ("content_filter", "refusal"),
        ("context_exceeded", "model_context_window_exceeded"),
        ("error", "end_turn"),
    ],
)
def test_stop_reasons(reason: FinishReason, stop_reason: str) -> None:
    body = encode(result(text="x", finish_reason=reason, stop_sequence="ignored"))
    assert (body["stop_reason"], body["stop_sequence"]) == (stop_reason, None)


def test_stop_sequence_names_the_string() -> None:
    body = encode(result(text="x", finish_reason="stop_sequence", stop_sequence="END"))
    assert (body["stop_reason"], body["stop_sequence"]) == ("stop_sequence", "END")


def test_cached_tokens_are_not_input_tokens() -> None:
    body = encode(
        result(text="x", usage=Usage(input_tokens=100, output_tokens=7, cached_input_tokens=60))
    )
    assert body["usage"] == {
        "input_tokens": 40,
        "output_tokens": 7,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 60,
    }


def test_count_tokens() -> None:
    assert MessageTokensCount.model_validate(encode_count_tokens_response(14)).input_tokens == 14


def test_model_list() -> None:
    page = encode_model_list(["llama-3", "qwen"], created_at="2025-01-01T00:00:00Z")
    assert page["has_more"] is False
    assert (page["first_id"], page["last_id"]) == ("llama-3", "qwen")
    models = [ModelInfo.model_validate(item) for item in page["data"]]
    assert [(m.id, m.display_name, m.type) for m in models] == [
        ("llama-3", "llama-3", "model"),
        ("qwen", "qwen", "model"),
    ]
    empty = encode_model_list([], created_at="2025-01-01T00:00:00Z")
    assert empty == {"data": [], "has_more": False, "first_id": None, "last_id": None}


@pytest.mark.parametrize(
    ("error", "error_type"),
    [
        (InvalidRequest("bad", "model"), "invalid_request_error"),
        (ContextLengthExceeded("long"), "invalid_request_error"),
        (UpstreamRejected("no", status=400), "invalid_request_error"),
        (Unauthenticated("who"), "authentication_error"),
        (Forbidden("no"), "permission_error"),
        (NotFound("gone"), "not_found_error"),
        (ModelNotFound("x"), "not_found_error"),
        (PayloadTooLarge("big"), "request_too_large"),
        (RateLimited("slow"), "rate_limit_error"),
        (Overloaded("busy"), "overloaded_error"),
        (UpstreamUnavailable("down"), "api_error"),
        (UpstreamTimeout("late"), "timeout_error"),
        (InternalError("bug"), "api_error"),
        (MindRouterError("plain"), "api_error"),
    ],
)
def test_error_bodies(error: MindRouterError, error_type: str) -> None:
    body = encode_error(error, request_id="req_1")
    assert body == {
        "type": "error",
        "error": {"type": error_type, "message": error.message},
        "request_id": "req_1",
    }
    if error_type != "request_too_large":  # a documented type the SDK's union does not list
        ErrorResponse.model_validate(body)


def test_signatures() -> None:
    signature = sign_thinking("a thought", KEY)
    assert signature.startswith("gw1:")
    assert verify_thinking("a thought", signature, KEY)
    assert not verify_thinking("a thought!", signature, KEY)
    assert not verify_thinking("a thought", signature, b"other-key")
    assert not verify_thinking("a thought", "EqQBnot-ours", KEY)
    assert not verify_thinking("a thought", "gw1:ünïcode", KEY)
    lone = "\ud800 odd text"
    assert verify_thinking(lone, sign_thinking(lone, KEY), KEY)
