"""The auth epoch: one counter row that gateway processes poll to learn that cached keys may be
stale. Bumped inside the transaction that makes the change, so a process that sees the new
value is guaranteed to read the changed rows.

The polls (`poll_epoch`) go through an engine of their own on PostgreSQL and MariaDB: no ping
before each checkout and no transaction around the read, so a poll is one round trip. A
connection the server dropped (a restart, `pg_terminate_backend`) fails the read; the poll then
reads once more on a new connection, so the drop costs neither a poll nor a log line."""

from __future__ import annotations

from sqlalchemy import bindparam, select, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from mindrouter.stores.sql.schema import auth_epoch
from mindrouter.stores.sql.transactions import DATABASE_ERRORS, read_failed, reading

EPOCH_ROW = 1
# The same table's second row counts changes to what routing reads: backends, models, groups.
CATALOG_EPOCH_ROW = 2


async def bump_epoch(conn: AsyncConnection, row: int = EPOCH_ROW) -> None:
    await conn.execute(
        update(auth_epoch).where(auth_epoch.c.id == row).values(epoch=auth_epoch.c.epoch + 1)
    )


# Built once: the polls run it several times a second, and building it costs as much as the
# rest of the read.
_READ = select(auth_epoch.c.epoch).where(auth_epoch.c.id == bindparam("row"))


async def read_epoch(conn: AsyncConnection, row: int = EPOCH_ROW) -> int:
    value = await conn.scalar(_READ, {"row": row})
    return int(value or 0)


async def bump_catalog_epoch(conn: AsyncConnection) -> None:
    await bump_epoch(conn, CATALOG_EPOCH_ROW)


async def read_catalog_epoch(conn: AsyncConnection) -> int:
    return await read_epoch(conn, CATALOG_EPOCH_ROW)


async def poll_epoch(engine: AsyncEngine, row: int = EPOCH_ROW) -> int:
    """The epoch of `row` read by a poll (see the module docstring)."""
    try:
        async with engine.connect() as conn:
            return await read_epoch(conn, row)
    except DATABASE_ERRORS as exc:
        if not (isinstance(exc, DBAPIError) and exc.connection_invalidated):
            raise read_failed(exc) from exc
    async with reading(engine) as conn:
        return await read_epoch(conn, row)
