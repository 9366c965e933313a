"""Stored Responses-API responses on every database: kept per owner, invisible to anyone else,
expired after the retention (never returned, then purged), deleted by their owner only."""

from __future__ import annotations

import secrets
from datetime import timedelta

from mindrouter.stores.sql import SqlStores
from mindrouter.stores.sql.responses import SqlResponseStore, StoredResponse
from mindrouter.stores.sql.transactions import utcnow


def stored(user_id: int, age: timedelta = timedelta(0)) -> StoredResponse:
    rid = "resp_" + secrets.token_hex(12)
    big = "x" * 70_000  # more than MariaDB's TEXT holds
    return StoredResponse(
        id=rid,
        user_id=user_id,
        created_at=utcnow() - age,
        model="m",
        input_items=[{"type": "message", "role": "user", "content": big}],
        context=[{"type": "message", "role": "user", "content": big}],
        response={"id": rid, "status": "completed", "output": [{"type": "message", "n": 1}]},
    )


async def test_kept_for_the_owner_only(stores: SqlStores) -> None:
    store = SqlResponseStore(stores.engine)
    mine = stored(1)
    await store.save(mine)
    found = await store.get(1, mine.id)
    assert found is not None
    assert found.response == mine.response and found.context == mine.context
    assert found.input_items[0]["content"] == "x" * 70_000
    assert await store.get(2, mine.id) is None
    assert not await store.delete(2, mine.id)
    assert await store.delete(1, mine.id)
    assert await store.get(1, mine.id) is None


async def test_expired_responses_are_hidden_then_purged(stores: SqlStores) -> None:
    store = SqlResponseStore(stores.engine, retention_days=7)
    old, fresh = stored(3, timedelta(days=8)), stored(3, timedelta(days=6))
    await store.save(old)
    await store.save(fresh)
    assert await store.get(3, old.id) is None
    assert await store.get(3, fresh.id) is not None
    assert await store.purge() >= 1
    assert not await store.delete(3, old.id)  # already gone
    assert await store.get(3, fresh.id) is not None
