"""A client that hangs up on a non-streamed request cancels it, as it does a stream: the engine
sees the connection close before it finished, the audit record ends `cancelled`, the caller is
charged the tokens generated until then, and the backend slot is free at once.

Here a real socket closes under uvicorn, in one dialect; every dialect, streamed and not, is
tested in process (tests/pipeline/test_cancellation.py) on the `http.disconnect` the server
sends."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.gateway.test_resilience import (
    MODEL,
    USER,
    Cluster,
    backend,
    request_body,
    start_cluster,
    vllm_sim,
    wait_for,
)

TOKENS = 40  # at 20 tokens per second: two seconds of generation, cut after a few tokens
BODIES: dict[str, tuple[str, dict[str, Any]]] = {
    "openai": ("/v1/chat/completions", {**request_body("openai", False), "max_tokens": TOKENS}),
}


@pytest.fixture(scope="module")
def slow() -> Iterator[Cluster]:
    c = start_cluster(
        [backend("one", vllm_sim(tokens_per_second=20, default_tokens=TOKENS), max_concurrent=1)],
        capacity_wait_s=5,
    )
    try:
        yield c
    finally:
        c.close()


def send_then_hang_up(
    c: Cluster, path: str, body: dict[str, Any], after: Callable[[], bool]
) -> float:
    """Send one request on a raw connection and close it once `after()` holds; returns when
    (monotonic clock) it was closed."""
    url = urlsplit(c.url)
    payload = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {url.netloc}\r\nAuthorization: Bearer {c.key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    ).encode()
    with socket.create_connection((url.hostname, url.port)) as sock:
        sock.sendall(head + payload)
        wait_for(after, "the engine to start generating")
    return time.monotonic()


@pytest.mark.parametrize("dialect", list(BODIES))
def test_a_client_leaving_a_non_streamed_request_cancels_it(slow: Cluster, dialect: str) -> None:
    c = slow
    path, body = BODIES[dialect]
    state = c.states["one"]
    before_records, before_tokens = len(state.records), c.period_tokens()

    def generating() -> bool:
        return len(state.records) > before_records and state.records[-1].completion_tokens >= 3

    send_then_hang_up(c, path, body, generating)
    record = state.records[before_records]
    wait_for(lambda: record.cancelled_at is not None, "the engine to see the client leave")
    # The engine stopped before it would have finished.
    assert 3 <= record.completion_tokens < TOKENS
    (row,) = c.audit(1)
    assert (row["status"], row["backend"]) == ("cancelled", "one")
    assert 0 < row["output_tokens"] < TOKENS and row["output"]
    charged = wait_for(lambda: c.period_tokens() - before_tokens, "the partial usage")
    assert charged == row["input_tokens"] + row["output_tokens"]
    # The only slot was given back: the next request is served at once, not after the wait.
    assert c.backends()["one"]["in_flight"] == 0
    r = c.openai().chat.completions.create(model=MODEL, messages=USER, max_tokens=2)
    assert r.choices[0].message.content
