"""Stored Responses-API responses: kept per owner, read back for chains, purged after retention.

Every read names the owner: a response id of another user is indistinguishable from one that
never existed, so ids cannot be probed. Expired rows are never returned, even before the purge
that deletes them has run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from mindrouter.stores.sql.schema import stored_responses as table
from mindrouter.stores.sql.transactions import reading, utcnow, writing

JSONObject = dict[str, Any]


@dataclass(frozen=True, slots=True)
class StoredResponse:
    id: str
    user_id: int
    created_at: datetime
    model: str
    input_items: list[JSONObject]
    context: list[JSONObject]
    response: JSONObject


class SqlResponseStore:
    def __init__(self, engine: AsyncEngine, retention_days: int = 30) -> None:
        self.engine = engine
        self.retention = timedelta(days=retention_days)

    async def save(self, stored: StoredResponse) -> None:
        async with writing(self.engine, conflict="a response with that id already exists") as conn:
            await conn.execute(
                insert(table).values(
                    id=stored.id,
                    user_id=stored.user_id,
                    created_at=stored.created_at,
                    model=stored.model,
                    input_items=stored.input_items,
                    context=stored.context,
                    response=stored.response,
                )
            )

    async def get(self, user_id: int, response_id: str) -> StoredResponse | None:
        query = select(table).where(
            table.c.id == response_id,
            table.c.user_id == user_id,
            table.c.created_at >= utcnow() - self.retention,
        )
        async with reading(self.engine) as conn:
            row = (await conn.execute(query)).first()
        if row is None:
            return None
        return StoredResponse(
            id=row.id,
            user_id=row.user_id,
            created_at=row.created_at,
            model=row.model,
            input_items=list(row.input_items),
            context=list(row.context),
            response=dict(row.response),
        )

    async def delete(self, user_id: int, response_id: str) -> bool:
        query = delete(table).where(table.c.id == response_id, table.c.user_id == user_id)
        async with writing(self.engine) as conn:
            result = await conn.execute(query)
        return bool(result.rowcount)

    async def purge(self, now: datetime | None = None) -> int:
        """Delete responses older than the retention; how many went."""
        cutoff = (now or utcnow()) - self.retention
        async with writing(self.engine) as conn:
            result = await conn.execute(delete(table).where(table.c.created_at < cutoff))
        return int(result.rowcount or 0)
