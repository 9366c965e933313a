"""Malformed requests to the Anthropic and Ollama entries: a 4xx in that dialect's error shape,
naming the problem, never a 500.

Anthropic: `{"type":"error","error":{"type":…,"message":…},"request_id":…}`.
Ollama: `{"error":"<text>"}`, a plain string.
Requests without a valid API key get 401 in the same shapes, and a backend that breaks off in
the middle of a stream is reported in-band in each dialect's own way.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import ollama
import pytest

from mindrouter.app import build_app
from mindrouter.serving import ThreadServer
from mindrouter.settings import settings_from_dict
from mindrouter.sim import build_sim_app
from tests.gateway.stack import (
    ENGINES,
    SIM_ENGINES,
    Stack,
    gateway_config,
    prepare_database,
    sim_config,
    sqlite_url,
)
from tests.gateway.test_ollama_entry import HTTP

MESSAGES = "/anthropic/v1/messages"
COUNT = "/anthropic/v1/messages/count_tokens"
USER = [{"role": "user", "content": "x"}]
OK_MESSAGES: dict[str, Any] = {"model": "chat-vllm", "max_tokens": 16, "messages": USER}
B64_PNG = "iVBORw0KGgoAAAAAAAAAAA=="


def _with(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**base, **changes}


def _without(base: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in base.items() if k != key}


def _image(data: str) -> dict[str, Any]:
    source = {"type": "base64", "media_type": "image/png", "data": data}
    return {"role": "user", "content": [{"type": "image", "source": source}]}


# (id, path, body (bytes are sent raw), status, error.type, text the message must contain)
ANTHROPIC_CASES: list[tuple[str, str, object, int, str, str]] = [
    ("bad json", MESSAGES, b'{"model": ', 400, "invalid_request_error", "not valid JSON"),
    ("empty body", MESSAGES, b"", 400, "invalid_request_error", "empty"),
    ("array body", MESSAGES, [OK_MESSAGES], 400, "invalid_request_error", "JSON object"),
    ("no model", MESSAGES, _without(OK_MESSAGES, "model"), 400, "invalid_request_error", "model"),
    ("model int", MESSAGES, _with(OK_MESSAGES, model=3), 400, "invalid_request_error", "model"),
    (
        "no max_tokens",
        MESSAGES,
        _without(OK_MESSAGES, "max_tokens"),
        400,
        "invalid_request_error",
        "max_tokens",
    ),
    (
        "max_tokens str",
        MESSAGES,
        _with(OK_MESSAGES, max_tokens="16"),
        400,
        "invalid_request_error",
        "max_tokens",
    ),
    (
        "max_tokens 0",
        MESSAGES,
        _with(OK_MESSAGES, max_tokens=0),
        400,
        "invalid_request_error",
        "max_tokens",
    ),
    (
        "no messages",
        MESSAGES,
        _without(OK_MESSAGES, "messages"),
        400,
        "invalid_request_error",
        "messages",
    ),
    (
        "messages str",
        MESSAGES,
        _with(OK_MESSAGES, messages="hi"),
        400,
        "invalid_request_error",
        "messages",
    ),
    (
        "messages empty",
        MESSAGES,
        _with(OK_MESSAGES, messages=[]),
        400,
        "invalid_request_error",
        "messages",
    ),
    (
        "bad role",
        MESSAGES,
        _with(OK_MESSAGES, messages=[{"role": "developer", "content": "x"}]),
        400,
        "invalid_request_error",
        "messages.0.role",
    ),
    (
        "content int",
        MESSAGES,
        _with(OK_MESSAGES, messages=[{"role": "user", "content": 5}]),
        400,
        "invalid_request_error",
        "messages.0.content",
    ),
    (
        "unknown block",
        MESSAGES,
        _with(OK_MESSAGES, messages=[{"role": "user", "content": [{"type": "video"}]}]),
        400,
        "invalid_request_error",
        "video",
    ),
    (
        "tool_use from user",
        MESSAGES,
        _with(
            OK_MESSAGES,
            messages=[
                {
                    "role": "user",
                    "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
                }
            ],
        ),
        400,
        "invalid_request_error",
        "assistant",
    ),
    (
        "tool_result unknown id",
        MESSAGES,
        _with(
            OK_MESSAGES,
            messages=[
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "nope"}]}
            ],
        ),
        400,
        "invalid_request_error",
        "tool_use_id",
    ),
    (
        "image not base64",
        MESSAGES,
        _with(OK_MESSAGES, model="vision-vllm", messages=[_image("data:image/png;base64,xx")]),
        400,
        "invalid_request_error",
        "base64",
    ),
    (
        "temperature 5",
        MESSAGES,
        _with(OK_MESSAGES, temperature=5),
        400,
        "invalid_request_error",
        "temperature",
    ),
    (
        "top_k str",
        MESSAGES,
        _with(OK_MESSAGES, top_k="many"),
        400,
        "invalid_request_error",
        "top_k",
    ),
    (
        "stream str",
        MESSAGES,
        _with(OK_MESSAGES, stream="yes"),
        400,
        "invalid_request_error",
        "stream",
    ),
    (
        "stop_sequences str",
        MESSAGES,
        _with(OK_MESSAGES, stop_sequences="END"),
        400,
        "invalid_request_error",
        "stop_sequences",
    ),
    ("tools object", MESSAGES, _with(OK_MESSAGES, tools={}), 400, "invalid_request_error", "tools"),
    (
        "tool no schema",
        MESSAGES,
        _with(OK_MESSAGES, tools=[{"name": "f"}]),
        400,
        "invalid_request_error",
        "input_schema",
    ),
    (
        "server tool",
        MESSAGES,
        _with(
            OK_MESSAGES,
            tools=[{"type": "web_search_20250305", "name": "web_search"}],
            tool_choice={"type": "tool", "name": "web_search"},
        ),
        400,
        "invalid_request_error",
        "server tool",
    ),
    (
        "tool_choice unknown tool",
        MESSAGES,
        _with(
            OK_MESSAGES,
            tools=[{"name": "f", "input_schema": {"type": "object"}}],
            tool_choice={"type": "tool", "name": "g"},
        ),
        400,
        "invalid_request_error",
        "tool_choice.name",
    ),
    (
        "thinking budget small",
        MESSAGES,
        _with(OK_MESSAGES, max_tokens=4000, thinking={"type": "enabled", "budget_tokens": 5}),
        400,
        "invalid_request_error",
        "budget_tokens",
    ),
    (
        "thinking budget over max",
        MESSAGES,
        _with(OK_MESSAGES, max_tokens=1500, thinking={"type": "enabled", "budget_tokens": 2000}),
        400,
        "invalid_request_error",
        "max_tokens",
    ),
    (
        "output_config schema missing",
        MESSAGES,
        _with(OK_MESSAGES, output_config={"format": {"type": "json_schema"}}),
        400,
        "invalid_request_error",
        "output_config.format.schema",
    ),
    (
        "unknown model",
        MESSAGES,
        _with(OK_MESSAGES, model="no-such-model"),
        404,
        "not_found_error",
        "no-such-model",
    ),
    (
        "unknown model streaming",
        MESSAGES,
        _with(OK_MESSAGES, model="no-such-model", stream=True),
        404,
        "not_found_error",
        "no-such-model",
    ),
    (
        "embedding model",
        MESSAGES,
        _with(OK_MESSAGES, model="embed-vllm"),
        400,
        "invalid_request_error",
        "embedding",
    ),
    (
        "image to text model",
        MESSAGES,
        _with(OK_MESSAGES, messages=[_image(B64_PNG)]),
        400,
        "invalid_request_error",
        "does not accept images",
    ),
    ("count bad json", COUNT, b"{", 400, "invalid_request_error", "not valid JSON"),
    ("count no model", COUNT, {"messages": USER}, 400, "invalid_request_error", "model"),
    (
        "count messages int",
        COUNT,
        {"model": "chat-vllm", "messages": 1},
        400,
        "invalid_request_error",
        "messages",
    ),
    (
        "count bad block",
        COUNT,
        {"model": "chat-vllm", "messages": [{"role": "user", "content": [{"text": "x"}]}]},
        400,
        "invalid_request_error",
        "type",
    ),
    (
        "count unknown model",
        COUNT,
        {"model": "no-such-model", "messages": USER},
        404,
        "not_found_error",
        "no-such-model",
    ),
    (
        "unknown route",
        "/anthropic/v1/nothing",
        OK_MESSAGES,
        404,
        "not_found_error",
        "no such endpoint",
    ),
]


def _send(stack: Stack, path: str, body: object) -> Any:
    if isinstance(body, bytes):
        headers = {"content-type": "application/json", **stack.auth}
        return HTTP.post(stack.url + path, content=body, headers=headers)
    return HTTP.post(stack.url + path, json=body, headers=stack.auth)


@pytest.mark.parametrize(
    ("path", "body", "status", "kind", "text"),
    [pytest.param(*case[1:], id=case[0]) for case in ANTHROPIC_CASES],
)
def test_anthropic_malformed(
    stack: Stack, path: str, body: object, status: int, kind: str, text: str
) -> None:
    r = _send(stack, path, body)
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    data = r.json()
    assert set(data) == {"type", "error", "request_id"}
    assert data["type"] == "error" and data["request_id"] == r.headers["request-id"]
    assert data["error"]["type"] == kind
    assert text in data["error"]["message"], data


OK_CHAT: dict[str, Any] = {"model": "chat-vllm", "messages": USER, "stream": False}
OK_GENERATE: dict[str, Any] = {"model": "chat-vllm", "prompt": "x", "stream": False}
OK_EMBED: dict[str, Any] = {"model": "embed-vllm", "input": "x"}
MISSING = 'model "no-such-model" not found, try pulling it first'

# (id, path, body (bytes are sent raw), status, text the error must contain)
OLLAMA_CASES: list[tuple[str, str, object, int, str]] = [
    ("chat bad json", "/api/chat", b'{"model"', 400, "not valid JSON"),
    ("chat empty body", "/api/chat", b"", 400, "empty"),
    ("chat array body", "/api/chat", [OK_CHAT], 400, "JSON object"),
    ("chat no model", "/api/chat", _without(OK_CHAT, "model"), 400, "model"),
    ("chat model int", "/api/chat", _with(OK_CHAT, model=1), 400, "model"),
    ("chat messages str", "/api/chat", _with(OK_CHAT, messages="x"), 400, "messages"),
    ("chat message str", "/api/chat", _with(OK_CHAT, messages=["x"]), 400, "messages[0]"),
    (
        "chat bad role",
        "/api/chat",
        _with(OK_CHAT, messages=[{"role": "robot", "content": "x"}]),
        400,
        "messages[0].role",
    ),
    (
        "chat content int",
        "/api/chat",
        _with(OK_CHAT, messages=[{"role": "user", "content": 3}]),
        400,
        "messages[0].content",
    ),
    (
        "chat images str",
        "/api/chat",
        _with(OK_CHAT, messages=[{"role": "user", "content": "x", "images": "abc"}]),
        400,
        "images",
    ),
    (
        "chat image not base64",
        "/api/chat",
        _with(OK_CHAT, messages=[{"role": "user", "content": "x", "images": ["@@@"]}]),
        400,
        "base64",
    ),
    (
        "chat tool_calls from user",
        "/api/chat",
        _with(
            OK_CHAT,
            messages=[{"role": "user", "content": "x", "tool_calls": [{"function": {}}]}],
        ),
        400,
        "tool_calls",
    ),
    ("chat options list", "/api/chat", _with(OK_CHAT, options=[1]), 400, "options"),
    (
        "chat temperature str",
        "/api/chat",
        _with(OK_CHAT, options={"temperature": "hot"}),
        400,
        "options.temperature",
    ),
    (
        "chat num_predict str",
        "/api/chat",
        _with(OK_CHAT, options={"num_predict": "many"}),
        400,
        "options.num_predict",
    ),
    ("chat format bad", "/api/chat", _with(OK_CHAT, format="yaml"), 400, "format"),
    ("chat think bad", "/api/chat", _with(OK_CHAT, think="maybe"), 400, "think"),
    ("chat stream str", "/api/chat", _with(OK_CHAT, stream="no"), 400, "stream"),
    ("chat keep_alive bad", "/api/chat", _with(OK_CHAT, keep_alive="soon"), 400, "keep_alive"),
    ("chat tools object", "/api/chat", _with(OK_CHAT, tools={}), 400, "tools"),
    (
        "chat tool no function",
        "/api/chat",
        _with(OK_CHAT, tools=[{"type": "function"}]),
        400,
        "tools[0].function",
    ),
    ("chat top_logprobs 50", "/api/chat", _with(OK_CHAT, top_logprobs=50), 400, "top_logprobs"),
    ("chat unknown model", "/api/chat", _with(OK_CHAT, model="no-such-model"), 404, MISSING),
    (
        "chat unknown model streaming",
        "/api/chat",
        _with(OK_CHAT, model="no-such-model", stream=True),
        404,
        MISSING,
    ),
    (
        "chat unknown model load",
        "/api/chat",
        {"model": "no-such-model", "messages": []},
        404,
        MISSING,
    ),
    ("chat embedding model", "/api/chat", _with(OK_CHAT, model="embed-vllm"), 400, "embedding"),
    ("generate bad json", "/api/generate", b"[", 400, "not valid JSON"),
    ("generate no model", "/api/generate", _without(OK_GENERATE, "model"), 400, "model"),
    ("generate prompt int", "/api/generate", _with(OK_GENERATE, prompt=5), 400, "prompt"),
    ("generate system int", "/api/generate", _with(OK_GENERATE, system=5), 400, "system"),
    (
        "generate raw with system",
        "/api/generate",
        _with(OK_GENERATE, raw=True, system="s"),
        400,
        "system",
    ),
    ("generate images int", "/api/generate", _with(OK_GENERATE, images=1), 400, "images"),
    ("generate context str", "/api/generate", _with(OK_GENERATE, context="x"), 400, "context"),
    (
        "generate unknown model",
        "/api/generate",
        _with(OK_GENERATE, model="no-such-model"),
        404,
        MISSING,
    ),
    (
        "generate unknown model streaming",
        "/api/generate",
        _with(OK_GENERATE, model="no-such-model", stream=True),
        404,
        MISSING,
    ),
    ("embed bad json", "/api/embed", b"nope", 400, "not valid JSON"),
    ("embed no model", "/api/embed", _without(OK_EMBED, "model"), 400, "model"),
    ("embed no input", "/api/embed", _without(OK_EMBED, "input"), 400, "input"),
    ("embed input int", "/api/embed", _with(OK_EMBED, input=5), 400, "input"),
    ("embed input empty list", "/api/embed", _with(OK_EMBED, input=[]), 400, "input"),
    ("embed input item int", "/api/embed", _with(OK_EMBED, input=["a", 2]), 400, "input[1]"),
    ("embed truncate str", "/api/embed", _with(OK_EMBED, truncate="yes"), 400, "truncate"),
    ("embed unknown model", "/api/embed", _with(OK_EMBED, model="no-such-model"), 404, MISSING),
    ("embed chat model", "/api/embed", _with(OK_EMBED, model="chat-vllm"), 400, "embedding"),
    ("embeddings no prompt", "/api/embeddings", {"model": "embed-vllm"}, 400, "prompt"),
    (
        "embeddings unknown model",
        "/api/embeddings",
        {"model": "no-such-model", "prompt": "x"},
        404,
        MISSING,
    ),
    ("show bad json", "/api/show", b"{", 400, "not valid JSON"),
    ("show no model", "/api/show", {}, 400, "model"),
    ("show model int", "/api/show", {"model": 5}, 400, "model"),
    ("show verbose str", "/api/show", {"model": "chat-vllm", "verbose": "yes"}, 400, "verbose"),
    ("show unknown model", "/api/show", {"model": "no-such-model"}, 404, MISSING),
    ("unknown route", "/api/nothing", {}, 404, "no such endpoint"),
]


@pytest.mark.parametrize(
    ("path", "body", "status", "text"),
    [pytest.param(*case[1:], id=case[0]) for case in OLLAMA_CASES],
)
def test_ollama_malformed(stack: Stack, path: str, body: object, status: int, text: str) -> None:
    r = _send(stack, path, body)
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    data = r.json()
    # A plain string: the SDK stores whatever `error` holds as the exception message.
    assert list(data) == ["error"] and isinstance(data["error"], str)
    assert text in data["error"], data


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer mr2_wrong"}, {"x-api-key": "nope"}],
    ids=["no key", "wrong bearer", "wrong x-api-key"],
)
@pytest.mark.parametrize("path", [MESSAGES, COUNT, "/anthropic/v1/models"])
def test_anthropic_unauthenticated(stack: Stack, path: str, headers: dict[str, str]) -> None:
    if path.endswith("/models"):
        r = HTTP.get(stack.url + path, headers=headers)
    else:
        r = HTTP.post(stack.url + path, json=OK_MESSAGES, headers=headers)
    assert r.status_code == 401, r.text
    data = r.json()
    assert data["type"] == "error" and data["error"]["type"] == "authentication_error"


def test_anthropic_sdk_authentication_error(stack: Stack) -> None:
    client = anthropic.Anthropic(
        base_url=stack.url + "/anthropic", api_key="mr2_wrong", max_retries=0
    )
    with pytest.raises(anthropic.AuthenticationError):
        client.messages.create(model="chat-vllm", max_tokens=8, messages=USER)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer mr2_wrong"}], ids=["no key", "wrong bearer"]
)
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/api/chat", OK_CHAT),
        ("POST", "/api/generate", OK_GENERATE),
        ("POST", "/api/embed", OK_EMBED),
        ("POST", "/api/show", {"model": "chat-vllm"}),
        ("GET", "/api/tags", None),
        ("GET", "/api/ps", None),
    ],
)
def test_ollama_unauthenticated(
    stack: Stack, method: str, path: str, body: object, headers: dict[str, str]
) -> None:
    r = HTTP.request(method, stack.url + path, json=body, headers=headers)
    assert r.status_code == 401, r.text
    data = r.json()
    assert list(data) == ["error"] and isinstance(data["error"], str)


def test_ollama_sdk_authentication_error(stack: Stack) -> None:
    with pytest.raises(ollama.ResponseError) as exc:
        ollama.Client(host=stack.url).chat(model="chat-vllm", messages=USER)
    assert exc.value.status_code == 401


@pytest.fixture(scope="module")
def fragile() -> Iterator[Stack]:
    """A stack of its own whose engines cut every stream after three chunks.

    Broken streams count against a backend's circuit breaker, which would soon take the backends
    out of service; with a stack of its own nobody else notices, and its breaker never opens.
    """
    apps = {e: build_sim_app(sim_config(e, drop_after=3)) for e in SIM_ENGINES}
    sims = {e: ThreadServer(app).start() for e, app in apps.items()}
    config = gateway_config(
        {e: s.url for e, s in sims.items()}, database_url=sqlite_url(), breaker_threshold=10**6
    )
    settings = settings_from_dict(config)
    key = asyncio.run(prepare_database(settings))
    app = build_app(settings)
    fragile = Stack(
        gateway=ThreadServer(app).start(),
        sims=sims,
        sim_states={e: a.state.sim for e, a in apps.items()},
        settings=settings,
        app=app,
        key=key,
    )
    try:
        yield fragile
    finally:
        fragile.close()


@pytest.mark.parametrize("engine", ENGINES)
def test_anthropic_stream_broken_mid_way(fragile: Stack, engine: str) -> None:
    body = {**OK_MESSAGES, "model": f"chat-{engine}", "stream": True}
    events: list[tuple[str, dict[str, Any]]] = []
    with HTTP.stream("POST", fragile.url + MESSAGES, json=body, headers=fragile.auth) as r:
        assert r.status_code == 200
        name = ""
        for line in r.iter_lines():
            if line.startswith("event: "):
                name = line[len("event: ") :]
            elif line.startswith("data: "):
                events.append((name, json.loads(line[len("data: ") :])))
    # The failure is reported in-band and nothing pretends the message completed.
    assert events[0][0] == "message_start"
    name, data = events[-1]
    assert name == "error" and data["type"] == "error"
    assert data["error"]["type"] == "api_error" and data["error"]["message"]
    assert not {"message_delta", "message_stop"} & {n for n, _ in events}
    client = anthropic.Anthropic(
        base_url=fragile.url + "/anthropic", api_key=fragile.key, max_retries=0
    )
    with (
        pytest.raises(anthropic.APIStatusError),
        client.messages.stream(
            model=f"chat-{engine}",
            max_tokens=16,
            messages=USER,  # type: ignore[arg-type]
        ) as s,
    ):
        s.get_final_message()


@pytest.mark.parametrize("engine", ENGINES)
def test_ollama_stream_broken_mid_way(fragile: Stack, engine: str) -> None:
    body = {**OK_CHAT, "model": f"chat-{engine}", "stream": True}
    with HTTP.stream("POST", fragile.url + "/api/chat", json=body, headers=fragile.auth) as r:
        assert r.status_code == 200
        lines = [json.loads(line) for line in r.iter_lines()]
    assert all(line.get("done") is False for line in lines[:-1])
    assert list(lines[-1]) == ["error"] and isinstance(lines[-1]["error"], str)
    client = ollama.Client(host=fragile.url, headers=fragile.auth)
    with pytest.raises(ollama.ResponseError):
        list(client.chat(model=f"chat-{engine}", messages=USER, stream=True))
    # Unstreamed, the same failure is an error status: nothing was sent yet.
    with pytest.raises(ollama.ResponseError) as exc:
        client.chat(model=f"chat-{engine}", messages=USER)
    assert exc.value.status_code == 502
