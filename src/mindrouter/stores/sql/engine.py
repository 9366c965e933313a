"""The async engine for a database URL, tuned per engine.

- SQLite (`sqlite+aiosqlite:///path`): the embedded default. WAL, so readers never block the
  writer; `synchronous=FULL` (`durable`, the default: each commit is fsynced before it returns)
  or `NORMAL` (`fast`: written to the log but not fsynced, so it survives the gateway crashing,
  and only a power loss or an OS crash can take the last commits back); a busy
  timeout, so a second process waits for the write lock instead of failing; foreign keys on
  (SQLite has them off per connection by default). The file and its directory are created if
  missing, readable by their owner only (SQLite gives its -wal and -shm files the database
  file's mode): the file holds prompts, outputs and key hashes.
- PostgreSQL (`postgresql+asyncpg://`) and MariaDB/MySQL (`mysql+asyncmy://`): a bounded pool
  that checks connections before use (replicas outlive database restarts and idle timeouts),
  unless `pre_ping=False` says the caller handles a dropped connection itself (the audit writer
  and the epoch polls: a ping costs a round trip pair per checkout).
- `autocommit`: statements run outside any transaction (no BEGIN or ROLLBACK around a lone
  read: the epoch polls, several times a second in every process).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

SQLITE_BUSY_TIMEOUT_MS = 10_000


@dataclass(frozen=True, slots=True)
class PoolSettings:
    size: int = 10
    max_overflow: int = 20
    timeout: float = 30.0
    # MariaDB closes idle connections after wait_timeout (8 h by default); recycle well before.
    recycle: int = 1800


def _json_dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def _on_sqlite_connect(synchronous: str) -> Callable[[Any, Any], None]:
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        _sqlite_pragmas(dbapi_connection, synchronous)

    return on_connect


def _sqlite_pragmas(dbapi_connection: Any, synchronous: str) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA synchronous={synchronous}")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _ensure_sqlite_file(url: URL) -> None:
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    path = Path(database).expanduser()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))


def create_engine(
    url: str | URL,
    *,
    pool: PoolSettings | None = None,
    echo: bool = False,
    pre_ping: bool = True,
    fast_commit: bool = False,
    autocommit: bool = False,
) -> AsyncEngine:
    """An engine for `url`; no connection is made until first use. `fast_commit` (SQLite only,
    where the audit writer shares the engine): commits are not fsynced (`audit_commit: fast`)."""
    parsed = make_url(url)
    pool = pool or PoolSettings()
    options: dict[str, Any] = {
        "echo": echo,
        # Statement parameters hold message histories and key hashes: keep them out of
        # exception messages, which end up in logs.
        "hide_parameters": True,
        "json_serializer": _json_dumps,
        "json_deserializer": orjson.loads,
    }
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        _ensure_sqlite_file(parsed)
    else:
        options.update(
            pool_size=pool.size,
            max_overflow=pool.max_overflow,
            pool_timeout=pool.timeout,
            pool_recycle=pool.recycle,
            pool_pre_ping=pre_ping,
        )
    if autocommit:
        options["isolation_level"] = "AUTOCOMMIT"
    if backend in ("mysql", "mariadb") and "charset" not in parsed.query:
        parsed = parsed.update_query_dict({"charset": "utf8mb4"})
    engine = create_async_engine(parsed, **options)
    if backend == "sqlite":
        synchronous = "NORMAL" if fast_commit else "FULL"
        event.listen(engine.sync_engine, "connect", _on_sqlite_connect(synchronous))
    return engine


def describe(url: str | URL) -> str:
    """The URL with any password hidden, for messages."""
    return make_url(url).render_as_string(hide_password=True)
