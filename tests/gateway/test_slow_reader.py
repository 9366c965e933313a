"""A client that reads a stream more slowly than the engine writes it gets every chunk, in
order: once the client's socket is full, chunks wait in the gateway (the relay stops writing
from the engine connection's callback and its task waits for the socket to drain) rather than
being dropped, and the whole answer is accounted."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.gateway.test_resilience import Cluster, backend, start_cluster, vllm_sim

TOKENS = 3000  # about 500 KB of OpenAI chunks: far more than the sockets between hold


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = start_cluster([backend("fast", vllm_sim(default_tokens=TOKENS))])
    # The gateway's sockets to its clients (they inherit the listener's) hold a few KB, not
    # the megabytes the kernel would grow them to: the gateway's own buffer fills.
    c.gateway._sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    try:
        yield c
    finally:
        c.close()


def test_a_client_reading_slowly_gets_every_chunk_in_order(cluster: Cluster) -> None:
    c = cluster
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "a long answer"}],
        "stream": True,
        "max_tokens": TOKENS,
    }
    texts: list[str] = []
    with (
        httpx.Client(timeout=30) as client,
        client.stream("POST", c.url + "/v1/chat/completions", json=body, headers=c.auth) as r,
    ):
        assert r.status_code == 200
        time.sleep(1.0)  # the engine has written everything; the client has read nothing
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    for line in lines[:-1]:
        chunk = json.loads(line[6:])
        assert "error" not in chunk, chunk
        for choice in chunk["choices"]:
            if text := (choice.get("delta") or {}).get("content"):
                texts.append(text)
    assert len(texts) == TOKENS
    (record,) = c.audit(1)
    assert record["status"] == "ok"
    assert record["output_tokens"] == TOKENS
    assert record["output"] == "".join(texts)
