"""The audit writer's asyncpg connection: its arguments are read as SQLAlchemy reads the URL, and
a batch is atomic."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from bench.harness import FAST_HASHER

from mindrouter.stores.sql import open_stores
from mindrouter.stores.sql.audit_pg import AuditRowsRejected, PgAuditConnection, connect_args
from tests.stores.conftest import SessionDatabases, unique


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
    good = _row(unique("good"))
    broken = _row(unique("bad"))
    if bad == "encoded by the driver":
        broken["attempts"] = "three"
    else:
        broken["user_agent"] = "a NUL \x00 PostgreSQL text cannot hold"
    try:
        with pytest.raises(AuditRowsRejected):
            await conn.insert([good, broken])
        await conn.insert([_row(unique("after"))])  # the connection is still usable
    finally:
        await conn.close()
    stores = open_stores(url, hasher=FAST_HASHER)
    try:
        assert await stores.audit_log.get(good["uuid"]) is None
        assert await stores.audit_log.get(broken["uuid"]) is None
    finally:
        await stores.aclose()


def _row(uuid: str) -> dict[str, Any]:
    return {
        "uuid": uuid,
        "request_id": uuid,
        "created_at": datetime.now(UTC),
        "user_id": None,
        "user_name": "batch",
        "key_id": None,
        "key_prefix": None,
        "model": "m",
        "endpoint": "chat",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": False,
        "client_ip": None,
        "user_agent": None,
        "status": "pending",
        "attempts": 0,
        "purged": False,
        "instance_id": None,
    }
