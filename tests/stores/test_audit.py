"""The audit trail: durable before begin() returns, group commit, completion, queries, purge."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import event

from mindrouter.errors import InternalError
from mindrouter.stores.audit_records import AuditFilter, AuditOutcome, AuditStart
from mindrouter.stores.sql import SqlStores, open_stores
from mindrouter.stores.sql.audit_writer import AuditWriter

from .conftest import FAST_HASHER, SessionDatabases, drop_other_connections, unique

MESSAGES = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": [{"type": "text", "text": "héllo ✓"}]},
]


def start(user: str = "alice", **fields: object) -> AuditStart:
    values: dict[str, object] = {
        "user_id": None,
        "user_name": user,
        "key_id": 7,
        "key_prefix": "mr2_AbCdEfGh",
        "model": "llama-3",
        "endpoint": "/v1/chat/completions",
        "messages": MESSAGES,
        "stream": True,
        "client_ip": "10.0.0.1",
        "user_agent": "openai-python/1.0",
    }
    values.update(fields)
    return AuditStart(**values)  # type: ignore[arg-type]


class Commits:
    """Transactions the writer committed from now on: counted by SQLAlchemy's commit event where
    it writes through SQLAlchemy, by the writer's own counts where it writes straight on asyncpg
    (PostgreSQL)."""

    def __init__(self, writer: AuditWriter) -> None:
        self.writer = writer
        self.events: list[int] = []
        self.start = self._batches()
        if writer.pg is None:
            event.listen(writer.engine.sync_engine, "commit", lambda _conn: self.events.append(1))

    def _batches(self) -> int:
        return self.writer.stats.begin_batches + self.writer.stats.complete_batches

    def __len__(self) -> int:
        if self.writer.pg is None:
            return len(self.events)
        return self._batches() - self.start


def count_commits(writer: AuditWriter) -> Commits:
    return Commits(writer)


async def test_begin_is_committed_before_it_returns(stores: SqlStores, db_url: str) -> None:
    observer = open_stores(db_url, hasher=FAST_HASHER)
    try:
        record = start(unique("u"))
        await stores.audit.begin(record)
        seen = await observer.audit_log.get(record.uuid)  # another engine, another connection
        assert seen is not None
        assert (seen.status, seen.messages, seen.stream, seen.key_prefix) == (
            "pending",
            MESSAGES,
            True,
            "mr2_AbCdEfGh",
        )

        stores.audit.complete(
            record.uuid,
            AuditOutcome(
                status="ok",
                output="hi",
                input_tokens=12,
                output_tokens=3,
                backend="gpu-1",
                attempts=2,
                queued_ms=1.5,
                first_token_ms=20.0,
                total_ms=99.0,
            ),
        )
        await stores.audit.flush()
        done = await observer.audit_log.get(record.uuid)
        assert done is not None
        assert (done.status, done.output, done.input_tokens, done.output_tokens) == (
            "ok",
            "hi",
            12,
            3,
        )
        assert (done.backend, done.attempts, done.total_ms) == ("gpu-1", 2, 99.0)
        assert done.completed_at is not None
    finally:
        await observer.aclose()


async def test_concurrent_begins_share_transactions(stores: SqlStores) -> None:
    commits = count_commits(stores.audit)
    records = [start(unique("u")) for _ in range(40)]
    await asyncio.gather(*(stores.audit.begin(r) for r in records))
    assert len(commits) <= 3, f"{len(commits)} transactions for 40 concurrent begins"
    assert stores.audit.stats.begun == 40
    for r in records:
        assert await stores.audit_log.get(r.uuid) is not None


async def test_a_record_is_written_even_if_its_caller_goes_away(stores: SqlStores) -> None:
    record = start(unique("u"))
    committed = stores.audit.begin(record)
    await asyncio.sleep(0)
    committed.cancel()  # as a caller awaiting it unshielded does when it is cancelled
    stores.audit.complete(record.uuid, AuditOutcome(status="cancelled"))
    await stores.audit.flush()
    written = await stores.audit_log.get(record.uuid)
    assert written is not None and written.status == "cancelled"


async def test_one_bad_record_does_not_fail_its_batch(stores: SqlStores) -> None:
    good, bad = start(unique("u")), start(unique("u"), messages=[object()])
    results = await asyncio.gather(
        stores.audit.begin(good), stores.audit.begin(bad), return_exceptions=True
    )
    assert results[0] is None and isinstance(results[1], InternalError)
    assert await stores.audit_log.get(good.uuid) is not None
    assert await stores.audit_log.get(bad.uuid) is None


async def test_close_writes_queued_completions(db_url: str) -> None:
    writer_stores = open_stores(db_url, hasher=FAST_HASHER)
    record = start(unique("u"))
    await writer_stores.audit.begin(record)
    writer_stores.audit.complete(record.uuid, AuditOutcome(status="error", error_message="boom"))
    await writer_stores.aclose()
    reader = open_stores(db_url, hasher=FAST_HASHER)
    try:
        seen = await reader.audit_log.get(record.uuid)
        assert seen is not None and (seen.status, seen.error_message) == ("error", "boom")
    finally:
        await reader.aclose()


async def test_query_filters(stores: SqlStores) -> None:
    user, model = unique("u"), unique("m")
    base = datetime.now(UTC) - timedelta(hours=1)
    records = [
        start(user, model=model, created_at=base + timedelta(minutes=i), key_id=100 + i % 2)
        for i in range(4)
    ]
    for r in records:
        await stores.audit.begin(r)
    stores.audit.complete(records[0].uuid, AuditOutcome(status="ok"))
    await stores.audit.flush()

    def uuids(found: list) -> list[str]:  # type: ignore[type-arg]
        return [e.uuid for e in found]

    q = stores.audit_log.query
    newest_first = [r.uuid for r in reversed(records)]
    assert uuids(await q(AuditFilter(user=user))) == newest_first
    assert uuids(await q(AuditFilter(model=model, limit=2))) == newest_first[:2]
    assert uuids(await q(AuditFilter(user=user, status="ok"))) == [records[0].uuid]
    assert uuids(await q(AuditFilter(user=user, key="101"))) == [records[3].uuid, records[1].uuid]
    window = AuditFilter(
        user=user, since=base + timedelta(minutes=1), until=base + timedelta(minutes=3)
    )
    assert uuids(await q(window)) == [records[2].uuid, records[1].uuid]
    assert len(await q(AuditFilter(user=user, key="mr2_AbCdEfGh"))) == 4


async def test_purge_blanks_old_content_and_keeps_lifetime_usage(stores: SqlStores) -> None:
    group, name = unique("g"), unique("u")
    await stores.directory.create_group(group)
    user = await stores.directory.create_user(name, group)
    now = datetime.now(UTC)
    await stores.usage.add_usage(user.id, 500, now)
    old = start(name, user_id=user.id, created_at=now - timedelta(days=400))
    recent = start(name, user_id=user.id, created_at=now - timedelta(days=1))
    await stores.audit.begin(old)
    await stores.audit.begin(recent)
    stores.audit.complete(old.uuid, AuditOutcome(status="ok", output="secret", input_tokens=9))
    await stores.audit.flush()

    assert await stores.audit_log.purge_audit(older_than_days=365) >= 1
    purged = await stores.audit_log.get(old.uuid)
    kept = await stores.audit_log.get(recent.uuid)
    assert purged is not None and kept is not None
    assert (purged.messages, purged.output, purged.purged, purged.input_tokens) == (
        None,
        None,
        True,
        9,
    )
    assert (kept.messages, kept.purged) == (MESSAGES, False)
    # 500 charged directly, 9 by closing the old record; the purge takes neither back.
    assert (await stores.usage.get_usage(user.id, now)).lifetime_tokens == 509


async def test_filtering_by_a_full_key_is_refused(stores: SqlStores) -> None:
    with pytest.raises(Exception, match="never the full key"):
        await stores.audit_log.query(AuditFilter(key="mr2_" + "a" * 43))


class CountingWriter(AuditWriter):
    attempts = 0

    async def _insert(self, rows: list[dict[str, object]]) -> Exception | None:
        self.attempts += 1
        return await super()._insert(rows)


async def test_an_unreachable_database_fails_the_batch_once() -> None:
    from mindrouter.stores.sql.engine import create_engine

    engine = create_engine("postgresql+asyncpg://postgres@127.0.0.1:1/none")
    writer = CountingWriter(engine)
    try:
        results = await asyncio.gather(
            *(writer.begin(start(unique("u"))) for _ in range(5)), return_exceptions=True
        )
    finally:
        await engine.dispose()
    assert all(isinstance(r, InternalError) for r in results)
    assert writer.attempts == 1, "a connection failure is not retried row by row"


class CountingUpdates(AuditWriter):
    attempts = 0

    async def _update(self, batch: list[dict[str, object]]) -> None:
        self.attempts += 1
        await super()._update(batch)


@pytest.mark.parametrize("outcomes", ["drain task", "own task and connection"])
async def test_outcomes_wait_for_an_unreachable_database_except_at_shutdown(
    outcomes: str,
) -> None:
    """A flush waits for the database to come back (the outcomes carry the usage charge),
    backing off between tries; the flush of a stopping process gives them up after a few
    tries, so the process does stop."""
    from mindrouter.stores.sql.audit_pg import PgAuditConnection
    from mindrouter.stores.sql.audit_writer import COMPLETE_RETRIES
    from mindrouter.stores.sql.engine import create_engine

    url = "postgresql+asyncpg://postgres@127.0.0.1:1/none"
    engine = create_engine(url)
    if outcomes == "drain task":
        writer = CountingUpdates(engine)
    else:
        writer = CountingUpdates(
            engine, pg=PgAuditConnection(url), outcomes_pg=PgAuditConnection(url)
        )
    try:
        writer.complete(unique("r"), AuditOutcome(status="ok", input_tokens=1, output_tokens=1))
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(writer.flush(), 1.0)
        # Backing off from 0.2 s: a few tries in that second, not a loop of reconnections.
        assert 1 <= writer.attempts <= 5
        assert not await writer.written(0.2), "a bounded wait says the charge is not written"
        await writer.flush_final()  # returns: a hang here is the test's timeout
    finally:
        await engine.dispose()
    assert writer.attempts >= COMPLETE_RETRIES
    assert writer._completions == []


@pytest.mark.parametrize("engine", ["postgresql", "mariadb"])
async def test_a_dropped_database_connection_costs_no_audit_record(
    engine: str, session_databases: SessionDatabases
) -> None:
    """The audit pool does not ping before each checkout: a connection the server closed is
    found out by the batch that uses it, and the batch goes again on a fresh one."""
    db_url = session_databases.url(engine)
    stores = open_stores(db_url, hasher=FAST_HASHER)
    try:
        await _survives_a_dropped_connection(stores, db_url)
    finally:
        await stores.aclose()


async def _survives_a_dropped_connection(stores: SqlStores, db_url: str) -> None:
    # Its own pool without pre-ping (MariaDB), or its own asyncpg connection (PostgreSQL).
    assert stores.audit_engine is not None or stores.audit.pg is not None
    await stores.audit.begin(start(unique("u")))  # a pooled connection now exists
    async with stores.engine.connect() as conn:
        await drop_other_connections(db_url, conn)
    record = start(unique("u"))
    await stores.audit.begin(record)  # raises if the dropped connection failed it
    stores.audit.complete(record.uuid, AuditOutcome(status="ok", input_tokens=1, output_tokens=1))
    await stores.audit.flush()
    seen = await stores.audit_log.get(record.uuid)
    assert seen is not None and seen.status == "ok"


async def test_completions_are_gathered_into_one_transaction(stores: SqlStores) -> None:
    records = [start(unique("u")) for _ in range(20)]
    for r in records:
        await stores.audit.begin(r)
    commits = count_commits(stores.audit)
    for r in records:
        stores.audit.complete(r.uuid, AuditOutcome(status="ok", input_tokens=1, output_tokens=2))
        await asyncio.sleep(0.001)  # queued one by one, as requests end
    await asyncio.sleep(stores.audit.complete_delay * 3)
    for _ in range(1000):  # bounded: the batch's transaction (with its usage charge) ends
        if stores.audit.stats.completed >= 20:
            break
        await asyncio.sleep(0.01)
    assert len(commits) == 1
    # A begin does not wait for the completions' pause.
    stores.audit.complete(records[0].uuid, AuditOutcome(status="ok"))
    before = stores.audit.stats.begun
    await stores.audit.begin(start(unique("u")))
    assert stores.audit.stats.begun == before + 1
    assert stores.audit.stats.completed == 20


async def test_begins_between_outcomes_do_not_split_their_batch(stores: SqlStores) -> None:
    """Each begin ends the writer's pause to be written at once; the pause for the outcomes is
    then taken up again to the same deadline, so they still go as one batch."""
    stores.audit.complete_delay = 0.5  # far longer than the begins below take
    records = [start(unique("u")) for _ in range(5)]
    for r in records:
        await stores.audit.begin(r)
    batches, begun = stores.audit.stats.complete_batches, stores.audit.stats.begun
    for r in records:
        stores.audit.complete(r.uuid, AuditOutcome(status="ok", input_tokens=1, output_tokens=1))
        await stores.audit.begin(start(unique("u")))
    assert stores.audit.stats.begun == begun + 5
    assert stores.audit.stats.complete_batches == batches  # still gathering
    assert await stores.audit.written(5.0)
    assert stores.audit.stats.complete_batches == batches + 1


@pytest.mark.parametrize(
    ("engine", "refused"),
    [
        # The status column holds 16 characters; the servers refuse a longer one.
        ("postgresql", AuditOutcome(status="x" * 40, input_tokens=1)),  # type: ignore[arg-type]
        ("mariadb", AuditOutcome(status="x" * 40, input_tokens=1)),  # type: ignore[arg-type]
        # A count wider than its column: SQLite's driver raises OverflowError before any SQL
        # runs, the servers refuse the value.
        ("sqlite", AuditOutcome(status="ok", input_tokens=2**64)),
        ("postgresql", AuditOutcome(status="ok", input_tokens=2**64)),
        ("mariadb", AuditOutcome(status="ok", input_tokens=2**64)),
    ],
)
async def test_one_refused_outcome_does_not_drop_the_others(
    engine: str, refused: AuditOutcome, session_databases: SessionDatabases
) -> None:
    stores = open_stores(session_databases.url(engine), hasher=FAST_HASHER)
    try:
        records = [start(unique("u")) for _ in range(3)]
        for r in records:
            await stores.audit.begin(r)
        for i, r in enumerate(records):
            outcome = refused if i == 1 else AuditOutcome(status="ok", input_tokens=i)
            stores.audit.complete(r.uuid, outcome)
        await stores.audit.flush()
        seen = [await stores.audit_log.get(r.uuid) for r in records]
        assert [s.status if s else None for s in seen] == ["ok", "pending", "ok"]
        # The writer goes on.
        later = start(unique("u"))
        await stores.audit.begin(later)
        stores.audit.complete(later.uuid, AuditOutcome(status="ok", input_tokens=1))
        await stores.audit.flush()
        found = await stores.audit_log.get(later.uuid)
        assert found is not None and found.status == "ok"
    finally:
        await stores.aclose()
