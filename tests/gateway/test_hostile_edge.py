"""Hostile input at the edge: every case here once gave a 500, a reset or a body read before the
key was checked; each now gets a 4xx in the caller's dialect."""

from __future__ import annotations

import asyncio
import socket

import httpx
import orjson
import pytest

from mindrouter.http import bodies
from mindrouter.stores.sql import open_stores
from tests.gateway.stack import Stack

MSG = [{"role": "user", "content": "hi"}]


def deep(n: int) -> object:
    v: object = 1
    for _ in range(n):
        v = [v]
    return v


@pytest.fixture(scope="module")
def admin_key(stack: Stack) -> str:
    async def make() -> str:
        stores = open_stores(stack.database_url)
        try:
            return (await stores.keys.create_key("tester", admin=True)).key
        finally:
            await stores.aclose()

    return asyncio.run(make())


@pytest.mark.parametrize(
    ("path", "body", "shape"),
    [
        ("/v1/chat/completions", {"model": "chat-vllm", "messages": MSG, "x": deep(300)}, "error"),
        (
            "/anthropic/v1/messages",
            {"model": "chat-vllm", "max_tokens": 5, "messages": MSG, "x": deep(300)},
            "type",
        ),
        (
            "/api/chat",
            {"model": "chat-vllm", "messages": MSG, "options": {"x": deep(300)}},
            "error",
        ),
    ],
)
def test_deep_json_is_400_naming_the_field(
    stack: Stack, path: str, body: object, shape: str
) -> None:
    r = httpx.post(stack.url + path, json=body, headers=stack.auth, timeout=10)
    assert r.status_code == 400
    assert shape in r.json()
    assert "nests deeper than 64" in r.text


@pytest.mark.parametrize("size", [2 * 1024 * 1024, 6 * 1024 * 1024])  # on a thread, in the child
def test_a_large_body_is_checked_as_a_small_one_is(stack: Stack, size: int) -> None:
    long = "word " * (size // 5)
    ok = {"model": "chat-vllm", "max_tokens": 5, "messages": [{"role": "user", "content": long}]}
    r = httpx.post(stack.url + "/v1/chat/completions", json=ok, headers=stack.auth, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    broken = b'{"model": "chat-vllm", "messages": "' + long.encode()
    r = httpx.post(
        stack.url + "/v1/chat/completions", content=broken, headers=stack.auth, timeout=60
    )
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    nested = {**ok, "x": deep(300)}
    r = httpx.post(stack.url + "/api/chat", json=nested, headers=stack.auth, timeout=60)
    assert r.status_code == 400 and "nests deeper than 64 levels (at x" in r.json()["error"]
    if size > bodies.OFF_PROCESS_BYTES:  # the child decoded them (the gateway runs in-process)
        assert bodies._child.proc is not None


def test_bad_json_without_a_key_is_401_everywhere(stack: Stack) -> None:
    for path in ("/v1/chat/completions", "/admin/groups", "/anthropic/v1/messages"):
        r = httpx.post(stack.url + path, content=b"{bad json", timeout=10)
        assert r.status_code == 401, path


def test_oversized_chunked_body_is_413_before_it_is_all_sent(stack: Stack) -> None:
    limit = stack.settings.max_body_bytes

    def chunks():  # type: ignore[no-untyped-def]
        for _ in range(limit // 65536 + 50):
            yield b"x" * 65536

    r = httpx.post(stack.url + "/admin/groups", content=chunks(), headers=stack.auth, timeout=30)
    assert r.status_code in (401, 403, 413)
    r = httpx.post(
        stack.url + "/v1/chat/completions", content=chunks(), headers=stack.auth, timeout=30
    )
    assert r.status_code == 413
    assert r.headers["connection"] == "close"


def test_admin_values_past_the_columns_are_400(stack: Stack, admin_key: str) -> None:
    auth = {"Authorization": f"Bearer {admin_key}"}
    cases = [
        ("post", "/admin/groups", {"name": "g", "rpm": 2**31}, "rpm"),
        ("post", "/admin/groups", {"name": "g", "token_budget": 2**63}, "token_budget"),
        ("post", "/admin/keys", {"user": "tester", "expires_days": 10**9}, "expires_days"),
        ("post", "/admin/groups", {"name": "a\x00b"}, "name"),
    ]
    with httpx.Client(base_url=stack.url, headers=auth, timeout=10) as c:
        for method, path, body, field in cases:
            r = c.request(method, path, json=body)
            assert r.status_code == 400, (path, body, r.text)
            assert r.json()["error"]["param"] == field
        assert c.post(f"/admin/keys/{2**70}/revoke").status_code == 404
        assert c.get("/admin/users", params={"group": "a\x00b"}).status_code == 400


def test_image_data_urls_and_huge_max_tokens_are_400(stack: Stack) -> None:
    for url in ("data:image/png;base64,!!!", "data:image/png;base64,"):
        content = [{"type": "image_url", "image_url": {"url": url}}]
        body = {"model": "vision-vllm", "messages": [{"role": "user", "content": content}]}
        r = httpx.post(stack.url + "/v1/chat/completions", json=body, headers=stack.auth)
        assert r.status_code == 400, r.text
    raw = b'{"model":"chat-vllm","max_tokens":1e30,"messages":[{"role":"user","content":"hi"}]}'
    r = httpx.post(stack.url + "/anthropic/v1/messages", content=raw, headers=stack.auth)
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_docs_openapi_and_metrics_are_private(stack: Stack, admin_key: str) -> None:
    for path in ("/openapi.json", "/metrics"):
        assert httpx.get(stack.url + path).status_code == 401
        assert httpx.get(stack.url + path, headers=stack.auth).status_code == 403
    admin = {"Authorization": f"Bearer {admin_key}"}
    assert httpx.get(stack.url + "/openapi.json", headers=admin).status_code == 200
    assert httpx.get(stack.url + "/docs", headers=admin).status_code == 404


def test_forwarded_for_from_an_untrusted_peer_is_ignored(stack: Stack, admin_key: str) -> None:
    headers = {**stack.auth, "X-Forwarded-For": "6.6.6.6"}
    body = {"model": "chat-vllm", "messages": MSG, "max_tokens": 2}
    r = httpx.post(stack.url + "/v1/chat/completions", json=body, headers=headers, timeout=10)
    assert r.status_code == 200
    admin = {"Authorization": f"Bearer {admin_key}"}
    audit = httpx.get(stack.url + "/admin/audit", params={"limit": 50}, headers=admin).json()
    assert audit and all(e["client_ip"] != "6.6.6.6" for e in audit)


def test_a_silent_connection_is_closed_after_the_header_timeout(stack: Stack) -> None:
    # The stack uses the default 15 s; a partial head from another loopback address is answered
    # with 408 and closed, while other clients are served meanwhile.
    s = socket.create_connection((stack.gateway.host, stack.gateway.port))
    s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n")
    assert httpx.get(stack.url + "/healthz").status_code == 200
    s.settimeout(40)
    data = s.recv(4096)
    assert data.startswith(b"HTTP/1.1 408")
    s.close()


async def test_a_large_body_is_decoded_when_the_child_has_died() -> None:
    value = {"messages": [{"role": "user", "content": "word " * (bodies.OFF_PROCESS_BYTES // 4)}]}
    body = orjson.dumps(value)
    assert await bodies.decode_body(body) == value
    proc = bodies._child.proc
    assert proc is not None
    with pytest.raises(bodies.ChildLost):
        bodies._child.decode("/nonexistent/body")  # the child dies of it
    assert proc.wait(timeout=10) != 0
    assert await bodies.decode_body(body) == value
    assert bodies._child.proc is not None and bodies._child.proc.pid != proc.pid
