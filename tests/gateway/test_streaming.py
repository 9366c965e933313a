"""Streams through the gateway are incremental end to end, and a client that leaves stops the
backend's work."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from tests.gateway.stack import SIM_ENGINES, Stack, start_stack


@pytest.fixture(scope="module")
def slow_stack() -> Iterator[Stack]:
    # 25 tokens/s and 12 tokens: generation takes about half a second.
    s = start_stack(tokens_per_second=25.0, default_tokens=12)
    try:
        yield s
    finally:
        s.close()


@pytest.mark.parametrize("engine", SIM_ENGINES)
def test_first_chunk_arrives_while_backend_still_generating(slow_stack: Stack, engine: str) -> None:
    state = slow_stack.sim_state(engine)
    body = {
        "model": f"chat-{engine}",
        "messages": [{"role": "user", "content": "go"}],
        "stream": True,
    }
    before = len(state.records)
    seen_unfinished = False
    content_chunks = 0
    with httpx.stream(
        "POST",
        slow_stack.url + "/v1/chat/completions",
        json=body,
        headers=slow_stack.auth,
        timeout=30,
    ) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: ") and '"content":"' in line and '"content":""' not in line:
                content_chunks += 1
                if content_chunks == 1:
                    record = state.records[before]
                    # The backend has produced a token but not yet the rest of the reply.
                    seen_unfinished = record.finished_at is None
    assert seen_unfinished
    assert content_chunks == 12  # one chunk per token, none coalesced


@pytest.mark.parametrize("engine", SIM_ENGINES)
def test_client_disconnect_cancels_upstream(slow_stack: Stack, engine: str) -> None:
    state = slow_stack.sim_state(engine)
    body = {
        "model": f"chat-{engine}",
        "messages": [{"role": "user", "content": "go"}],
        "stream": True,
    }
    before = len(state.records)
    with httpx.stream(
        "POST",
        slow_stack.url + "/v1/chat/completions",
        json=body,
        headers=slow_stack.auth,
        timeout=30,
    ) as r:
        seen = 0
        for line in r.iter_lines():
            if line.startswith("data: ") and '"content":"' in line:
                seen += 1
                if seen == 3:
                    break
        closed_at = time.monotonic()
    record = state.records[before]
    deadline = time.monotonic() + 5
    while record.cancelled_at is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert record.cancelled_at is not None, "the backend never saw the client leave"
    assert record.cancelled_at - closed_at < 0.1
    assert record.completion_tokens < 12
