"""`audit_commit: durable | fast` reaches the connection the audit records are written on, and
in both modes a record is committed and visible to every other connection once begin() returns.

- PostgreSQL: `SHOW synchronous_commit` inside a transaction on the audit writer's own
  connection is `off` in `fast`; in `durable` it is the server's setting (what any other
  connection sees).
- SQLite: `PRAGMA synchronous` is FULL (2) in `durable` and NORMAL (1) in `fast`, in WAL mode.
- MariaDB: no per-session setting; both modes write alike.
"""

from __future__ import annotations

import pytest
from sqlalchemy import text

from mindrouter.settings import ConfigError, settings_from_dict
from mindrouter.stores.sql import open_stores

from .conftest import FAST_HASHER, unique
from .test_audit import start


@pytest.mark.parametrize("mode", ["durable", "fast"])
async def test_the_audit_commit_mode_reaches_the_connection(db_url: str, mode: str) -> None:
    stores = open_stores(db_url, hasher=FAST_HASHER, audit_commit=mode)
    try:
        user = unique("commit")
        await stores.audit.begin(start(user))
        # Committed and visible to another connection as soon as begin() has returned.
        async with stores.engine.connect() as conn:
            found = await conn.execute(
                text("SELECT COUNT(*) FROM audit_records WHERE user_name = :u"), {"u": user}
            )
            assert found.scalar_one() == 1
            backend = stores.engine.url.get_backend_name()
            if backend == "postgresql":
                server = (await conn.exec_driver_sql("SHOW synchronous_commit")).scalar_one()
            elif backend == "sqlite":
                journal = (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar_one()
                synchronous = (await conn.exec_driver_sql("PRAGMA synchronous")).scalar_one()
        if backend == "postgresql":
            assert stores.audit.pg is not None
            audit_conn = await stores.audit.pg._connection()
            async with audit_conn.transaction():
                seen = await audit_conn.fetchval("SHOW synchronous_commit")
            assert seen == ("off" if mode == "fast" else server)
            # The outcomes carry the usage charges: they keep the server's setting.
            assert stores.audit.outcomes_pg is not None
            outcomes_conn = await stores.audit.outcomes_pg._connection()
            async with outcomes_conn.transaction():
                assert await outcomes_conn.fetchval("SHOW synchronous_commit") == server
            assert server != "off"  # the other connections keep the server's setting
        elif backend == "sqlite":
            # The audit writer shares the SQLite engine: this is its setting too.
            assert journal == "wal"
            assert synchronous == (1 if mode == "fast" else 2)
    finally:
        await stores.aclose()


def test_the_setting_is_read_and_checked() -> None:
    assert settings_from_dict({}).audit_commit == "durable"
    assert settings_from_dict({"audit_commit": "fast"}).audit_commit == "fast"
    with pytest.raises(ConfigError, match="audit_commit"):
        settings_from_dict({"audit_commit": "lazy"})
