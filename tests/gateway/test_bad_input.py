"""Malformed requests get a 4xx in OpenAI's error shape naming the problem, never a 500."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.gateway.stack import Stack

CHAT = "/v1/chat/completions"
CASES: list[tuple[str, str, object, int, str]] = [
    # (name, path, body (bytes are sent raw), status, text the message must contain)
    ("not json", CHAT, b"{not json", 400, "not valid JSON"),
    ("empty body", CHAT, b"", 400, "empty"),
    ("array body", CHAT, [1, 2], 400, "JSON object"),
    ("missing model", CHAT, {"messages": [{"role": "user", "content": "x"}]}, 400, "model"),
    ("model not a string", CHAT, {"model": 3, "messages": []}, 400, "model"),
    ("messages missing", CHAT, {"model": "chat-vllm"}, 400, "messages"),
    ("messages not a list", CHAT, {"model": "chat-vllm", "messages": "hi"}, 400, "messages"),
    ("messages empty", CHAT, {"model": "chat-vllm", "messages": []}, 400, "messages"),
    (
        "bad role",
        CHAT,
        {"model": "chat-vllm", "messages": [{"role": "robot", "content": "x"}]},
        400,
        "role",
    ),
    (
        "temperature string",
        CHAT,
        {
            "model": "chat-vllm",
            "messages": [{"role": "user", "content": "x"}],
            "temperature": "hot",
        },
        400,
        "temperature",
    ),
    (
        "max_tokens negative",
        CHAT,
        {"model": "chat-vllm", "messages": [{"role": "user", "content": "x"}], "max_tokens": -5},
        400,
        "max_tokens",
    ),
    (
        "stream not bool",
        CHAT,
        {"model": "chat-vllm", "messages": [{"role": "user", "content": "x"}], "stream": "yes"},
        400,
        "stream",
    ),
    (
        "tools not list",
        CHAT,
        {"model": "chat-vllm", "messages": [{"role": "user", "content": "x"}], "tools": {}},
        400,
        "tools",
    ),
    (
        "unknown model",
        CHAT,
        {"model": "no-such-model", "messages": [{"role": "user", "content": "x"}]},
        404,
        "no-such-model",
    ),
    (
        "unknown model streaming",
        CHAT,
        {"model": "no-such-model", "stream": True, "messages": [{"role": "user", "content": "x"}]},
        404,
        "no-such-model",
    ),
    ("embeddings no input", "/v1/embeddings", {"model": "embed-vllm"}, 400, "input"),
    ("completions no prompt", "/v1/completions", {"model": "chat-vllm"}, 400, "prompt"),
    ("unknown route", "/v1/nothing-here", {}, 404, "no such endpoint"),
]


@pytest.mark.parametrize(
    ("name", "path", "body", "status", "needle"), CASES, ids=[c[0] for c in CASES]
)
def test_bad_input(
    stack: Stack, name: str, path: str, body: object, status: int, needle: str
) -> None:
    if isinstance(body, bytes):
        r = httpx.post(
            stack.url + path,
            content=body,
            headers={"content-type": "application/json", **stack.auth},
            timeout=10,
        )
    else:
        r = httpx.post(stack.url + path, json=body, headers=stack.auth, timeout=10)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) >= {"message", "type", "param", "code"}
    assert needle.lower() in err["message"].lower(), err
    assert r.headers["x-request-id"].startswith("chatcmpl-")


def test_sdk_sees_typed_errors(oai: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as nf:
        oai.chat.completions.create(
            model="no-such-model", messages=[{"role": "user", "content": "x"}]
        )
    assert nf.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as br:
        oai.chat.completions.create(
            model="chat-vllm", messages=[{"role": "user", "content": "x"}], temperature=7
        )
    assert br.value.param == "temperature"
    assert br.value.request_id and br.value.request_id.startswith("chatcmpl-")
