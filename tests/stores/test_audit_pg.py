"""The audit writer's asyncpg connection: its arguments are read as SQLAlchemy reads the URL."""

from __future__ import annotations

from mindrouter.stores.sql.audit_pg import connect_args


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
