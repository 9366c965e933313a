"""Stores under test. Redis is the real server (MINDROUTER_TEST_REDIS_URL, default 127.0.0.1:6379).

Each test gets its own random key prefix, so runs can share a server with each other and with a
deployment; its keys are deleted afterwards. If Redis is not running the tests fail, loudly.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from uuid import uuid4

import pytest
from redis import exceptions as redis_errors
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from mindrouter.stores.limits import (
    DEFAULT_LEASE_SECONDS,
    Limits,
    LimitStore,
    MemoryLimitStore,
    RedisLimitStore,
    Ticket,
    UsageNotLoaded,
    UsageSnapshot,
)

REDIS_URL = os.environ.get("MINDROUTER_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


class LoadingRedisStore(RedisLimitStore):
    """As the gateway uses the store: a user whose usage Redis does not hold is loaded (here with
    nothing used yet, the database being out of these tests) before admission is tried again."""

    async def admit(self, user: str, limits: Limits, estimate_tokens: int, now: float) -> Ticket:
        try:
            return await super().admit(user, limits, estimate_tokens, now)
        except UsageNotLoaded:
            await self.seed(user, None, 0, 0)
            return await super().admit(user, limits, estimate_tokens, now)

    async def snapshot(self, user: str, limits: Limits, now: float) -> UsageSnapshot:
        try:
            return await super().snapshot(user, limits, now)
        except UsageNotLoaded:
            await self.seed(user, None, 0, 0)
            return await super().snapshot(user, limits, now)


class RedisServer:
    """Clients for the test server under one random prefix; each call makes a new connection pool,
    which stands in for another gateway process."""

    def __init__(self) -> None:
        self.prefix = f"mrtest:{uuid4().hex}:"
        self.clients: list[Redis] = []

    def client(self) -> Redis:
        # Configured as `RedisLimitStore.from_url` does it: a burst waits for a pooled connection.
        pool = BlockingConnectionPool.from_url(
            REDIS_URL, max_connections=32, timeout=10, socket_timeout=5, retry=Retry(NoBackoff(), 0)
        )
        client = Redis.from_pool(pool)
        self.clients.append(client)
        return client

    def store(self, lease_seconds: float = DEFAULT_LEASE_SECONDS) -> RedisLimitStore:
        return LoadingRedisStore(self.client(), self.prefix, lease_seconds=lease_seconds)

    async def keys(self) -> list[bytes]:
        return [key async for key in self.clients[0].scan_iter(match=f"{self.prefix}*")]


@pytest.fixture
async def redis_server() -> AsyncIterator[RedisServer]:
    server = RedisServer()
    try:
        await server.client().ping()
    except redis_errors.ConnectionError as exc:
        pytest.fail(
            f"these tests need a running Redis at {REDIS_URL} (start one with `redis-server`, "
            f"or point MINDROUTER_TEST_REDIS_URL at one): {exc}",
            pytrace=False,
        )
    yield server
    keys = await server.keys()
    if keys:
        await server.clients[0].delete(*keys)
    for client in server.clients:
        await client.aclose()


StoreFactory = Callable[..., LimitStore]


@pytest.fixture(params=["memory", "redis"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def redis_if_needed(kind: str, request: pytest.FixtureRequest) -> RedisServer | None:
    # Looked up only for Redis-backed tests, so the memory half runs without a server.
    return request.getfixturevalue("redis_server") if kind == "redis" else None


@pytest.fixture
async def new_store(redis_if_needed: RedisServer | None) -> AsyncIterator[StoreFactory]:
    """Makes stores of the parametrized kind; Redis ones share the test's prefix (and so state)."""
    made: list[LimitStore] = []
    redis_server = redis_if_needed

    def make(lease_seconds: float = DEFAULT_LEASE_SECONDS) -> LimitStore:
        store: LimitStore
        if redis_server is None:
            store = MemoryLimitStore(lease_seconds=lease_seconds)
        else:
            store = redis_server.store(lease_seconds)
        made.append(store)
        return store

    yield make
    for store in made:
        await store.close()


@pytest.fixture
def store(new_store: StoreFactory) -> LimitStore:
    return new_store()
