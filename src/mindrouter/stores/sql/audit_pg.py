"""The audit writer's own asyncpg connection on PostgreSQL: the request path's one SQL statement.

Every request writes its audit record before any GPU work and its outcome after, so these two
statements are the gateway's most frequent database work. Through SQLAlchemy a one-row
transaction costs about 1.2–1.5 ms of CPU on the 2-core benchmark machine (statement compilation
and caching, the execution context, the greenlet bridge, the pool and its ping); the same
transaction straight on asyncpg about 0.4–0.5 ms. Per request of the governed benchmark profile
that is 1.3 ms of CPU less and a median 5 ms shorter (`python -m bench.overhead.profile
--compare default,sqlalchemy-audit`, bench/results/overhead-variants-governed.md). The writer
runs one transaction at a time, so one connection is all it needs, and no pool ping either: a
connection the server dropped fails its batch, which is sent once more on a new connection.

Values are converted here the way the SQLAlchemy column types would (`columns.UtcDateTime`:
aware datetimes stored as naive UTC; JSON as text), so rows written either way read back alike.
Errors leave this module as `AuditConnectionLost` (an OSError: the writer does not retry row by
row) or `AuditRowsRejected` (the server refused the rows).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import asyncpg
import orjson
from sqlalchemy.engine import URL, make_url

from mindrouter.observability.logging import log

CONNECT_TIMEOUT_S = 10.0

INSERT_COLUMNS = (
    "uuid",
    "request_id",
    "created_at",
    "user_id",
    "user_name",
    "key_id",
    "key_prefix",
    "model",
    "endpoint",
    "messages",
    "stream",
    "client_ip",
    "user_agent",
    "status",
    "attempts",
    "purged",
)
OUTCOME_COLUMNS = (
    "status",
    "output",
    "input_tokens",
    "output_tokens",
    "error_message",
    "backend",
    "attempts",
    "queued_ms",
    "first_token_ms",
    "total_ms",
    "completed_at",
)
_INSERT = (
    f"INSERT INTO audit_records ({', '.join(INSERT_COLUMNS)}) "
    f"VALUES ({', '.join(f'${i + 1}' for i in range(len(INSERT_COLUMNS)))})"
)
_COMPLETE = (
    "UPDATE audit_records SET "
    + ", ".join(f"{c} = ${i + 2}" for i, c in enumerate(OUTCOME_COLUMNS))
    + " WHERE uuid = $1"
)


class AuditConnectionLost(ConnectionError):
    """PostgreSQL could not be reached, or dropped the connection mid-batch."""


class AuditRowsRejected(Exception):
    """PostgreSQL refused the rows (a constraint, a value it cannot store)."""


def asyncpg_dsn(url: str | URL) -> str:
    """The libpq-style DSN asyncpg takes, from a `postgresql+asyncpg://` URL."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _stored(value: Any) -> Any:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the database; use an aware UTC datetime")
        return value.astimezone(UTC).replace(tzinfo=None)
    return value


def insert_args(row: dict[str, Any]) -> tuple[Any, ...]:
    values = [_stored(row[c]) for c in INSERT_COLUMNS]
    messages = INSERT_COLUMNS.index("messages")
    if values[messages] is not None:
        values[messages] = orjson.dumps(values[messages]).decode()
    return tuple(values)


def outcome_args(row: dict[str, Any]) -> tuple[Any, ...]:
    """From the writer's bound-parameter dict (`b_`-prefixed names)."""
    return (row["b_uuid"], *(_stored(row[f"b_{c}"]) for c in OUTCOME_COLUMNS))


class PgAuditConnection:
    def __init__(self, url: str | URL) -> None:
        self._dsn = asyncpg_dsn(url)
        self._conn: asyncpg.Connection | None = None

    async def insert(self, rows: Sequence[dict[str, Any]]) -> None:
        await self._run(_INSERT, [insert_args(r) for r in rows])

    async def complete(self, rows: Sequence[dict[str, Any]]) -> None:
        await self._run(_COMPLETE, [outcome_args(r) for r in rows])

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            try:
                await asyncio.wait_for(conn.close(), 5)
            except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError):
                conn.terminate()

    async def _run(self, sql: str, args: list[tuple[Any, ...]]) -> None:
        try:
            await self._transaction(sql, args)
        except AuditConnectionLost:
            log.info("database connection was dropped; writing the audit batch again")
            await self._transaction(sql, args)

    async def _transaction(self, sql: str, args: list[tuple[Any, ...]]) -> None:
        conn = await self._connection()
        try:
            async with conn.transaction():
                await conn.executemany(sql, args)
        except asyncpg.DataError as exc:  # a value asyncpg cannot encode; nothing was sent
            raise AuditRowsRejected(f"{type(exc).__name__}: {exc}") from exc
        except asyncpg.PostgresError as exc:
            if not conn.is_closed() and not isinstance(exc, asyncpg.PostgresConnectionError):
                raise AuditRowsRejected(f"{type(exc).__name__}: {exc}") from exc
            self._drop(conn)  # the server ended the session (terminated, shutting down)
            raise AuditConnectionLost(f"{type(exc).__name__}: {exc}") from exc
        except Exception as exc:
            # The connection broke (OSError, InterfaceError) or was left in a state asyncpg
            # cannot vouch for (InternalClientError after a rollback on a dead socket).
            self._drop(conn)
            raise AuditConnectionLost(f"{type(exc).__name__}: {exc}") from exc

    async def _connection(self) -> asyncpg.Connection:
        conn = self._conn
        if conn is not None and not conn.is_closed():
            return conn
        try:
            conn = await asyncpg.connect(self._dsn, timeout=CONNECT_TIMEOUT_S)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
            raise AuditConnectionLost(f"{type(exc).__name__}: {exc}") from exc
        self._conn = conn
        return conn

    def _drop(self, conn: asyncpg.Connection) -> None:
        if self._conn is conn:
            self._conn = None
        if not conn.is_closed():
            conn.terminate()
