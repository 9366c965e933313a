"""Feature matrix of the Anthropic entry: every feature × every backend type × streamed or not.

Every reply is validated with the SDK's strict models: `Message` for whole replies, and each
stream event with `RawMessageStreamEvent` before the events are folded into a `Message` (see
`fold_events` for the sequence rules). docs/compatibility.md lists what each test backs.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from mindrouter.dialects.anthropic import verify_thinking
from tests.gateway.stack import ENGINES, Stack
from tests.gateway.test_anthropic_entry import (
    HTTP,
    MESSAGES,
    PNG,
    SIGNING_KEY,
    WEATHER_TOOL,
    last_backend_request,
    post_message,
    run,
    stream_message,
    text_of,
)

pytestmark = [
    pytest.mark.parametrize("engine", ENGINES),
    pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"]),
]

# Engines that report which stop string matched: vLLM's `stop_reason` (the "openai" engine is
# the vLLM simulator, which sends it too). llama.cpp's OpenAI routes and Ollama do not say.
REPORTS_STOP_STRING = {"vllm": True, "openai": True, "llamacpp": False, "ollama": False}


def _user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def _plain(content: Any) -> str:
    """The text of an OpenAI/Ollama message content: a string or a list of parts."""
    if isinstance(content, str):
        return content
    return "".join(part["text"] for part in content if part.get("type") == "text")


def test_plain_text(stack: Stack, engine: str, stream: bool) -> None:
    m = run(stack, {"model": f"chat-{engine}", "max_tokens": 256, "messages": _user("Hi")}, stream)
    assert m.model == f"chat-{engine}" and m.role == "assistant" and m.type == "message"
    assert [b.type for b in m.content] == ["text"]
    assert m.stop_reason == "end_turn" and m.stop_sequence is None
    # The simulator spends one token per word.
    assert m.usage.output_tokens == len(text_of(m).split()) > 3
    assert m.usage.input_tokens > 0
    assert m.usage.cache_read_input_tokens == 0 and m.usage.cache_creation_input_tokens == 0


def test_same_reply_everywhere(stack: Stack, engine: str, stream: bool) -> None:
    """The same conversation gets the same reply and usage streamed, unstreamed and through the
    OpenAI entry: the dialect changes the wire, not the generation."""
    body = {"model": f"chat-{engine}", "max_tokens": 256, "messages": _user("Same twice")}
    whole = post_message(stack, body)
    if stream:
        streamed = stream_message(stack, body)
        assert text_of(streamed.message) == text_of(whole)
        assert streamed.message.usage.output_tokens == whole.usage.output_tokens
        assert streamed.message.usage.input_tokens == whole.usage.input_tokens
        # message_start carries an estimate; message_delta the backend's count, cumulative.
        assert streamed.start_usage["input_tokens"] > 0
        assert streamed.events[-2]["usage"]["output_tokens"] == whole.usage.output_tokens
    else:
        r = HTTP.post(stack.url + "/v1/chat/completions", json=body, headers=stack.auth)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == text_of(whole)
        assert r.json()["usage"]["completion_tokens"] == whole.usage.output_tokens


def test_multi_turn_with_system(stack: Stack, engine: str, stream: bool) -> None:
    one = run(stack, {"model": f"chat-{engine}", "max_tokens": 64, "messages": _user("Hi")}, stream)
    body = {
        "model": f"chat-{engine}",
        "max_tokens": 64,
        "system": [
            {"type": "text", "text": "You are terse."},
            {"type": "text", "text": "Answer in English.", "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": [{"type": "text", "text": "Hello there."}]},
            {"role": "user", "content": "Tell me more"},
            # Consecutive turns of one role are merged, as the Messages API does.
            {"role": "user", "content": [{"type": "text", "text": "about rivers and stones."}]},
        ],
    }
    many = run(stack, body, stream)
    assert text_of(many) and many.stop_reason == "end_turn"
    assert many.usage.input_tokens > one.usage.input_tokens + 10
    _, sent = last_backend_request(stack, engine)
    roles = [m["role"] for m in sent["messages"]]
    assert roles == ["system", "user", "assistant", "user"]
    system = _plain(sent["messages"][0]["content"])
    assert "You are terse." in system and "Answer in English." in system
    last = _plain(sent["messages"][-1]["content"])
    assert "Tell me more" in last and "about rivers and stones." in last


def test_image(stack: Stack, engine: str, stream: bool) -> None:
    content = [
        {"type": "text", "text": "What is this?"},
        {
            "type": "image",
            "source": {
                "type": "base64",
                "media_type": "image/png",
                "data": base64.b64encode(PNG).decode(),
            },
        },
    ]
    messages = [{"role": "user", "content": content}]
    m = run(stack, {"model": f"vision-{engine}", "max_tokens": 64, "messages": messages}, stream)
    assert text_of(m).startswith("(images:1)")
    _, sent = last_backend_request(stack, engine)
    if engine == "ollama":
        assert base64.b64decode(sent["messages"][-1]["images"][0]) == PNG
    else:
        parts = sent["messages"][-1]["content"]
        urls = [p["image_url"]["url"] for p in parts if p["type"] == "image_url"]
        assert urls == ["data:image/png;base64," + base64.b64encode(PNG).decode()]
    # A model without vision refuses images before anything is streamed.
    refused = HTTP.post(
        stack.url + MESSAGES,
        json={"model": f"chat-{engine}", "max_tokens": 64, "messages": messages, "stream": stream},
        headers=stack.auth,
    )
    assert refused.status_code == 400
    assert refused.json()["error"]["type"] == "invalid_request_error"


def test_tool_call(stack: Stack, engine: str, stream: bool) -> None:
    body = {
        "model": f"chat-{engine}",
        "max_tokens": 256,
        "tools": [WEATHER_TOOL],
        "messages": _user("Weather in Oslo?"),
    }
    if stream:
        streamed = stream_message(stack, body)
        m = streamed.message
        # OpenAI-style engines stream the arguments in pieces; Ollama sends each call whole.
        assert streamed.tool_pieces[0] == 1 if engine == "ollama" else streamed.tool_pieces[0] >= 3
    else:
        m = post_message(stack, body)
    assert m.stop_reason == "tool_use"
    (call,) = m.content
    assert call.type == "tool_use" and call.name == "get_weather" and call.id
    assert isinstance(call.input, dict)
    assert isinstance(call.input["city"], str) and isinstance(call.input["days"], int)
    assert call.input["unit"] in ("celsius", "fahrenheit")
    assert m.usage.output_tokens > 0


@pytest.mark.parametrize("choice", ["any", "tool", "none"])
def test_tool_choice(stack: Stack, engine: str, stream: bool, choice: str) -> None:
    other = {"name": "get_time", "input_schema": {"type": "object", "properties": {}}}
    tool_choice: dict[str, Any] = {"type": choice}
    if choice == "tool":
        tool_choice["name"] = "get_time"
    body = {
        "model": f"chat-{engine}",
        "max_tokens": 256,
        "tools": [WEATHER_TOOL, other],
        "tool_choice": tool_choice,
        "messages": _user("What now?"),
    }
    m = run(stack, body, stream)
    if choice == "none":
        assert m.stop_reason == "end_turn" and [b.type for b in m.content] == ["text"]
    else:
        assert m.stop_reason == "tool_use"
        (call,) = m.content
        assert call.type == "tool_use"
        assert call.name == ("get_time" if choice == "tool" else "get_weather")


def test_tool_result(stack: Stack, engine: str, stream: bool) -> None:
    question = {"role": "user", "content": "Weather in Oslo?"}
    first = post_message(
        stack,
        {
            "model": f"chat-{engine}",
            "max_tokens": 256,
            "tools": [WEATHER_TOOL],
            "messages": [question],
        },
    )
    call = first.content[0]
    assert call.type == "tool_use"
    body = {
        "model": f"chat-{engine}",
        "max_tokens": 256,
        "tools": [WEATHER_TOOL],
        "messages": [
            question,
            {"role": "assistant", "content": [call.model_dump(exclude_none=True)]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": call.id,
                        "content": [{"type": "text", "text": '{"temp_c": 4}'}],
                    }
                ],
            },
        ],
    }
    m = run(stack, body, stream)
    assert m.stop_reason == "end_turn" and text_of(m)
    _, sent = last_backend_request(stack, engine)
    calls = sent["messages"][-2]["tool_calls"]
    assert calls[0]["function"]["name"] == "get_weather"
    result = sent["messages"][-1]
    assert result["role"] == "tool" and _plain(result["content"]) == '{"temp_c": 4}'
    if engine == "ollama":
        assert result["tool_name"] == "get_weather"
    else:
        assert result["tool_call_id"] == call.id == calls[0]["id"]
        assert json.loads(calls[0]["function"]["arguments"]) == call.input


def test_json_schema(stack: Stack, engine: str, stream: bool) -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
    }
    body = {
        "model": f"chat-{engine}",
        "max_tokens": 256,
        "output_config": {"format": {"type": "json_schema", "schema": schema}},
        "messages": _user("A person"),
    }
    m = run(stack, body, stream)
    person = json.loads(text_of(m))
    assert isinstance(person["name"], str) and isinstance(person["age"], int)
    assert m.stop_reason == "end_turn"


@pytest.mark.parametrize(
    "config",
    [
        {"thinking": {"type": "enabled", "budget_tokens": 1024}},
        {"thinking": {"type": "adaptive"}, "output_config": {"effort": "low"}},
    ],
    ids=["enabled", "adaptive"],
)
def test_thinking(stack: Stack, engine: str, stream: bool, config: dict[str, Any]) -> None:
    body = {"model": f"think-{engine}", "max_tokens": 2048, "messages": _user("Think"), **config}
    m = run(stack, body, stream)
    assert [b.type for b in m.content] == ["thinking", "text"]
    thinking, text = m.content
    assert thinking.type == "thinking" and text.type == "text"
    assert thinking.thinking.strip() and text.text.strip()
    assert verify_thinking(thinking.thinking, thinking.signature, SIGNING_KEY)
    # Output tokens include the thinking.
    words = len(thinking.thinking.split()) + len(text.text.split())
    assert m.usage.output_tokens == words


def test_thinking_omitted(stack: Stack, engine: str, stream: bool) -> None:
    body = {
        "model": f"think-{engine}",
        "max_tokens": 2048,
        "thinking": {"type": "enabled", "budget_tokens": 1024, "display": "omitted"},
        "messages": _user("Think quietly"),
    }
    m = run(stack, body, stream)
    assert [b.type for b in m.content] == ["text"]
    # The model still thought: the output tokens count more than the words shown.
    assert m.usage.output_tokens > len(text_of(m).split())


def test_thinking_disabled(stack: Stack, engine: str, stream: bool) -> None:
    body = {
        "model": f"think-{engine}",
        "max_tokens": 256,
        "thinking": {"type": "disabled"},
        "messages": _user("No thinking"),
    }
    m = run(stack, body, stream)
    assert [b.type for b in m.content] == ["text"]
    assert m.usage.output_tokens == len(text_of(m).split())


def test_stop_sequence(stack: Stack, engine: str, stream: bool) -> None:
    body = {
        "model": f"chat-{engine}",
        "max_tokens": 256,
        "stop_sequences": ["END"],
        "messages": _user("STOPTEST please"),
    }
    m = run(stack, body, stream)
    assert text_of(m) == "alpha beta "
    if REPORTS_STOP_STRING[engine]:
        assert m.stop_reason == "stop_sequence" and m.stop_sequence == "END"
    else:
        assert m.stop_reason == "end_turn" and m.stop_sequence is None


def test_max_tokens(stack: Stack, engine: str, stream: bool) -> None:
    m = run(stack, {"model": f"chat-{engine}", "max_tokens": 3, "messages": _user("Long")}, stream)
    assert m.stop_reason == "max_tokens" and m.stop_sequence is None
    assert m.usage.output_tokens == 3 == len(text_of(m).split())
