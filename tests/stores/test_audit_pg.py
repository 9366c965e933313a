"""The audit writer's asyncpg connection: its arguments are read as SQLAlchemy reads the URL, and
a batch is atomic."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, timezone

import asyncpg
import pytest
from bench.harness import FAST_HASHER

from mindrouter.stores.audit_records import AuditOutcome, AuditStart
from mindrouter.stores.sql import audit_pg, open_stores
from mindrouter.stores.sql.audit_pg import (
    AuditConnectionLost,
    AuditRowsRejected,
    PgAuditConnection,
    connect_args,
)
from mindrouter.stores.sql.audit_values import outcome_values, start_values

from .conftest import SessionDatabases, unique
from .test_audit import start


def test_dialect_options_are_not_sent_to_the_server() -> None:
    url = "postgresql+asyncpg://me:secret@db.example:6543/audit?prepared_statement_cache_size=0&ssl=require"
    assert connect_args(url) == {
        "host": "db.example",
        "port": 6543,
        "user": "me",
        "password": "secret",
        "database": "audit",
        "ssl": "require",
    }


@pytest.mark.parametrize("bad", ["encoded by the driver", "refused by the server"])
async def test_a_batch_is_written_whole_or_not_at_all(
    session_databases: SessionDatabases, bad: str
) -> None:
    """The batch runs in the implicit transaction of one round trip: a row that fails, whether
    asyncpg cannot encode it or PostgreSQL refuses it, leaves none of the batch behind."""
    url = session_databases.url("postgresql")
    conn = PgAuditConnection(url)
    good = start_values(start(unique("good")))
    broken = start_values(start(unique("bad")))
    if bad == "encoded by the driver":
        broken["attempts"] = "three"
    else:
        broken["user_agent"] = "a NUL \x00 PostgreSQL text cannot hold"
    try:
        with pytest.raises(AuditRowsRejected):
            await conn.insert([good, broken])
        await conn.insert([start_values(start(unique("after")))])  # the connection still works
    finally:
        await conn.close()
    stores = open_stores(url, hasher=FAST_HASHER)
    try:
        assert await stores.audit_log.get(good["uuid"]) is None
        assert await stores.audit_log.get(broken["uuid"]) is None
    finally:
        await stores.aclose()


async def test_times_in_any_zone_are_stored_as_the_same_instant(
    session_databases: SessionDatabases,
) -> None:
    """The columns hold naive UTC: an aware time in another zone is converted, to the
    microsecond, and a naive one is refused rather than guessed."""
    url = session_databases.url("postgresql")
    conn = PgAuditConnection(url)
    at = datetime(2026, 3, 29, 1, 30, 15, 123456, tzinfo=timezone(timedelta(hours=-5)))
    row = start_values(start(unique("zoned"), created_at=at))
    naive = start_values(start(unique("naive"), created_at=datetime(2026, 1, 1)))
    try:
        await conn.insert([row])
        with pytest.raises(ValueError, match="naive datetime"):
            await conn.insert([naive])
    finally:
        await conn.close()
    stores = open_stores(url, hasher=FAST_HASHER)
    try:
        stored = await stores.audit_log.get(row["uuid"])
    finally:
        await stores.aclose()
    assert stored is not None
    assert stored.created_at == at
    assert stored.created_at.astimezone(UTC).replace(tzinfo=None) == datetime(
        2026, 3, 29, 6, 30, 15, 123456
    )


async def test_a_batch_of_outcomes_reads_back_as_written(
    session_databases: SessionDatabases,
) -> None:
    """The outcome batch travels as one JSON document: text with quotes, line breaks and any
    script, nulls, fractions of a millisecond and times to the microsecond come back as they
    went; a value JSON cannot hold (a lone surrogate) fails the batch as a refused one."""
    url = session_databases.url("postgresql")
    conn = PgAuditConnection(url)
    rows = [start_values(start(unique(f"o{i}"))) for i in range(3)]
    done = datetime(2026, 5, 4, 3, 2, 1, 654321, tzinfo=UTC)
    outcomes = [
        AuditOutcome(
            status="ok",
            output='He said "hi"\nthen \\ left: é 漢字 🙂',
            input_tokens=3,
            output_tokens=5,
            backend="b-1",
            attempts=1,
            queued_ms=0.125,
            first_token_ms=12.5,
            total_ms=33.0625,
            completed_at=done,
        ),
        AuditOutcome(status="error", error_message="boom", attempts=2, completed_at=done),
        AuditOutcome(status="cancelled", output="", completed_at=done),
    ]
    try:
        await conn.insert(rows)
        await conn.complete(
            [outcome_values(r["uuid"], o) for r, o in zip(rows, outcomes, strict=True)]
        )
        with pytest.raises(AuditRowsRejected):
            await conn.complete([outcome_values(rows[0]["uuid"], AuditOutcome("ok", "\ud800"))])
    finally:
        await conn.close()
    stores = open_stores(url, hasher=FAST_HASHER)
    try:
        seen = [await stores.audit_log.get(r["uuid"]) for r in rows]
    finally:
        await stores.aclose()
    first, second, third = seen
    assert first is not None and second is not None and third is not None
    assert first.status == "ok" and first.output == outcomes[0].output
    assert (first.input_tokens, first.output_tokens, first.attempts) == (3, 5, 1)
    assert (first.queued_ms, first.first_token_ms, first.total_ms) == (0.125, 12.5, 33.0625)
    assert first.completed_at == done and first.backend == "b-1"
    assert (second.status, second.error_message, second.first_token_ms) == ("error", "boom", None)
    assert (third.status, third.output) == ("cancelled", "")


async def test_a_statement_that_does_not_finish_in_time_fails_and_the_next_one_works(
    session_databases: SessionDatabases, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A statement stuck behind a lock is cut off after the command timeout, its connection
    closed, and tried once more on a new one (stuck again: the batch fails); once the lock is
    gone the writer goes on. Statements that finish in time, however many, are never cut off."""
    monkeypatch.setattr(audit_pg, "COMMAND_TIMEOUT_S", 0.3)
    url = session_databases.url("postgresql")
    conn = PgAuditConnection(url)
    locker = await asyncpg.connect(**connect_args(url))
    try:
        loop = asyncio.get_running_loop()
        until = loop.time() + 0.8  # past two timeouts of statements that finish in time
        while loop.time() < until:
            await conn.insert([start_values(start(unique("quick")))])
        stuck = start_values(start(unique("stuck")))
        async with locker.transaction():
            await locker.execute("LOCK TABLE audit_records IN ACCESS EXCLUSIVE MODE")
            began = loop.time()
            with pytest.raises(AuditConnectionLost):
                await conn.insert([stuck])
            assert loop.time() - began >= 2 * 0.3 - 0.01  # two attempts, each cut off
        await conn.insert([stuck])
    finally:
        await locker.close()
        await conn.close()
    stores = open_stores(url, hasher=FAST_HASHER)
    try:
        assert await stores.audit_log.get(stuck["uuid"]) is not None
    finally:
        await stores.aclose()


async def test_a_begin_does_not_wait_behind_an_outcome_batch(
    session_databases: SessionDatabases, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The outcomes have a connection and a task of their own: while a batch of them is on its
    way, the next request's record is still committed at once."""
    url = session_databases.url("postgresql")
    stores = open_stores(url, hasher=FAST_HASHER)
    writer = stores.audit
    assert writer.outcomes_pg is not writer.pg
    held = asyncio.Event()
    reached = asyncio.Event()
    complete = writer.outcomes_pg.complete  # type: ignore[union-attr]

    async def slow(rows: list[dict[str, object]]) -> None:
        reached.set()
        await held.wait()
        await complete(rows)

    monkeypatch.setattr(writer.outcomes_pg, "complete", slow)
    try:
        first = start(unique("first"))
        await writer.begin(first)
        writer.complete(first.uuid, AuditOutcome(status="ok", input_tokens=3, output_tokens=4))
        await asyncio.wait_for(reached.wait(), 5)  # the outcome batch is under way, and held
        second = start(unique("second"))
        await asyncio.wait_for(writer.begin(second), 5)
        assert (await stores.audit_log.get(second.uuid)) is not None
        assert not await writer.written(0.05)
        held.set()
        assert await writer.written(5)
        row = await stores.audit_log.get(first.uuid)
        assert row is not None and (row.status, row.output_tokens) == ("ok", 4)
    finally:
        held.set()
        await stores.aclose()


async def test_an_outcome_queued_with_its_begin_is_never_written_before_it(
    session_databases: SessionDatabases,
) -> None:
    """A caller that queues a record's outcome right after its start, without waiting for the
    commit, while an outcome batch is being started: the outcome still follows the insert."""
    stores = open_stores(session_databases.url("postgresql"), hasher=FAST_HASHER)
    writer = stores.audit
    loop = asyncio.get_running_loop()
    ok = AuditOutcome(status="ok", input_tokens=1, output_tokens=1)
    try:
        for i in range(5):
            earlier = start(unique("earlier"))
            await writer.begin(earlier)
            writer.complete(earlier.uuid, ok)
            late = start(unique("late"))

            def begin_and_complete(record: AuditStart = late) -> None:
                writer.begin(record)
                writer.complete(record.uuid, ok)

            waiting = asyncio.ensure_future(writer.written(5))
            await asyncio.sleep(0)  # the writer is woken to write the outcome batch now...
            loop.call_soon(begin_and_complete)  # ...and this runs just after it started
            assert await waiting
            await writer.flush()
            row = await stores.audit_log.get(late.uuid)
            assert row is not None and row.status == "ok", (i, row)
    finally:
        await stores.aclose()
