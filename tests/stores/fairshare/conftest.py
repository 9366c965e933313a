"""The real Redis server (MINDROUTER_TEST_REDIS_URL, default 127.0.0.1:6379) under a random prefix.

Every test gets its own prefix, so runs can share a server with each other and with a deployment;
its keys are deleted afterwards. If Redis is not running the tests fail, loudly: they never skip.
Each `state()` gets its own client (its own connection pool), standing in for another gateway
process.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any
from uuid import uuid4

import pytest
from redis import exceptions as redis_errors
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from mindrouter.stores.fairshare import RedisFairShareState
from mindrouter.stores.shared import RedisLink

REDIS_URL = os.environ.get("MINDROUTER_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def new_client() -> Redis:
    return Redis.from_url(REDIS_URL, socket_timeout=5, retry=Retry(NoBackoff(), 0))


def linked(client: Redis, prefix: str, kw: dict[str, Any]) -> tuple[RedisLink, dict[str, Any]]:
    """The link a shared store is built on, and the store's own keywords: a test names both."""
    fields = {k: kw.pop(k) for k in ("timeout", "retry_after", "clock") if k in kw}
    return RedisLink(client, prefix, **fields), kw


class SharedRedis:
    def __init__(self) -> None:
        self.prefix = f"mrtest:{uuid4().hex}:"
        self.admin = new_client()
        self.states: list[RedisFairShareState] = []
        self.clients: list[Redis] = [self.admin]

    def state(self, **kw: Any) -> RedisFairShareState:
        client = new_client()
        self.clients.append(client)
        link, kw = linked(client, self.prefix, kw)
        state = RedisFairShareState(link, **kw)
        self.states.append(state)
        return state

    async def keys(self) -> list[bytes]:
        return [k async for k in self.admin.scan_iter(match=f"{self.prefix}*")]

    async def counter(self, model: str, user: str) -> float | None:
        raw = await self.admin.hget(f"{self.prefix}fairshare:counters:{model}", user)
        return None if raw is None else float(raw)

    async def floor(self, model: str) -> float | None:
        raw = await self.admin.hget(f"{self.prefix}fairshare:floors", model)
        return None if raw is None else float(raw)

    async def close(self) -> None:
        for state in self.states:
            await state.stop()
        keys = await self.keys()
        if keys:
            await self.admin.delete(*keys)
        for client in self.clients:
            await client.aclose()


async def open_shared() -> SharedRedis:
    shared = SharedRedis()
    try:
        await shared.admin.ping()
    except redis_errors.ConnectionError as exc:
        await shared.admin.aclose()
        pytest.fail(
            f"these tests need a running Redis at {REDIS_URL} (start one with `redis-server`, "
            f"or point MINDROUTER_TEST_REDIS_URL at one): {exc}",
            pytrace=False,
        )
    return shared


@pytest.fixture
async def redis_shared() -> AsyncIterator[SharedRedis]:
    shared = await open_shared()
    try:
        yield shared
    finally:
        await shared.close()
