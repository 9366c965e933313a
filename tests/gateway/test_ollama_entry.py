"""The Ollama entry point (/api/...) in front of every backend type, driven with the official
`ollama` SDK and checked against its pydantic models.

The helpers at the top read replies raw (httpx) and validate every object and every NDJSON line;
`test_matrix_ollama.py` uses them for the feature matrix.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import ollama
import pytest
from ollama import (
    ChatResponse,
    EmbeddingsResponse,
    EmbedResponse,
    GenerateResponse,
    ListResponse,
    ProcessResponse,
    ShowResponse,
)

from tests.gateway.stack import ENGINES, KINDS, Stack
from tests.gateway.test_anthropic_entry import last_backend_request

# One client for every raw call: building an httpx client (its TLS context) costs ~35 ms.
HTTP = httpx.Client(timeout=30)
PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 32
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer"},
            },
            "required": ["city", "unit", "days"],
        },
    },
}


@pytest.fixture(scope="module")
def client(stack: Stack) -> ollama.Client:
    return ollama.Client(host=stack.url, headers=stack.auth)


# -- raw helpers (shared with the matrix) ------------------------------------------------------


def post_json(stack: Stack, path: str, body: dict[str, Any]) -> dict[str, Any]:
    r = HTTP.post(stack.url + path, json=body, headers=stack.auth)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    data: dict[str, Any] = r.json()
    return data


def read_ndjson(stack: Stack, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The lines of a streamed reply: one JSON object each, only the last one `done`."""
    with HTTP.stream("POST", stack.url + path, json=body, headers=stack.auth) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("application/x-ndjson")
        raw = r.read()
    assert raw.endswith(b"\n")
    lines = raw.decode().split("\n")[:-1]
    # The SDK parses every line as JSON: no blank keep-alive lines, no SSE framing.
    assert lines and all(line.strip() for line in lines), raw[:200]
    objects = [json.loads(line) for line in lines]
    assert all(isinstance(o, dict) and "error" not in o for o in objects), objects[-1]
    assert [o["done"] for o in objects] == [False] * (len(objects) - 1) + [True]
    return objects


def check_metrics(final: ChatResponse | GenerateResponse) -> None:
    """Ollama's counters and nanosecond durations, as clients use them to compute speeds."""
    assert final.done is True and final.done_reason in ("stop", "length")
    assert final.created_at and datetime.fromisoformat(final.created_at).tzinfo is not None
    assert final.prompt_eval_count and final.prompt_eval_count > 0
    assert final.eval_count and final.eval_count > 0
    assert final.total_duration and final.total_duration > 0
    assert final.load_duration is not None and final.load_duration >= 0
    assert final.prompt_eval_duration and final.prompt_eval_duration > 0
    assert final.eval_duration and final.eval_duration > 0
    spent = final.prompt_eval_duration + final.eval_duration
    assert abs(final.total_duration - spent) <= 2  # rounding to whole nanoseconds
    assert math.isfinite(final.eval_count / final.eval_duration * 1e9)


def _fold_chat(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """A streamed chat folded into the one object the unstreamed call returns."""
    for line in lines:
        ChatResponse.model_validate(line)
        assert line["message"]["role"] == "assistant"
    *chunks, last = lines
    assert last["message"]["content"] == "" and not last["message"].get("tool_calls")
    thinking_at = [i for i, c in enumerate(chunks) if c["message"].get("thinking")]
    content_at = [i for i, c in enumerate(chunks) if c["message"]["content"]]
    if thinking_at and content_at:
        assert max(thinking_at) < min(content_at), "thinking comes before the answer"
    message: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(c["message"]["content"] for c in chunks),
    }
    thinking = "".join(c["message"].get("thinking") or "" for c in chunks)
    if thinking:
        message["thinking"] = thinking
    calls = [call for c in chunks for call in c["message"].get("tool_calls") or []]
    if calls:
        message["tool_calls"] = calls
    return {**last, "message": message}


def chat(stack: Stack, body: dict[str, Any], stream: bool) -> ChatResponse:
    """The /api/chat reply to `body`, streamed or not; validated either way."""
    if not stream:
        reply = ChatResponse.model_validate(
            post_json(stack, "/api/chat", {**body, "stream": False})
        )
        check_metrics(reply)
        return reply
    lines = read_ndjson(stack, "/api/chat", {**body, "stream": True})
    reply = ChatResponse.model_validate(_fold_chat(lines))
    check_metrics(reply)
    return reply


def chat_lines(stack: Stack, body: dict[str, Any]) -> list[dict[str, Any]]:
    lines = read_ndjson(stack, "/api/chat", {**body, "stream": True})
    _fold_chat(lines)
    return lines


def generate(stack: Stack, body: dict[str, Any], stream: bool) -> GenerateResponse:
    """The /api/generate reply to `body`, streamed or not; validated either way."""
    if not stream:
        data = post_json(stack, "/api/generate", {**body, "stream": False})
        assert data["context"] == []
        reply = GenerateResponse.model_validate(data)
        check_metrics(reply)
        return reply
    lines = read_ndjson(stack, "/api/generate", {**body, "stream": True})
    for line in lines:
        GenerateResponse.model_validate(line)
    *chunks, last = lines
    assert last["response"] == "" and last["context"] == []
    thinking_at = [i for i, c in enumerate(chunks) if c.get("thinking")]
    response_at = [i for i, c in enumerate(chunks) if c["response"]]
    if thinking_at and response_at:
        assert max(thinking_at) < min(response_at)
    folded = {**last, "response": "".join(c["response"] for c in chunks)}
    thinking = "".join(c.get("thinking") or "" for c in chunks)
    if thinking:
        folded["thinking"] = thinking
    reply = GenerateResponse.model_validate(folded)
    check_metrics(reply)
    return reply


# -- the SDK against every backend ------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_sdk_chat(client: ollama.Client, engine: str) -> None:
    messages = [{"role": "user", "content": "Hello"}]
    whole = client.chat(model=f"chat-{engine}", messages=messages)
    assert isinstance(whole, ChatResponse) and whole.model == f"chat-{engine}"
    assert whole.message.role == "assistant" and whole.message.content
    check_metrics(whole)
    parts = list(client.chat(model=f"chat-{engine}", messages=messages, stream=True))
    assert len(parts) >= 4 and all(isinstance(p, ChatResponse) for p in parts)
    assert [p.done for p in parts] == [False] * (len(parts) - 1) + [True]
    assert "".join(p.message.content or "" for p in parts) == whole.message.content
    check_metrics(parts[-1])
    assert parts[-1].eval_count == whole.eval_count == len(whole.message.content.split())
    assert parts[-1].prompt_eval_count == whole.prompt_eval_count


@pytest.mark.parametrize("engine", ENGINES)
def test_sdk_generate(client: ollama.Client, engine: str) -> None:
    whole = client.generate(model=f"chat-{engine}", prompt="Once upon a time", system="Be brief.")
    assert isinstance(whole, GenerateResponse) and whole.response
    check_metrics(whole)
    parts = list(client.generate(model=f"chat-{engine}", prompt="Once upon a time", stream=True))
    assert "".join(p.response or "" for p in parts).strip()
    check_metrics(parts[-1])
    short = client.generate(model=f"chat-{engine}", prompt="x", options={"num_predict": 2})
    assert short.done_reason == "length" and short.eval_count == 2


@pytest.mark.parametrize("engine", ENGINES)
def test_sdk_embed(stack: Stack, client: ollama.Client, engine: str) -> None:
    embedded = client.embed(model=f"embed-{engine}", input=["hello", "world"])
    assert len(embedded.embeddings) == 2
    for vector in embedded.embeddings:
        # /api/embed returns unit vectors, as Ollama does.
        assert math.fsum(x * x for x in vector) == pytest.approx(1.0)
    raw = post_json(stack, "/api/embed", {"model": f"embed-{engine}", "input": "hello"})
    strict = EmbedResponse.model_validate(raw)
    assert strict.embeddings[0] == pytest.approx(embedded.embeddings[0])
    assert raw["prompt_eval_count"] > 0 and raw["total_duration"] > 0
    legacy = client.embeddings(model=f"embed-{engine}", prompt="hello")
    EmbeddingsResponse.model_validate(
        post_json(stack, "/api/embeddings", {"model": f"embed-{engine}", "prompt": "hello"})
    )
    norm = math.sqrt(math.fsum(x * x for x in legacy.embedding))
    assert [x / norm for x in legacy.embedding] == pytest.approx(embedded.embeddings[0])


def test_sdk_list_ps_show(stack: Stack, client: ollama.Client) -> None:
    listed = client.list()
    raw_list = ListResponse.model_validate(
        HTTP.get(stack.url + "/api/tags", headers=stack.auth).json()
    )
    assert [m.model for m in listed.models] == [m.model for m in raw_list.models]
    names = {m.model for m in listed.models}
    assert {f"{prefix}-{e}" for prefix in KINDS for e in ENGINES} <= names
    assert all(m.modified_at is not None and m.digest for m in listed.models)

    client.chat(model="chat-llamacpp", messages=[{"role": "user", "content": "warm up"}])
    running = client.ps()
    ProcessResponse.model_validate(HTTP.get(stack.url + "/api/ps", headers=stack.auth).json())
    warm = next(m for m in running.models if m.model == "chat-llamacpp")
    assert warm.expires_at is not None and warm.expires_at > datetime.now(UTC)
    assert warm.context_length == 8192

    expected = {
        "chat": {"completion", "tools"},
        "think": {"completion", "tools", "thinking"},
        "vision": {"completion", "vision"},
        "embed": {"embedding"},
    }
    for engine in ENGINES:
        for prefix, capabilities in expected.items():
            shown = client.show(f"{prefix}-{engine}")
            raw = post_json(stack, "/api/show", {"model": f"{prefix}-{engine}"})
            assert "model_info" in raw
            ShowResponse.model_validate(raw)
            assert set(shown.capabilities or []) == capabilities
            info = shown.modelinfo or {}
            arch = info["general.architecture"]
            assert info[f"{arch}.context_length"] == 8192
    # Older clients send `name` rather than `model`.
    ShowResponse.model_validate(post_json(stack, "/api/show", {"name": "chat-vllm"}))


@pytest.mark.parametrize("engine", ENGINES)
def test_sdk_tool_round_trip(client: ollama.Client, engine: str) -> None:
    question = {"role": "user", "content": "Weather in Oslo?"}
    first = client.chat(model=f"chat-{engine}", messages=[question], tools=[WEATHER_TOOL])
    (call,) = first.message.tool_calls or []
    assert call.function.name == "get_weather"
    arguments = dict(call.function.arguments)
    assert isinstance(arguments["city"], str) and isinstance(arguments["days"], int)
    streamed = list(
        client.chat(model=f"chat-{engine}", messages=[question], tools=[WEATHER_TOOL], stream=True)
    )
    with_calls = [p for p in streamed if p.message.tool_calls]
    # Ollama clients get each call whole, in one chunk.
    assert len(with_calls) == 1 and len(with_calls[0].message.tool_calls or []) == 1
    assert dict(with_calls[0].message.tool_calls[0].function.arguments) == arguments  # type: ignore[index]
    second = client.chat(
        model=f"chat-{engine}",
        tools=[WEATHER_TOOL],
        messages=[
            question,
            first.message,
            {"role": "tool", "content": '{"temp_c": 4}', "tool_name": "get_weather"},
        ],
    )
    assert second.message.content and not second.message.tool_calls
    assert second.done_reason == "stop"


@pytest.mark.parametrize("engine", ENGINES)
def test_sdk_think(client: ollama.Client, engine: str) -> None:
    messages = [{"role": "user", "content": "Think first"}]
    r = client.chat(model=f"think-{engine}", messages=messages, think=True)
    assert r.message.thinking and r.message.content
    parts = list(client.chat(model=f"think-{engine}", messages=messages, think=True, stream=True))
    assert "".join(p.message.thinking or "" for p in parts) == r.message.thinking
    g = client.generate(model=f"think-{engine}", prompt="Think first", think=True)
    assert g.thinking and g.response
    # Replaying the thinking on the next turn is accepted.
    again = client.chat(
        model=f"think-{engine}",
        think=True,
        messages=[*messages, r.message, {"role": "user", "content": "And then?"}],
    )
    assert again.message.content


@pytest.mark.parametrize("engine", ENGINES)
def test_sdk_format(client: ollama.Client, engine: str) -> None:
    r = client.chat(
        model=f"chat-{engine}", messages=[{"role": "user", "content": "JSON"}], format="json"
    )
    assert isinstance(json.loads(r.message.content or ""), dict)
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
    }
    g = client.generate(model=f"chat-{engine}", prompt="A person", format=schema)
    person = json.loads(g.response or "")
    assert isinstance(person["name"], str) and isinstance(person["age"], int)


@pytest.mark.parametrize("engine", ENGINES)
def test_sdk_images(stack: Stack, client: ollama.Client, engine: str) -> None:
    # The SDK base64-encodes bytes itself.
    r = client.chat(
        model=f"vision-{engine}", messages=[{"role": "user", "content": "What?", "images": [PNG]}]
    )
    assert (r.message.content or "").startswith("(images:1)")
    _, sent = last_backend_request(stack, engine)
    if engine == "ollama":
        assert sent["messages"][-1]["images"] == [base64.b64encode(PNG).decode()]
    g = client.generate(model=f"vision-{engine}", prompt="What?", images=[PNG])
    assert (g.response or "").startswith("(images:1)")


@pytest.mark.parametrize("engine", ENGINES)
def test_sdk_typed_errors(client: ollama.Client, engine: str) -> None:
    missing = 'model "no-such-model" not found, try pulling it first'
    user = [{"role": "user", "content": "x"}]
    calls: list[Callable[[], object]] = [
        lambda: client.chat(model="no-such-model", messages=user),
        lambda: list(client.chat(model="no-such-model", messages=user, stream=True)),
        lambda: client.generate(model="no-such-model", prompt="x"),
        lambda: list(client.generate(model="no-such-model", prompt="x", stream=True)),
        lambda: client.embed(model="no-such-model", input="x"),
        lambda: client.embeddings(model="no-such-model", prompt="x"),
        lambda: client.show("no-such-model"),
    ]
    for call in calls:
        with pytest.raises(ollama.ResponseError) as exc:
            call()
        assert exc.value.status_code == 404 and exc.value.error == missing
    bad: list[Callable[[], object]] = [
        lambda: client.chat(model=f"embed-{engine}", messages=user),
        lambda: client.embed(model=f"chat-{engine}", input="x"),
        lambda: client.chat(
            model=f"chat-{engine}", messages=[{"role": "user", "content": "x", "images": [PNG]}]
        ),
    ]
    for call in bad:
        with pytest.raises(ollama.ResponseError) as exc:
            call()
        assert exc.value.status_code == 400 and isinstance(exc.value.error, str)


# -- the server's own conventions -------------------------------------------------------------


def test_chat_streams_by_default(stack: Stack) -> None:
    # The SDK always sends `stream`; curl users and other clients rely on the server default.
    lines = read_ndjson(
        stack, "/api/chat", {"model": "chat-vllm", "messages": [{"role": "user", "content": "x"}]}
    )
    assert len(lines) > 2
    lines = read_ndjson(stack, "/api/generate", {"model": "chat-vllm", "prompt": "x"})
    assert len(lines) > 2


def test_load_and_unload_calls(stack: Stack) -> None:
    for path, body, field in (
        ("/api/chat", {"model": "chat-vllm", "messages": []}, "message"),
        ("/api/generate", {"model": "chat-vllm"}, "response"),
    ):
        loaded = post_json(stack, path, body)
        assert loaded["done"] is True and loaded["done_reason"] == "load" and field in loaded
        unloaded = post_json(stack, path, {**body, "keep_alive": 0})
        assert unloaded["done_reason"] == "unload"


def test_root_and_version(stack: Stack) -> None:
    root = HTTP.get(stack.url + "/")
    assert root.status_code == 200 and "Ollama is running" in root.text
    assert isinstance(
        HTTP.get(stack.url + "/api/version", headers=stack.auth).json()["version"], str
    )
