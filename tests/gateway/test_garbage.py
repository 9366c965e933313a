"""A served request leaves no garbage that only the collector can free.

Objects caught in a reference loop outlive their request until the collector finds them, and
a stream's, alive through several of its young-generation passes, are promoted to the oldest
generation: under a few hundred concurrent streams they piled up there by the tens of
thousands, and the full passes that freed them stopped the event loop for tens of
milliseconds (every stream's chunks held behind). The request's own objects (the server's
response cycle, the request context, the disconnect watch) must go when the request ends,
freed by their reference counts alone.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.gateway.stack import Stack, start_stack

PER_REQUEST = {"RequestResponseCycle", "RequestContext", "_Watch", "Flight"}


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    s = start_stack()
    yield s
    s.close()


def _cyclic_garbage() -> list[str]:
    """The per-request objects that only a collection would free now."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        return [type(o).__name__ for o in gc.garbage if type(o).__name__ in PER_REQUEST]
    finally:
        gc.garbage.clear()
        gc.set_debug(0)


@pytest.mark.parametrize("stream", [False, True])
def test_a_request_leaves_nothing_for_the_collector(stack: Stack, stream: bool) -> None:
    gc.collect()  # what the test run left so far
    body = {
        "model": "chat-openai",
        "messages": [{"role": "user", "content": "Hello"}],
        "stream": stream,
        "max_tokens": 8,
    }
    # New connections each time: the protocol of a kept-alive one still holds its last cycle.
    for _ in range(4):
        with httpx.Client(base_url=stack.url, headers=stack.auth) as client:
            r = client.post("/v1/chat/completions", json=body)
            assert r.status_code == 200
            assert r.text
    # The server's task ends just after the client has read the end of the response.
    time.sleep(0.3)
    assert _cyclic_garbage() == []
