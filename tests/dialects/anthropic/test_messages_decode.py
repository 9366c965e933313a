"""Golden decodes: Messages request bodies and the canonical requests they must become."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from mindrouter.canonical import (
    ChatRequest,
    ImagePart,
    Message,
    Reasoning,
    TextPart,
    Tool,
    ToolCall,
)
from mindrouter.dialects.anthropic import (
    decode_messages_request,
    sign_thinking,
)

KEY = b"test-key"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 8
WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}


def body(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "model": "m",
        "max_tokens": 512,
        "messages": [{"role": "user", "content": "hi"}],
    }
    base.update(fields)
    return base


def decode(**fields: Any) -> ChatRequest:
    return decode_messages_request(body(**fields), signing_key=KEY)


def test_minimal_request() -> None:
    req = decode()
    assert req.model == "m"
    assert req.sampling.max_tokens == 512
    assert req.messages == [Message(role="user", content=[TextPart("hi")])]
    assert req.reasoning == Reasoning()
    assert req.tools == [] and req.tool_choice is None
    assert req.stream is False and req.user is None and req.response_format is None


def test_system_string() -> None:
    req = decode(system="Be brief.")
    assert req.messages[0] == Message(role="system", content=[TextPart("Be brief.")])
    assert req.messages[1].role == "user"


def test_system_blocks_ignore_cache_control() -> None:
    system = [
        {"type": "text", "text": "You are a bot.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": " Be brief."},
    ]
    req = decode(system=system)
    assert req.messages[0] == Message(
        role="system", content=[TextPart("You are a bot."), TextPart(" Be brief.")]
    )


@pytest.mark.parametrize("system", ["", []])
def test_empty_system_adds_no_message(system: object) -> None:
    assert [m.role for m in decode(system=system).messages] == ["user"]


def test_consecutive_same_role_turns_merge() -> None:
    messages = [
        {"role": "user", "content": "a"},
        {"role": "user", "content": [{"type": "text", "text": "b"}]},
        {"role": "assistant", "content": "c"},
        {"role": "assistant", "content": [{"type": "text", "text": "d"}]},
        {"role": "user", "content": "e"},
    ]
    req = decode(messages=messages)
    assert req.messages == [
        Message(role="user", content=[TextPart("a"), TextPart("b")]),
        Message(role="assistant", content=[TextPart("c"), TextPart("d")]),
        Message(role="user", content=[TextPart("e")]),
    ]


def test_trailing_assistant_turn_is_kept_as_prefill() -> None:
    messages = [
        {"role": "user", "content": "Say a colour"},
        {"role": "assistant", "content": "Blu"},
    ]
    req = decode(messages=messages)
    assert req.messages[-1] == Message(role="assistant", content=[TextPart("Blu")])


def test_images_base64_and_url() -> None:
    content = [
        {"type": "text", "text": "Compare"},
        {
            "type": "image",
            "source": {
                "type": "base64",
                "media_type": "image/png",
                "data": base64.b64encode(PNG).decode(),
            },
        },
        {"type": "image", "source": {"type": "url", "url": "https://example.org/cat.jpg"}},
    ]
    req = decode(messages=[{"role": "user", "content": content}])
    assert req.messages[0].content == [
        TextPart("Compare"),
        ImagePart(data=PNG, media_type="image/png"),
        ImagePart(url="https://example.org/cat.jpg"),
    ]
    assert req.modality == "multimodal"


def weather_tool() -> dict[str, Any]:
    return {"name": "get_weather", "description": "Weather now", "input_schema": WEATHER_SCHEMA}


def test_tool_round_trip() -> None:
    messages = [
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {
                    "type": "tool_use",
                    "id": "toolu_01A",
                    "name": "get_weather",
                    "input": {"city": "Oslo", "unit": "°C"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01A", "content": "4°C, rain"}
            ],
        },
    ]
    req = decode(messages=messages, tools=[weather_tool()])
    assert req.tools == [
        Tool(name="get_weather", description="Weather now", parameters=WEATHER_SCHEMA)
    ]
    assistant, tool = req.messages[1], req.messages[2]
    assert assistant.content == [TextPart("Checking.")]
    # Compact JSON, non-ASCII kept as is: what an OpenAI-style backend expects as arguments.
    assert assistant.tool_calls == [
        ToolCall(id="toolu_01A", name="get_weather", arguments='{"city":"Oslo","unit":"°C"}')
    ]
    assert tool == Message(
        role="tool", content=[TextPart("4°C, rain")], tool_call_id="toolu_01A", name="get_weather"
    )
    assert len(req.messages) == 3


def test_several_tool_results_come_before_the_rest_of_the_turn() -> None:
    messages = [
        {"role": "user", "content": "Oslo and Rome?"},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "call_1",
                    "name": "get_weather",
                    "input": {"city": "Oslo"},
                },
                {"type": "tool_use", "id": "call_2", "name": "get_time", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Here you go."},
                {"type": "tool_result", "tool_use_id": "call_2", "content": "12:00"},
                {
                    "type": "tool_result",
                    "tool_use_id": "call_1",
                    "is_error": True,
                    "content": [
                        {"type": "text", "text": "station offline"},
                        {
                            "type": "image",
                            "source": {
                                "type": "base64",
                                "media_type": "image/png",
                                "data": base64.b64encode(PNG).decode(),
                            },
                        },
                    ],
                },
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1"}]},
    ]
    req = decode(messages=messages)
    assert [m.role for m in req.messages] == ["user", "assistant", "tool", "tool", "tool", "user"]
    second, first, empty, rest = req.messages[2:]
    assert (second.tool_call_id, second.name, second.is_error) == ("call_2", "get_time", False)
    assert second.content == [TextPart("12:00")]
    assert (first.tool_call_id, first.name, first.is_error) == ("call_1", "get_weather", True)
    assert first.content == [
        TextPart("station offline"),
        ImagePart(data=PNG, media_type="image/png"),
    ]
    # The merged fourth message's result is still placed before the turn's text.
    assert (empty.tool_call_id, empty.content) == ("call_1", [])
    assert rest == Message(role="user", content=[TextPart("Here you go.")])


@pytest.mark.parametrize("signature", ["valid", "EqQBforeign", None])
def test_replayed_thinking_becomes_reasoning_whatever_its_signature(signature: str | None) -> None:
    thought = "The user wants Oslo."
    block: dict[str, Any] = {"type": "thinking", "thinking": thought}
    if signature == "valid":
        block["signature"] = sign_thinking(thought, KEY)
    elif signature is not None:
        block["signature"] = signature
    messages = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": [
                block,
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}},
                {"type": "thinking", "thinking": "Then answer.", "signature": "x"},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}],
        },
    ]
    req = decode(messages=messages)
    assistant = req.messages[1]
    assert assistant.reasoning == "The user wants Oslo.\n\nThen answer."
    assert assistant.content == []
    assert [c.id for c in assistant.tool_calls] == ["toolu_1"]
