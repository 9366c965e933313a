"""Feature matrix of the Ollama entry: every feature × every backend type × streamed or not,
for /api/chat and /api/generate.

Every object and every NDJSON line is validated with the SDK's `ChatResponse` /
`GenerateResponse`, and every final object's counters and durations are checked as clients use
them (`check_metrics`). docs/compatibility.md lists what each test backs.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from tests.gateway.stack import ENGINES, Stack
from tests.gateway.test_anthropic_entry import backend_tool_arguments, last_backend_request
from tests.gateway.test_ollama_entry import HTTP, PNG, WEATHER_TOOL, chat, chat_lines, generate

pytestmark = [
    pytest.mark.parametrize("engine", ENGINES),
    pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"]),
]

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}


def _user(text: str, **extra: Any) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text, **extra}]


def _plain(content: Any) -> str:
    """The text of an OpenAI/Ollama message content: a string or a list of parts."""
    if isinstance(content, str):
        return content
    return "".join(part["text"] for part in content if part.get("type") == "text")


# -- /api/chat ---------------------------------------------------------------------------------


def test_chat_plain(stack: Stack, engine: str, stream: bool) -> None:
    r = chat(stack, {"model": f"chat-{engine}", "messages": _user("Hello")}, stream)
    assert r.model == f"chat-{engine}" and r.message.role == "assistant"
    assert r.message.thinking is None and not r.message.tool_calls
    assert r.done_reason == "stop"
    # The simulator spends one token per word.
    assert r.eval_count == len((r.message.content or "").split()) > 3


def test_chat_same_reply_everywhere(stack: Stack, engine: str, stream: bool) -> None:
    """The same conversation gets the same reply and counts streamed, unstreamed and through the
    OpenAI entry: the dialect changes the wire, not the generation."""
    body = {"model": f"chat-{engine}", "messages": _user("Same twice")}
    whole = chat(stack, body, False)
    if stream:
        streamed = chat(stack, body, True)
        assert streamed.message.content == whole.message.content
        assert streamed.eval_count == whole.eval_count
        assert streamed.prompt_eval_count == whole.prompt_eval_count
    else:
        r = HTTP.post(stack.url + "/v1/chat/completions", json=body, headers=stack.auth)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == whole.message.content
        assert r.json()["usage"]["completion_tokens"] == whole.eval_count


def test_chat_multi_turn_with_system(stack: Stack, engine: str, stream: bool) -> None:
    one = chat(stack, {"model": f"chat-{engine}", "messages": _user("Hi")}, stream)
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello there."},
        {"role": "user", "content": "Tell me more about rivers and stones."},
    ]
    many = chat(stack, {"model": f"chat-{engine}", "messages": messages}, stream)
    assert many.message.content
    assert (many.prompt_eval_count or 0) > (one.prompt_eval_count or 0) + 10
    _, sent = last_backend_request(stack, engine)
    assert [m["role"] for m in sent["messages"]] == ["system", "user", "assistant", "user"]
    assert _plain(sent["messages"][0]["content"]) == "You are terse."
    assert _plain(sent["messages"][2]["content"]) == "Hello there."


def test_chat_image(stack: Stack, engine: str, stream: bool) -> None:
    b64 = base64.b64encode(PNG).decode()
    messages = _user("What is this?", images=[b64])
    r = chat(stack, {"model": f"vision-{engine}", "messages": messages}, stream)
    assert (r.message.content or "").startswith("(images:1)")
    _, sent = last_backend_request(stack, engine)
    if engine == "ollama":
        assert sent["messages"][-1]["images"] == [b64]
    else:
        # Bare base64 becomes a data URL, its media type sniffed from the bytes.
        parts = sent["messages"][-1]["content"]
        urls = [p["image_url"]["url"] for p in parts if p["type"] == "image_url"]
        assert urls == [f"data:image/png;base64,{b64}"]
    refused = HTTP.post(
        stack.url + "/api/chat",
        json={"model": f"chat-{engine}", "messages": messages, "stream": stream},
        headers=stack.auth,
    )
    assert refused.status_code == 400 and isinstance(refused.json()["error"], str)


def test_chat_tool_call(stack: Stack, engine: str, stream: bool) -> None:
    body = {"model": f"chat-{engine}", "messages": _user("Weather?"), "tools": [WEATHER_TOOL]}
    if stream:
        lines = chat_lines(stack, body)
        with_calls = [line for line in lines if line["message"].get("tool_calls")]
        # Whole calls only, in one chunk, whatever the backend streamed.
        assert len(with_calls) == 1 and len(with_calls[0]["message"]["tool_calls"]) == 1
    r = chat(stack, body, stream)
    assert r.done_reason == "stop" and not r.message.content
    (call,) = r.message.tool_calls or []
    assert call.function.name == "get_weather"
    arguments = dict(call.function.arguments)
    assert isinstance(arguments["city"], str) and isinstance(arguments["days"], int)
    assert arguments["unit"] in ("celsius", "fahrenheit")
    produced = backend_tool_arguments(stack, engine)
    assert arguments == (produced if isinstance(produced, dict) else json.loads(produced))


def test_chat_tool_result(stack: Stack, engine: str, stream: bool) -> None:
    question = {"role": "user", "content": "Weather?"}
    first = chat(
        stack, {"model": f"chat-{engine}", "messages": [question], "tools": [WEATHER_TOOL]}, False
    )
    assistant = first.message.model_dump(exclude_none=True)
    messages = [
        question,
        assistant,
        {"role": "tool", "content": '{"temp_c": 4}', "tool_name": "get_weather"},
    ]
    r = chat(
        stack, {"model": f"chat-{engine}", "messages": messages, "tools": [WEATHER_TOOL]}, stream
    )
    assert r.message.content and not r.message.tool_calls and r.done_reason == "stop"
    _, sent = last_backend_request(stack, engine)
    call, result = sent["messages"][-2]["tool_calls"][0], sent["messages"][-1]
    assert call["function"]["name"] == "get_weather"
    assert result["role"] == "tool" and _plain(result["content"]) == '{"temp_c": 4}'
    if engine == "ollama":
        assert result["tool_name"] == "get_weather"
    else:
        # The call had no id on the Ollama wire; the gateway mints one and pairs the result.
        assert call["id"] and result["tool_call_id"] == call["id"]
        assert json.loads(call["function"]["arguments"]) == dict(
            first.message.tool_calls[0].function.arguments  # type: ignore[index]
        )


def test_chat_json_mode(stack: Stack, engine: str, stream: bool) -> None:
    r = chat(
        stack, {"model": f"chat-{engine}", "messages": _user("JSON"), "format": "json"}, stream
    )
    assert isinstance(json.loads(r.message.content or ""), dict)


def test_chat_json_schema(stack: Stack, engine: str, stream: bool) -> None:
    r = chat(
        stack, {"model": f"chat-{engine}", "messages": _user("A person"), "format": SCHEMA}, stream
    )
    person = json.loads(r.message.content or "")
    assert isinstance(person["name"], str) and isinstance(person["age"], int)


def test_chat_think(stack: Stack, engine: str, stream: bool) -> None:
    body = {"model": f"think-{engine}", "messages": _user("Think first"), "think": True}
    r = chat(stack, body, stream)
    assert r.message.thinking and r.message.thinking.strip() and r.message.content
    # eval_count covers the thinking too.
    words = len(r.message.thinking.split()) + len((r.message.content or "").split())
    assert r.eval_count == words


def test_chat_think_off(stack: Stack, engine: str, stream: bool) -> None:
    body = {"model": f"think-{engine}", "messages": _user("No thinking"), "think": False}
    r = chat(stack, body, stream)
    assert r.message.thinking is None and r.message.content


def test_chat_stop(stack: Stack, engine: str, stream: bool) -> None:
    body = {
        "model": f"chat-{engine}",
        "messages": _user("STOPTEST please"),
        "options": {"stop": ["END"]},
    }
    r = chat(stack, body, stream)
    assert r.message.content == "alpha beta " and r.done_reason == "stop"


def test_chat_num_predict(stack: Stack, engine: str, stream: bool) -> None:
    body = {"model": f"chat-{engine}", "messages": _user("Long"), "options": {"num_predict": 3}}
    r = chat(stack, body, stream)
    assert r.done_reason == "length" and r.eval_count == 3
    assert len((r.message.content or "").split()) == 3


# -- /api/generate -----------------------------------------------------------------------------


def test_generate_plain(stack: Stack, engine: str, stream: bool) -> None:
    r = generate(stack, {"model": f"chat-{engine}", "prompt": "Once upon a time"}, stream)
    assert r.model == f"chat-{engine}" and r.done_reason == "stop" and r.thinking is None
    assert r.eval_count == len((r.response or "").split()) > 3


def test_generate_system(stack: Stack, engine: str, stream: bool) -> None:
    body = {"model": f"chat-{engine}", "prompt": "Once", "system": "You are terse."}
    r = generate(stack, body, stream)
    assert r.response
    _, sent = last_backend_request(stack, engine)
    assert [m["role"] for m in sent["messages"]] == ["system", "user"]
    assert _plain(sent["messages"][0]["content"]) == "You are terse."


def test_generate_raw(stack: Stack, engine: str, stream: bool) -> None:
    body = {
        "model": f"chat-{engine}",
        "prompt": "<s>Once",
        "raw": True,
        "options": {"num_predict": 4},
    }
    r = generate(stack, body, stream)
    assert r.done_reason == "length" and r.eval_count == 4 == len((r.response or "").split())
    # An untemplated prompt goes to the backend's plain completion route.
    route, sent = last_backend_request(stack, engine)
    if engine == "ollama":
        assert route == "/api/generate" and sent["raw"] is True and sent["prompt"] == "<s>Once"
    else:
        assert route == "/v1/completions" and sent["prompt"] in ("<s>Once", ["<s>Once"])


def test_generate_image(stack: Stack, engine: str, stream: bool) -> None:
    body = {
        "model": f"vision-{engine}",
        "prompt": "What?",
        "images": [base64.b64encode(PNG).decode()],
    }
    r = generate(stack, body, stream)
    assert (r.response or "").startswith("(images:1)")


def test_generate_json(stack: Stack, engine: str, stream: bool) -> None:
    r = generate(stack, {"model": f"chat-{engine}", "prompt": "JSON", "format": "json"}, stream)
    assert isinstance(json.loads(r.response or ""), dict)
    r = generate(stack, {"model": f"chat-{engine}", "prompt": "A person", "format": SCHEMA}, stream)
    person = json.loads(r.response or "")
    assert isinstance(person["name"], str) and isinstance(person["age"], int)


def test_generate_think(stack: Stack, engine: str, stream: bool) -> None:
    r = generate(stack, {"model": f"think-{engine}", "prompt": "Think", "think": True}, stream)
    assert r.thinking and r.thinking.strip() and r.response
    assert r.eval_count == len(r.thinking.split()) + len(r.response.split())


def test_generate_stop_and_length(stack: Stack, engine: str, stream: bool) -> None:
    body = {"model": f"chat-{engine}", "prompt": "STOPTEST", "options": {"stop": ["END"]}}
    r = generate(stack, body, stream)
    assert r.response == "alpha beta " and r.done_reason == "stop"
    r = generate(
        stack, {"model": f"chat-{engine}", "prompt": "x", "options": {"num_predict": 2}}, stream
    )
    assert r.done_reason == "length" and r.eval_count == 2
