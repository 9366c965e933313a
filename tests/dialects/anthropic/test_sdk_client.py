"""The unmodified anthropic SDK as the client, over an in-memory transport (no sockets).

The transport stands in for the http layer: it decodes the SDK's real request bodies with this
dialect and answers with this dialect's encoders, so the SDK's own request building, response
parsing and stream accumulation are all exercised end to end.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anthropic
import httpx2
import pytest

from mindrouter.canonical import (
    ChatRequest,
    ChatResult,
    Choice,
    Done,
    Finish,
    ReasoningDelta,
    StreamEvent,
    StreamFailed,
    TextDelta,
    ToolCall,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from mindrouter.dialects.anthropic import (
    MessagesStreamEncoder,
    decode_count_tokens_request,
    decode_messages_request,
    encode_count_tokens_response,
    encode_error,
    encode_messages_response,
    encode_model_list,
    verify_thinking,
)
from mindrouter.errors import Overloaded, RateLimited, UpstreamUnavailable

KEY = b"sdk-key"
ARGS = '{"city": "Oslo", "days": 3}'


def sdk(handler: Callable[[httpx2.Request], httpx2.Response]) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        api_key="mr2_test",
        base_url="http://gateway/anthropic",
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
        max_retries=0,
    )


def streaming(events: list[StreamEvent], seen: list[ChatRequest]) -> Callable[..., httpx2.Response]:
    def handler(request: httpx2.Request) -> httpx2.Response:
        assert request.url.path == "/anthropic/v1/messages"
        seen.append(decode_messages_request(json.loads(request.content), signing_key=KEY))
        enc = MessagesStreamEncoder(
            message_id="msg_sdk", model="m", input_tokens_hint=lambda: 9, signing_key=KEY
        )
        body = enc.start() + enc.ping() + b"".join(enc.encode(e) for e in events)
        return httpx2.Response(200, headers={"content-type": enc.content_type}, content=body)

    return handler


TOOLS: list[Any] = [
    {
        "name": "get_weather",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]


def test_stream_helper_builds_the_final_message() -> None:
    events: list[StreamEvent] = [
        ReasoningDelta("Oslo, "),
        ReasoningDelta("so call the tool."),
        TextDelta("Let me check."),
        ToolCallStart(index=0, id="chatcmpl-tool-1", name="get_weather"),
        *(ToolCallArgs(index=0, fragment=ARGS[i : i + 5]) for i in range(0, len(ARGS), 5)),
        ToolCallEnd(index=0),
        Finish("tool_calls"),
        Done(Usage(input_tokens=40, output_tokens=17)),
    ]
    seen: list[ChatRequest] = []
    client = sdk(streaming(events, seen))
    with client.messages.stream(
        model="m",
        max_tokens=4000,
        messages=[{"role": "user", "content": "Weather in Oslo?"}],
        tools=TOOLS,
        thinking={"type": "enabled", "budget_tokens": 2048},
    ) as stream:
        texts = list(stream.text_stream)
        final = stream.get_final_message()
    assert seen[0].reasoning.budget_tokens == 2048 and seen[0].stream is True
    assert texts == ["Let me check."]
    thinking, text, tool = final.content
    assert thinking.type == "thinking" and verify_thinking(
        thinking.thinking, thinking.signature, KEY
    )
    assert text.type == "text" and text.text == "Let me check."
    assert tool.type == "tool_use" and tool.id == "chatcmpl-tool-1"
    assert tool.input == json.loads(ARGS)
    assert final.stop_reason == "tool_use"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (40, 17)

    # Next turn: the SDK sends the final message back with the tool result; it decodes.
    with client.messages.stream(
        model="m",
        max_tokens=4000,
        messages=[
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": final.content},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": tool.id, "content": "4°C"}],
            },
        ],
        tools=TOOLS,
    ) as stream:
        stream.get_final_message()
    replayed = seen[1].messages
    assert replayed[1].reasoning == "Oslo, so call the tool."
    assert replayed[2].role == "tool" and replayed[2].name == "get_weather"


def test_error_event_raises_in_the_client() -> None:
    events: list[StreamEvent] = [TextDelta("partial"), StreamFailed(Overloaded("Overloaded"))]
    client = sdk(streaming(events, []))
    request: Any = {"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "x"}]}
    with (
        pytest.raises(anthropic.APIStatusError) as caught,
        client.messages.stream(**request) as stream,
    ):
        stream.get_final_message()
    assert "overloaded_error" in str(caught.value.body)


def test_create_count_tokens_and_models() -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        path = request.url.path
        if path == "/anthropic/v1/models":
            return httpx2.Response(
                200, json=encode_model_list(["m", "n"], created_at="2025-06-01T00:00:00Z")
            )
        body = json.loads(request.content)
        if path == "/anthropic/v1/messages/count_tokens":
            decode_count_tokens_request(body, signing_key=KEY)
            return httpx2.Response(200, json=encode_count_tokens_response(14))
        decode_messages_request(body, signing_key=KEY)
        calls = [ToolCall(id="call_1", name="get_weather", arguments=ARGS)]
        result = ChatResult(
            model="m",
            choices=[
                Choice(text="Sure.", reasoning="r", tool_calls=calls, finish_reason="tool_calls")
            ],
            usage=Usage(input_tokens=12, output_tokens=5),
        )
        return httpx2.Response(
            200,
            json=encode_messages_response(result, message_id="msg_x", model="m", signing_key=KEY),
        )

    client = sdk(handler)
    messages: list[Any] = [{"role": "user", "content": "hi"}]
    message = client.messages.create(model="m", max_tokens=256, messages=messages, tools=TOOLS)
    assert [b.type for b in message.content] == ["thinking", "text", "tool_use"]
    assert message.content[2].input == json.loads(ARGS)  # type: ignore[union-attr]
    assert client.messages.count_tokens(model="m", messages=messages).input_tokens == 14
    assert [m.id for m in client.models.list()] == ["m", "n"]


@pytest.mark.parametrize(
    ("error", "status", "sdk_class"),
    [
        (RateLimited("slow down"), 429, anthropic.RateLimitError),
        (Overloaded("busy"), 529, anthropic.OverloadedError),
        (UpstreamUnavailable("down"), 502, anthropic.InternalServerError),
    ],
)
def test_error_bodies_become_the_right_sdk_exception(
    error: Any, status: int, sdk_class: type[Exception]
) -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(status, json=encode_error(error, request_id="req_1"))

    with pytest.raises(sdk_class) as caught:
        sdk(handler).messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}]
        )
    assert error.message in str(caught.value)
