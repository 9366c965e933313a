"""The audit writer's asyncpg connection: its arguments are read as SQLAlchemy reads the URL, and
a batch is atomic."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from bench.harness import FAST_HASHER

from mindrouter.stores.sql import open_stores
from mindrouter.stores.sql.audit_pg import AuditRowsRejected, PgAuditConnection, connect_args
from mindrouter.stores.sql.audit_values import start_values

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
