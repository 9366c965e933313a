"""A served request leaves no garbage that only the collector can free.

Objects caught in a reference loop outlive their request until the collector finds them, and
a stream's, alive through several of its young-generation passes, are promoted to the oldest
generation: under a few hundred concurrent streams they piled up there by the tens of
thousands, and the full passes that freed them stopped the event loop for tens of
milliseconds (every stream's chunks held behind). What a request makes in the gateway, its
server and its framework (the server's response cycle, the request context, the disconnect
watch, their closures and coroutines) must go when the request ends, freed by their reference
counts alone: checked for each dialect's generation route, whole and streamed.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import starlette
import uvicorn

import mindrouter
from tests.gateway.stack import Stack, start_stack

# Whose objects a request makes: the gateway's own, and the server's and framework's under it.
PACKAGES = (mindrouter, starlette, uvicorn)
_NAMES = tuple(package.__name__ for package in PACKAGES)
# By directory, not by a name in the path: a checkout may well sit in a folder named after the
# project, and the test run's own objects would then count as the gateway's.
_ROOTS = tuple(os.path.dirname(package.__file__ or "") + os.sep for package in PACKAGES)


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    s = start_stack()
    yield s
    s.close()


def _made_by(o: object) -> str | None:
    """Where `o` comes from, if one of the packages made it: its code's file for a function,
    a method or a coroutine, its class's module otherwise."""
    code = getattr(o, "__code__", None)  # functions, and methods through their function
    code = code or getattr(o, "cr_code", None) or getattr(o, "ag_code", None)
    if code is not None:
        return code.co_filename if code.co_filename.startswith(_ROOTS) else None
    module = type(o).__module__
    return module if module.split(".")[0] in _NAMES else None


def _cyclic_garbage() -> list[str]:
    """What the gateway, its server and its framework made that only a collection would free."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        return [f"{type(o).__qualname__} ({where})" for o in gc.garbage if (where := _made_by(o))]
    finally:
        gc.garbage.clear()
        gc.set_debug(0)


MESSAGES = [{"role": "user", "content": "Hello"}]
# One generation route per dialect: (path, body without `stream`).
ROUTES: dict[str, tuple[str, dict[str, Any]]] = {
    "openai": ("/v1/chat/completions", {"model": "chat-openai", "messages": MESSAGES}),
    "anthropic": (
        "/v1/messages",
        {"model": "chat-vllm", "max_tokens": 8, "messages": MESSAGES},
    ),
    "ollama": ("/api/chat", {"model": "chat-ollama", "messages": MESSAGES}),
    "responses": ("/v1/responses", {"model": "chat-llamacpp", "input": "Hello"}),
}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("dialect", sorted(ROUTES))
def test_a_request_leaves_nothing_for_the_collector(
    stack: Stack, dialect: str, stream: bool
) -> None:
    gc.collect()  # what the test run left so far
    path, body = ROUTES[dialect]
    # New connections each time: the protocol of a kept-alive one still holds its last cycle.
    for _ in range(4):
        with httpx.Client(base_url=stack.url, headers=stack.auth) as client:
            r = client.post(path, json={**body, "stream": stream})
            assert r.status_code == 200, r.text
            assert r.text
    # The server's task ends just after the client has read the end of the response.
    time.sleep(0.3)
    assert _cyclic_garbage() == []
