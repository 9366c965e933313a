"""The audit trail through the gateway, on SQLite, PostgreSQL and MariaDB.

- Committed before the backend sees the request: the simulated engine sits behind an ASGI
  middleware that, when a generation request arrives, looks the request's audit row up through a
  database connection of its own (found by a nonce in the prompt) before letting it through. Every
  request, in every dialect, streamed or not, one at a time or twenty at once, found its row
  there, still `pending`.
- A backend that dies mid-stream (the engine cuts the stream after 3 chunks) leaves the record
  completed as `error`, with the error message and the tokens relayed before the cut.
- A client that leaves mid-stream leaves it `cancelled`, with the tokens generated so far (within
  one chunk of the engine's own count), and the engine saw the cancellation.

Records are read back through GET /admin/audit with an admin key.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sqlalchemy import Text, cast, select
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mindrouter.stores.sql.schema import audit_records
from tests.gateway.databases import fresh_database, stores_at
from tests.gateway.procs import (
    DIALECTS,
    PATHS,
    Rig,
    bearer,
    chat_body,
    http,
    start_rig,
    text_of_chunk,
)
from tests.stores.conftest import run_in_thread

ENGINES = ("sqlite", "postgresql", "mariadb")
NONCE_BYTES = 8


class AuditProbe:
    """ASGI middleware in front of the engine: for each generation request, reads the audit
    table over its own connection before the engine gets the request, and notes what it found
    (nonce -> the row's status, or None when there was no row)."""

    def __init__(self, app: ASGIApp, database_url: str) -> None:
        self.app = app
        self.database_url = database_url
        self.found: dict[str, str | None] = {}
        self._engine: AsyncEngine | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        nonce = _nonce_in(body.decode(errors="replace"))
        if nonce is not None:
            self.found[nonce] = await self._status_of(nonce)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _status_of(self, nonce: str) -> str | None:
        if self._engine is None:
            # Made on the engine's own event loop; no pool, so nothing outlives a lookup.
            self._engine = create_async_engine(self.database_url, poolclass=NullPool)
        query = select(audit_records.c.status).where(
            cast(audit_records.c.messages, Text).like(f"%{nonce}%")
        )
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        assert len(rows) <= 1
        return str(rows[0].status) if rows else None


def _nonce_in(text: str) -> str | None:
    start = text.find("nonce-")
    if start < 0:
        return None
    return text[start : start + len("nonce-") + 2 * NONCE_BYTES]


def new_nonce() -> str:
    return "nonce-" + secrets.token_hex(NONCE_BYTES)


def request_body(dialect: str, nonce: str, stream: bool, max_tokens: int = 8) -> dict[str, Any]:
    return chat_body(dialect, stream=stream, max_tokens=max_tokens, text=f"audit me {nonce}")


@dataclass
class Setup:
    engine: str
    rig: Rig
    probe: AuditProbe
    key: str
    admin_key: str

    def auth(self, key: str | None = None) -> dict[str, str]:
        return bearer(key or self.key)

    def record(self, nonce: str) -> dict[str, Any]:
        return self.records([nonce])[nonce]

    def records(self, nonces: list[str], timeout: float = 10) -> dict[str, dict[str, Any]]:
        """The audit entries holding these nonces, from GET /admin/audit, once all have their
        outcome (completions are written shortly after a request ends)."""
        deadline = time.monotonic() + timeout
        while True:
            r = http.get(
                self.rig.url + "/admin/audit",
                params={"user": "alice", "limit": 1000},
                headers=self.auth(self.admin_key),
                timeout=10,
            )
            assert r.status_code == 200, r.text
            found: dict[str, dict[str, Any]] = {}
            for entry in r.json():
                nonce = _nonce_in(json.dumps(entry["messages"]))
                if nonce in nonces:
                    assert nonce not in found, "two records for one request"
                    found[nonce] = entry
            pending = [n for n in nonces if n not in found or found[n]["status"] == "pending"]
            if not pending:
                return found
            assert time.monotonic() < deadline, f"audit records not settled: {pending}"
            time.sleep(0.05)


async def _keys(url: str) -> tuple[str, str]:
    async with stores_at(url) as stores:
        user = (await stores.keys.create_key("alice")).key
        admin = (await stores.keys.create_key("ops", admin=True)).key
        return user, admin


@pytest.fixture(scope="module", params=ENGINES)
def setup(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Setup]:
    engine = str(request.param)
    with fresh_database(engine, tmp_path_factory.mktemp(f"audit-{engine}")) as url:
        probes: list[AuditProbe] = []

        def wrap(app: ASGIApp) -> ASGIApp:
            probes.append(AuditProbe(app, url))
            return probes[0]

        rig = start_rig(
            url,
            groups=[{"name": "testers"}],
            users=[{"name": "alice", "group": "testers"}, {"name": "ops", "group": "testers"}],
            wrap=wrap,
        )
        try:
            key, admin = run_in_thread(_keys(url))
            yield Setup(engine, rig, probes[0], key, admin)
        finally:
            rig.close()


# -- committed before the backend ---------------------------------------------------------------


def _send(setup: Setup, dialect: str, nonce: str, stream: bool) -> None:
    body = request_body(dialect, nonce, stream)
    with http.stream(
        "POST", setup.rig.url + PATHS[dialect], json=body, headers=setup.auth(), timeout=30
    ) as r:
        assert r.status_code == 200, r.read()
        r.read()


async def _send_many(setup: Setup, nonces: list[str]) -> None:
    async with httpx.AsyncClient(headers=setup.auth(), timeout=60) as client:

        async def one(nonce: str) -> None:
            body = request_body("openai", nonce, stream=False)
            r = await client.post(setup.rig.url + PATHS["openai"], json=body)
            assert r.status_code == 200, r.text

        await asyncio.gather(*(one(n) for n in nonces))


def test_the_record_is_committed_before_the_backend_sees_the_request(setup: Setup) -> None:
    one_by_one = {(d, s): new_nonce() for d in DIALECTS for s in (False, True)}
    for (dialect, stream), nonce in one_by_one.items():
        _send(setup, dialect, nonce, stream)
    writer = setup.rig.app.state.runtime.stores.audit
    batches_before = writer.stats.begin_batches
    together = [new_nonce() for _ in range(20)]
    asyncio.run(_send_many(setup, together))
    begin_batches = writer.stats.begin_batches - batches_before

    nonces = [*one_by_one.values(), *together]
    seen = {n: setup.probe.found.get(n, "never reached the engine") for n in nonces}
    # The row was there, not yet completed, every time the engine got a request.
    assert seen == dict.fromkeys(nonces, "pending"), seen
    entries = setup.records(nonces)
    for entry in entries.values():
        assert entry["status"] == "ok"
        assert entry["user_name"] == "alice"
        assert entry["key_prefix"] == setup.key[:12]
        assert entry["output_tokens"] and entry["output"]
    for (dialect, stream), nonce in one_by_one.items():
        entry = entries[nonce]
        assert entry["endpoint"] == PATHS[dialect]
        assert entry["stream"] is stream
    print(f"\n{setup.engine}: 20 concurrent requests' audit rows in {begin_batches} commits")
    assert begin_batches <= 20


# -- how streams end -----------------------------------------------------------------------------


def _stream_until(
    setup: Setup, dialect: str, nonce: str, stop_after: int | None, max_tokens: int = 8
) -> list[str]:
    """Streams a request; returns the text chunks received, leaving after `stop_after` of them."""
    texts: list[str] = []
    body = request_body(dialect, nonce, stream=True, max_tokens=max_tokens)
    with http.stream(
        "POST", setup.rig.url + PATHS[dialect], json=body, headers=setup.auth(), timeout=30
    ) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            text = text_of_chunk(dialect, line)
            if text is not None:
                texts.append(text)
                if stop_after is not None and len(texts) >= stop_after:
                    break
    return texts


def _engine_record(setup: Setup, nonce: str) -> Any:
    found = [r for r in setup.rig.sim_state.records if nonce in json.dumps(r.body)]
    assert len(found) == 1
    return found[0]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_backend_dying_mid_stream_completes_the_record_as_an_error(
    setup: Setup, dialect: str
) -> None:
    nonce = new_nonce()
    setup.rig.sim_state.config.drop_after = 3
    try:
        texts = _stream_until(setup, dialect, nonce, stop_after=None)
    finally:
        setup.rig.sim_state.config.drop_after = None
    # A dropped stream counts against the backend's health; one good answer puts it back in
    # service for the tests that follow.
    _send(setup, dialect, new_nonce(), stream=True)
    engine = _engine_record(setup, nonce)
    assert engine.fault == "drop"
    assert 0 < len(texts) < engine.completion_tokens + 1
    entry = setup.record(nonce)
    assert entry["status"] == "error"
    assert entry["error_message"] and "dropped" in entry["error_message"]
    # What was relayed before the cut is recorded and charged: one token per chunk.
    assert entry["output_tokens"] == len(texts)
    assert entry["output"] == "".join(texts)
    assert abs(entry["output_tokens"] - engine.completion_tokens) <= 1
    assert entry["input_tokens"] and entry["input_tokens"] > 0


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_client_leaving_mid_stream_completes_the_record_as_cancelled(
    setup: Setup, dialect: str
) -> None:
    nonce = new_nonce()
    config = setup.rig.sim_state.config
    config.tokens_per_second = 10.0
    try:
        texts = _stream_until(setup, dialect, nonce, stop_after=3, max_tokens=40)
        entry = setup.record(nonce)
    finally:
        config.tokens_per_second = 0.0
    engine = _engine_record(setup, nonce)
    assert engine.cancelled_at is not None, "the engine never saw the client leave"
    assert len(texts) == 3
    assert entry["status"] == "cancelled"
    assert entry["error_message"] is None
    assert 3 <= entry["output_tokens"] < 40
    assert abs(entry["output_tokens"] - engine.completion_tokens) <= 1
    assert entry["output"].startswith("".join(texts))
