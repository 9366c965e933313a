"""What happens to limits while Redis is unreachable."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Sequence

import pytest
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from mindrouter.errors import Overloaded, RateLimited
from mindrouter.stores.limits import (
    Activity,
    Limits,
    LimitStore,
    LimitStoreUnavailable,
    MemoryLimitStore,
    RedisLimitStore,
    RedisUnavailablePolicy,
    ResilientLimitStore,
    Ticket,
    UsageSnapshot,
)

from .conftest import RedisServer

T0 = 1_700_000_000.0
LIMITS = Limits(max_concurrent=1, rpm=100)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def dead_redis() -> AsyncIterator[RedisLimitStore]:
    client = Redis(host="127.0.0.1", port=closed_port(), retry=Retry(NoBackoff(), 0))
    yield RedisLimitStore(client, "mrtest:dead:")
    await client.aclose()


class FlakyStore:
    """A primary that can be switched off: a memory store behind an availability flag."""

    def __init__(self) -> None:
        self.inner = MemoryLimitStore()
        self.down = False
        self.calls = 0

    def _check(self) -> None:
        self.calls += 1
        if self.down:
            raise LimitStoreUnavailable("rate limiting is unavailable (switched off)")

    async def admit(self, user: str, limits: Limits, estimate_tokens: int, now: float) -> Ticket:
        self._check()
        return await self.inner.admit(user, limits, estimate_tokens, now)

    async def settle(self, ticket: Ticket, used_tokens: int, now: float) -> None:
        self._check()
        await self.inner.settle(ticket, used_tokens, now)

    def settle_soon(self, ticket: Ticket, used_tokens: int, now: float) -> asyncio.Future[None]:
        self._check()
        return self.inner.settle_soon(ticket, used_tokens, now)

    async def renew(self, tickets: Sequence[Ticket], now: float) -> None:
        self._check()
        await self.inner.renew(tickets, now)

    async def snapshot(self, user: str, limits: Limits, now: float) -> UsageSnapshot:
        self._check()
        return await self.inner.snapshot(user, limits, now)

    async def seed(
        self,
        user: str,
        period_start: float | None,
        period_tokens: int,
        lifetime_tokens: int,
        activity: Activity | None = None,
    ) -> None:
        self._check()
        await self.inner.seed(user, period_start, period_tokens, lifetime_tokens, activity)

    async def dirty(self) -> list[UsageSnapshot]:
        self._check()
        return await self.inner.dirty()

    async def close(self) -> None:
        await self.inner.close()


async def test_unreachable_redis_fails_closed_by_default(dead_redis: RedisLimitStore) -> None:
    with pytest.raises(LimitStoreUnavailable) as direct:
        await dead_redis.admit("alice", LIMITS, 1, T0)
    assert isinstance(direct.value, Overloaded)

    store = ResilientLimitStore(dead_redis)
    with pytest.raises(Overloaded, match="rate limiting is unavailable"):
        await store.admit("alice", LIMITS, 1, T0)
    with pytest.raises(Overloaded):
        await store.snapshot("alice", LIMITS, T0 + 5)


async def test_fail_open_local_admits_in_memory_and_says_so(dead_redis: RedisLimitStore) -> None:
    reports: list[str] = []
    store = ResilientLimitStore(
        dead_redis, RedisUnavailablePolicy.FAIL_OPEN_LOCAL, MemoryLimitStore(), reports.append
    )
    ticket = await store.admit("alice", LIMITS, 5, T0)
    assert ticket.origin == "memory"
    assert len(reports) == 1 and "enforcing limits in this process only" in reports[0]
    with pytest.raises(RateLimited):  # the limits still hold, per process
        await store.admit("alice", LIMITS, 5, T0 + 0.1)
    assert len(reports) == 2  # every time, not once

    await store.settle(ticket, 9, T0 + 1)
    assert store.pending_tokens == {"alice": 9}
    assert await store.dirty() == []
    assert len(reports) == 3


async def test_local_usage_is_replayed_when_the_primary_returns() -> None:
    primary, reports = FlakyStore(), list[str]()
    store = ResilientLimitStore(
        primary, RedisUnavailablePolicy.FAIL_OPEN_LOCAL, on_degraded=reports.append
    )
    await store.seed("alice", T0 - 10, 100, 1000)
    before = await store.admit("alice", LIMITS, 5, T0)  # issued by the primary

    primary.down = True
    await store.settle(before, 7, T0 + 1)  # the primary has gone: deferred, not lost
    local = await store.admit("alice", LIMITS, 5, T0 + 2.5)
    await store.settle(local, 11, T0 + 3)
    assert store.pending_tokens == {"alice": 18}
    calls = primary.calls
    assert reports

    primary.down = False
    [snap] = await store.dirty()
    assert store.pending_tokens == {}
    assert (snap.period_tokens, snap.lifetime_tokens) == (118, 1018)
    assert primary.calls > calls


async def test_a_failed_primary_is_not_asked_again_at_once() -> None:
    primary = FlakyStore()
    primary.down = True
    store = ResilientLimitStore(
        primary, RedisUnavailablePolicy.FAIL_OPEN_LOCAL, on_degraded=lambda _: None
    )
    for i in range(10):
        await store.settle(await store.admit(f"user{i}", LIMITS, 1, T0 + i / 10), 1, T0 + i / 10)
    assert primary.calls == 1
    await store.admit("alice", LIMITS, 1, T0 + 1.5)  # the interval has passed: asked again
    assert primary.calls == 2


async def test_a_healthy_redis_is_used(redis_server: RedisServer) -> None:
    store: LimitStore = ResilientLimitStore(redis_server.store())
    ticket = await store.admit("alice", LIMITS, 5, T0)
    assert ticket.origin == "redis"
    await store.settle(ticket, 3, T0 + 1)
    assert [s.lifetime_tokens for s in await store.dirty()] == [3]
    await store.close()


async def test_renewals_go_where_the_leases_are_and_survive_an_outage() -> None:
    primary = FlakyStore()
    store = ResilientLimitStore(
        primary, RedisUnavailablePolicy.FAIL_OPEN_LOCAL, on_degraded=lambda _: None
    )
    limits = Limits(max_concurrent=2)
    shared = await store.admit("alice", limits, 1, T0)
    primary.down = True
    local = await store.admit("alice", limits, 1, T0 + 1)  # answered locally
    await store.renew([shared, local], T0 + 2)  # the primary is down: not raised
    primary.down = False
    await store.renew([shared, local], T0 + 15)
    await store.renew([shared, local], T0 + 30)
    snap = await primary.inner.snapshot("alice", limits, T0 + 40)
    assert snap.in_flight == 1  # renewed in the primary past its first 20 s
