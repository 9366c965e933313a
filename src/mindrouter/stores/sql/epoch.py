"""The auth epoch: one counter row that gateway processes poll to learn that cached keys may be
stale. Bumped inside the transaction that makes the change, so a process that sees the new
value is guaranteed to read the changed rows."""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from mindrouter.stores.sql.schema import auth_epoch

EPOCH_ROW = 1
# The same table's second row counts changes to what routing reads: backends, models, groups.
CATALOG_EPOCH_ROW = 2


async def bump_epoch(conn: AsyncConnection, row: int = EPOCH_ROW) -> None:
    await conn.execute(
        update(auth_epoch).where(auth_epoch.c.id == row).values(epoch=auth_epoch.c.epoch + 1)
    )


async def read_epoch(conn: AsyncConnection, row: int = EPOCH_ROW) -> int:
    value = await conn.scalar(select(auth_epoch.c.epoch).where(auth_epoch.c.id == row))
    return int(value or 0)


async def bump_catalog_epoch(conn: AsyncConnection) -> None:
    await bump_epoch(conn, CATALOG_EPOCH_ROW)


async def read_catalog_epoch(conn: AsyncConnection) -> int:
    return await read_epoch(conn, CATALOG_EPOCH_ROW)
