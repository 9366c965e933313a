"""Real databases for the store tests: SQLite, PostgreSQL and MariaDB, every test on each.

The servers are shared with other test runs, so every database and every row name is random.
One database per engine is created and migrated for the session (and dropped at its end);
tests that need an empty database get their own through `fresh_url`. An unreachable server
fails the tests that need it with a message saying so: these tests never skip.

Server locations default to this machine's; CI may point elsewhere with
MINDROUTER_TEST_POSTGRES (e.g. postgresql://postgres@db:5432) and MINDROUTER_TEST_MARIADB
(e.g. mysql://root@db:3306).
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import AsyncIterator, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import asyncmy
import asyncpg
import pytest
from bench.harness import FAST_HASHER, POSTGRES, postgres_admin
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection

from mindrouter.stores.sql import SqlStores, open_stores
from mindrouter.stores.sql.engine import create_engine
from mindrouter.stores.sql.migrate import upgrade

ENGINES = ("sqlite", "postgresql", "mariadb")
MARIADB = make_url(os.environ.get("MINDROUTER_TEST_MARIADB", "mysql://root@127.0.0.1:3306"))


T = TypeVar("T")


def run_in_thread(coro: Coroutine[Any, Any, T]) -> T:
    """Runs a coroutine to completion on its own loop, away from the test's loop."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


def _db_name() -> str:
    return f"mr_test_{secrets.token_hex(6)}"


async def _postgres_admin() -> asyncpg.Connection:
    try:
        return await postgres_admin()
    except (OSError, asyncpg.PostgresError) as exc:
        pytest.fail(
            f"PostgreSQL is unreachable at {POSTGRES.host}:{POSTGRES.port or 5432} ({exc}); "
            "the store tests need it (set MINDROUTER_TEST_POSTGRES to point elsewhere)",
            pytrace=False,
        )


async def _mariadb_admin() -> asyncmy.Connection:
    try:
        return await asyncmy.connect(
            host=MARIADB.host,
            port=MARIADB.port or 3306,
            user=MARIADB.username or "root",
            password=MARIADB.password or "",
            connect_timeout=5,
        )
    except (OSError, asyncmy.errors.Error) as exc:
        pytest.fail(
            f"MariaDB is unreachable at {MARIADB.host}:{MARIADB.port or 3306} ({exc}); "
            "the store tests need it (set MINDROUTER_TEST_MARIADB to point elsewhere)",
            pytrace=False,
        )


async def create_database(engine: str, tmp: Path) -> str:
    """A new, empty database; returns its SQLAlchemy URL."""
    name = _db_name()
    if engine == "sqlite":
        return f"sqlite+aiosqlite:///{tmp / name}.db"
    if engine == "postgresql":
        conn = await _postgres_admin()
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
        url = POSTGRES.set(drivername="postgresql+asyncpg", database=name)
        return url.render_as_string(hide_password=False)
    conn = await _mariadb_admin()
    try:
        async with conn.cursor() as cur:
            await cur.execute(
                f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
            )
    finally:
        conn.close()
    url = MARIADB.set(drivername="mysql+asyncmy", database=name)
    return url.render_as_string(hide_password=False)


async def drop_database(url: str) -> None:
    parsed = make_url(url)
    name = parsed.database
    backend = parsed.get_backend_name()
    if backend == "sqlite" or not name:
        return
    if backend == "postgresql":
        conn = await _postgres_admin()
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()
        return
    conn = await _mariadb_admin()
    try:
        async with conn.cursor() as cur:
            await cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
    finally:
        conn.close()


async def _create_migrated(engine: str, tmp: Path) -> str:
    url = await create_database(engine, tmp)
    db = create_engine(url)
    try:
        await upgrade(db)
    finally:
        await db.dispose()
    return url


class SessionDatabases:
    """One migrated database per engine, created when a test first asks for that engine."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.urls: dict[str, str] = {}

    def url(self, engine: str) -> str:
        if engine not in self.urls:
            self.urls[engine] = run_in_thread(_create_migrated(engine, self.tmp))
        return self.urls[engine]

    def drop_all(self) -> None:
        for url in self.urls.values():
            run_in_thread(drop_database(url))


@pytest.fixture(scope="session")
def session_databases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SessionDatabases]:
    databases = SessionDatabases(tmp_path_factory.mktemp("databases"))
    try:
        yield databases
    finally:
        databases.drop_all()


@pytest.fixture(params=ENGINES)
def db_url(request: pytest.FixtureRequest, session_databases: SessionDatabases) -> str:
    return session_databases.url(request.param)


@pytest.fixture
async def stores(db_url: str) -> AsyncIterator[SqlStores]:
    opened = open_stores(db_url, hasher=FAST_HASHER)
    try:
        yield opened
    finally:
        await opened.aclose()


@pytest.fixture
async def fresh_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """An empty database of the parametrized engine, dropped after the test."""
    engine = request.node.callspec.params["engine"]
    url = await create_database(engine, tmp_path)
    try:
        yield url
    finally:
        await drop_database(url)


async def drop_other_connections(url: str, conn: AsyncConnection) -> None:
    """Ends every other session on `url`'s database (PostgreSQL or MariaDB), as a server
    restart or a network cut would."""
    if url.startswith("postgresql"):
        victims = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        victims += " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        await conn.exec_driver_sql(victims)
    else:
        rows = await conn.exec_driver_sql(
            "SELECT id FROM information_schema.processlist"
            " WHERE db = DATABASE() AND id <> CONNECTION_ID()"
        )
        for (pid,) in rows.all():
            await conn.exec_driver_sql(f"KILL {int(pid)}")
