"""NUL characters in what a request carries and in what a model answers, on every database.

A NUL in the message text is a valid JSON string (`\\u0000`) and is served as sent: the audit
keeps the messages as JSON, which holds it. PostgreSQL text columns cannot hold a NUL at all, so
in the audit's text columns (the output, error messages) it is stored as U+FFFD; once, a model
emitting one made PostgreSQL refuse the whole batch of outcomes, leaving the records pending.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mindrouter.serving import ThreadServer
from mindrouter.sim import build_sim_app
from tests.gateway.databases import fresh_database
from tests.gateway.test_resilience import Cluster, backend, start_cluster, vllm_sim


class NulInOutput:
    """Middleware in front of an engine: every generated text starts with a NUL."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/v1/chat/completions":
            await self.app(scope, receive, send)
            return
        start: list[Message] = []

        async def rewrite(message: Message) -> None:
            if message["type"] == "http.response.start":
                start.append(message)
                return
            if start:
                # The body grows: the length the engine declared no longer holds.
                first = start.pop()
                headers = [(k, v) for k, v in first["headers"] if k != b"content-length"]
                await send({**first, "headers": headers})
            body = message.get("body", b"").replace(b'"content":"', b'"content":"\\u0000')
            await send({**message, "body": body})

        await self.app(scope, receive, rewrite)


@pytest.fixture(params=["sqlite", "postgresql"])
def c(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    engine = ThreadServer(NulInOutput(build_sim_app(vllm_sim()))).start()
    try:
        with fresh_database(request.param, tmp_path) as url:
            cluster = start_cluster([backend("nul", url=engine.url)], database_url=url)
            try:
                yield cluster
            finally:
                cluster.close()
    finally:
        engine.stop()


@pytest.mark.parametrize("stream", [False, True])
def test_nul_in_messages_and_output_is_served_and_audited(c: Cluster, stream: bool) -> None:
    body = {
        "model": "m",
        "stream": stream,
        "max_tokens": 4,
        "messages": [{"role": "user", "content": "a\x00b"}],
    }
    r = httpx.post(c.url + "/v1/chat/completions", json=body, headers=c.auth, timeout=30)
    assert r.status_code == 200, r.text
    assert "\\u0000" in r.text  # the client gets the model's answer as it was
    row = c.audit(1)[-1]
    assert row["status"] == "ok"
    assert row["messages"] == [{"role": "user", "content": "a\x00b"}]
    assert row["output"].startswith("\ufffd") and "\x00" not in row["output"]
