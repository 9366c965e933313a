"""The auth epoch: one counter row that gateway processes poll to learn that cached keys may be
stale. Bumped inside the transaction that makes the change, so a process that sees the new
value is guaranteed to read the changed rows."""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from mindrouter.stores.sql.schema import auth_epoch

EPOCH_ROW = 1


async def bump_epoch(conn: AsyncConnection) -> None:
    await conn.execute(
        update(auth_epoch).where(auth_epoch.c.id == EPOCH_ROW).values(epoch=auth_epoch.c.epoch + 1)
    )


async def read_epoch(conn: AsyncConnection) -> int:
    value = await conn.scalar(select(auth_epoch.c.epoch).where(auth_epoch.c.id == EPOCH_ROW))
    return int(value or 0)
