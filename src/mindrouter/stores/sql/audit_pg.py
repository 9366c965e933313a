"""The audit writer's own asyncpg connection on PostgreSQL: the statements every request makes.

Every request writes its audit record before any GPU work, and waits for that commit, so the
insert is the gateway's most latency-critical database work. The outcomes follow in batches, each
batch one statement that also charges the usage (`complete`).
Through SQLAlchemy a one-row transaction costs about 1.2–1.5 ms of CPU on the 2-core benchmark
machine (statement compilation and caching, the execution context, the greenlet bridge, the pool
and its ping); the same transaction straight on asyncpg about 0.4–0.5 ms (measured when both
statements went this way: `python -m bench.overhead.profile --compare
default,sqlalchemy-audit`, bench/results/overhead-variants-governed.md). The writer
runs one transaction at a time, so one connection is all it needs, and no pool ping either: a
connection the server dropped fails its batch, which is sent once more on a new connection.

Values are converted here the way the SQLAlchemy column types would (`columns.UtcDateTime`:
aware datetimes stored as naive UTC; JSON as text), so rows written either way read back alike.
With `audit_commit: fast` the connection runs with `synchronous_commit = off`: a commit
returns once it is in the server's write-ahead log buffers, before they are flushed to disk.
The setting is made for the session when the connection opens (the connection carries nothing
but audit transactions, so it is the same as `SET LOCAL` in each, without the extra statement).

Errors leave this module as `AuditConnectionLost` (an OSError: the writer does not retry row by
row) or `AuditRowsRejected` (the server refused the rows).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import asyncpg
import orjson
from sqlalchemy.engine import URL, make_url

from mindrouter.observability.logging import log
from mindrouter.tasks import Alarm

CONNECT_TIMEOUT_S = 10.0
# A statement that takes longer fails its batch (and drops the connection) instead of holding
# every begin behind it: on a half-open connection nothing else would ever end the wait.
COMMAND_TIMEOUT_S = 30.0
# Reconnect this often, like the pool's recycle: after a failover the old server may answer on.
MAX_CONNECTION_AGE_S = 1800.0

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
    "instance_id",
)
# ON CONFLICT: a batch whose COMMIT was lost with the connection may have been applied; sent
# again, its rows must not fail on their unique uuid.
_INSERT = (
    f"INSERT INTO audit_records ({', '.join(INSERT_COLUMNS)}) "
    f"VALUES ({', '.join(f'${i + 1}' for i in range(len(INSERT_COLUMNS)))}) "
    "ON CONFLICT (uuid) DO NOTHING"
)


# A batch of outcomes in one statement, so one round trip: the records still `pending` are
# closed, and what they used is charged to their users' usage, as `audit_close.close_records`
# does in several (see there for why the two commit together and why only `pending` rows).
# The outcomes come as one JSON array of objects, read back as rows by `jsonb_to_recordset`:
# as arrays (one a column, `unnest`), asyncpg checked every element against two abstract
# base classes in Python, about a thousand instructions an element, where orjson writes the
# whole batch in one call. A user that no longer exists is not charged (the join). The usage
# rows are locked in the order of their user ids, so two closers charging the same users
# cannot deadlock, and the period arithmetic runs on the locked row, as
# `usage.current_period_start` does: periods of `days` aligned to the first charge.
OUTCOME_COLUMNS = (
    ("uuid", "text"),
    ("status", "text"),
    ("output", "text"),
    ("input_tokens", "int"),
    ("output_tokens", "int"),
    ("error_message", "text"),
    ("backend", "text"),
    ("attempts", "int"),
    ("queued_ms", "float8"),
    ("first_token_ms", "float8"),
    ("total_ms", "float8"),
    ("completed_at", "timestamp"),
    ("period_start", "timestamp"),
)
_RECORD = ", ".join(f"{name} {kind}" for name, kind in OUTCOME_COLUMNS)
_SET = ", ".join(f"{name} = v.{name}" for name, _ in OUTCOME_COLUMNS[1:-1])
_COMPLETE = f"""
WITH v AS (
    SELECT * FROM jsonb_to_recordset($1::jsonb) AS v({_RECORD})
), closed AS (
    UPDATE audit_records AS a SET {_SET}
    FROM v WHERE a.uuid = v.uuid AND a.status = 'pending'
    RETURNING a.user_id, coalesce(v.input_tokens, 0) + coalesce(v.output_tokens, 0) AS tokens,
        v.completed_at AS at, v.period_start AS first_start
), due AS (
    SELECT c.user_id, sum(c.tokens)::bigint AS tokens, max(c.at) AS at,
        min(c.first_start) AS first_start,
        make_interval(days => greatest(coalesce(u.budget_period_days, g.budget_period_days), 1))
            AS period
    FROM closed AS c JOIN users AS u ON u.id = c.user_id JOIN groups AS g ON g.id = u.group_id
    WHERE c.tokens > 0
    GROUP BY c.user_id, u.budget_period_days, g.budget_period_days
)
INSERT INTO usage AS s (user_id, period_start, period_tokens, lifetime_tokens, updated_at)
SELECT user_id, CASE WHEN first_start <= at THEN first_start ELSE at END, tokens, tokens,
    $2::timestamp
FROM due ORDER BY user_id
ON CONFLICT (user_id) DO UPDATE SET
    (period_start, period_tokens) = (
        SELECT
            CASE WHEN d.at < s.period_start + d.period THEN s.period_start
            ELSE s.period_start + d.period * floor(
                extract(epoch FROM d.at - s.period_start) / extract(epoch FROM d.period)
            ) END,
            CASE WHEN d.at < s.period_start + d.period THEN s.period_tokens + d.tokens
            ELSE d.tokens END
        FROM due AS d WHERE d.user_id = s.user_id
    ),
    lifetime_tokens = s.lifetime_tokens + EXCLUDED.lifetime_tokens,
    updated_at = EXCLUDED.updated_at
"""


def outcome_args(rows: Sequence[dict[str, Any]], now: datetime) -> tuple[Any, ...]:
    """What `_COMPLETE` takes, from the writer's outcome parameters (`b_`-prefixed): the batch
    as JSON, and the time of the charge. A value JSON cannot hold fails the batch as one the
    server refused (the writer then tries its rows one by one)."""
    batch = [{name: _stored(row[f"b_{name}"]) for name, _ in OUTCOME_COLUMNS} for row in rows]
    try:
        encoded = orjson.dumps(batch).decode()
    except orjson.JSONEncodeError as exc:
        raise AuditRowsRejected(type(exc).__name__) from exc
    return (encoded, _stored(now))


class AuditConnectionLost(ConnectionError):
    """PostgreSQL could not be reached, or dropped the connection mid-batch."""


class AuditRowsRejected(Exception):
    """PostgreSQL refused the rows (a constraint, a value it cannot store)."""


# Options of SQLAlchemy's asyncpg dialect that asyncpg itself does not take (it would send them
# to the server as settings, and the server refuses unknown ones).
_DIALECT_ONLY = (
    "prepared_statement_cache_size",
    "prepared_statement_name_func",
    "async_creator_fn",
)


def connect_args(url: str | URL) -> dict[str, Any]:
    """`asyncpg.connect` keyword arguments for a `postgresql+asyncpg://` URL, read the way the
    SQLAlchemy dialect reads it, so the main engine and the audit connection agree."""
    parsed = make_url(url)
    args, kwargs = parsed.get_dialect()().create_connect_args(parsed)
    if args:
        raise ValueError("unexpected positional connection arguments for asyncpg")
    return {k: v for k, v in kwargs.items() if k not in _DIALECT_ONLY}


# An aware datetime less the aware epoch is a timedelta whatever its zone; added to the naive
# epoch, it is the naive UTC time. `astimezone(UTC).replace(tzinfo=None)` gives the same in ten
# times the time (2.2 against 0.2 µs: `replace` parses its keywords), three or four times a
# request.
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NAIVE_EPOCH = datetime(1970, 1, 1)


def _stored(value: Any) -> Any:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the database; use an aware UTC datetime")
        return _NAIVE_EPOCH + (value - _EPOCH)
    return value


def insert_args(row: dict[str, Any]) -> tuple[Any, ...]:
    values = [_stored(row[c]) for c in INSERT_COLUMNS]
    messages = INSERT_COLUMNS.index("messages")
    if values[messages] is not None:
        values[messages] = orjson.dumps(values[messages]).decode()
    return tuple(values)


class PgAuditConnection:
    def __init__(
        self,
        url: str | URL,
        *,
        clock: Callable[[], float] = time.monotonic,
        fast_commit: bool = False,
    ) -> None:
        self._connect_args = connect_args(url)
        if fast_commit:
            settings = dict(self._connect_args.get("server_settings") or {})
            settings["synchronous_commit"] = "off"
            self._connect_args["server_settings"] = settings
        self._conn: asyncpg.Connection | None = None
        self._connected_at = 0.0
        self._clock = clock
        # One statement at a time, bounded by one timer that is moved on rather than set and
        # cancelled for each statement (asyncpg's own `command_timeout` sets one per statement:
        # a few microseconds, every request).
        self._statement_since: float | None = None  # the loop's time the statement was sent
        self._watchdog = Alarm()

    async def insert(self, rows: Sequence[dict[str, Any]]) -> None:
        await self._run(_INSERT, [insert_args(r) for r in rows])

    async def complete(self, rows: Sequence[dict[str, Any]]) -> None:
        """Closes the records of `rows` still `pending` and charges their usage: one statement,
        one implicit transaction. Sent again after a lost connection, it changes nothing that
        the first one did (those records are no longer `pending`)."""
        await self._run(_COMPLETE, [outcome_args(rows, datetime.now(UTC))])

    async def close(self) -> None:
        self._watchdog.cancel()
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
        self._statement_since = now = asyncio.get_running_loop().time()
        self._watchdog.arm(now + COMMAND_TIMEOUT_S, self._statement_due)
        try:
            # No explicit transaction: asyncpg runs `executemany` as one implicit transaction
            # (every row's Bind/Execute, then one Sync: all rows or none), so a batch is one
            # round trip instead of three (BEGIN, the rows, COMMIT), and the server's reply
            # still comes after the commit, flushed to disk unless `audit_commit` is fast.
            if len(args) == 1:
                await conn.execute(sql, *args[0])
            else:
                await conn.executemany(sql, args)
        except asyncpg.DataError as exc:
            # A value asyncpg cannot encode; nothing was sent. Its message quotes the value (a
            # piece of a prompt, say), so only the kind of error is passed on to the logs.
            raise AuditRowsRejected(type(exc).__name__) from exc
        except asyncpg.PostgresError as exc:
            # Class 22: data exceptions; class 54: a program limit, such as an outcome batch
            # over the 256 MB a jsonb value can hold (its rows, sent one by one, fit).
            about_rows = isinstance(
                exc, asyncpg.IntegrityConstraintViolationError | asyncpg.DataError
            ) or exc.sqlstate.startswith(("22", "54"))
            if about_rows and not conn.is_closed():
                raise AuditRowsRejected(f"{type(exc).__name__} ({exc.sqlstate})") from exc
            # Anything else says more about the session than the rows (terminated, read-only
            # after a failover, shutting down): start again on a new connection.
            self._drop(conn)
            raise AuditConnectionLost(f"{type(exc).__name__}: {exc}") from exc
        except Exception as exc:
            # The connection broke (OSError, InterfaceError) or was left in a state asyncpg
            # cannot vouch for (InternalClientError after a rollback on a dead socket).
            self._drop(conn)
            raise AuditConnectionLost(f"{type(exc).__name__}: {exc}") from exc
        finally:
            self._statement_since = None

    def _statement_due(self, now: float) -> float | None:
        """The watchdog: a statement under way for COMMAND_TIMEOUT_S fails, its connection
        closed under it (the batch is then sent once more on a new one: a half-open connection
        would otherwise hold every begin behind it for ever); one under way for less is given
        the rest of its time; with none under way the next statement arms the watchdog again."""
        since, conn = self._statement_since, self._conn
        if since is None or conn is None:
            return None
        if now < since + COMMAND_TIMEOUT_S:
            return since + COMMAND_TIMEOUT_S
        log.warning("an audit statement did not finish in time", seconds=COMMAND_TIMEOUT_S)
        self._drop(conn)
        return None

    async def _connection(self) -> asyncpg.Connection:
        conn = self._conn
        if conn is not None and not conn.is_closed():
            if self._clock() - self._connected_at < MAX_CONNECTION_AGE_S:
                return conn
            self._drop(conn)
        try:
            conn = await asyncpg.connect(**self._connect_args, timeout=CONNECT_TIMEOUT_S)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
            raise AuditConnectionLost(f"{type(exc).__name__}: {exc}") from exc
        self._conn = conn
        self._connected_at = self._clock()
        return conn

    def _drop(self, conn: asyncpg.Connection) -> None:
        if self._conn is conn:
            self._conn = None
        if not conn.is_closed():
            conn.terminate()
