"""Per-user limit counters in one process's memory: the embedded default and the fail-open fallback.

Every method runs to completion without awaiting, so on one event loop a check-and-reserve is
atomic with respect to every other coroutine: 200 concurrent admits see each other's slots.
Correct for one process only; replicas share limits through RedisLimitStore.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_right, insort
from collections.abc import Sequence
from dataclasses import dataclass, field
from uuid import uuid4

from mindrouter.stores.limits.model import (
    DEFAULT_LEASE_SECONDS,
    WINDOW_SECONDS,
    Activity,
    Limits,
    Ticket,
    UsageSnapshot,
    check_limits,
    rate_limited,
    roll_period,
    validate_tokens,
)


@dataclass
class _Lease:
    expires: float
    tokens: int


@dataclass
class _Usage:
    start: float | None = None
    used: int = 0
    reserved: int = 0
    lifetime: int = 0
    at: float = 0.0  # the `now` of the last change, what dirty() snapshots are taken as of
    window: list[float] = field(default_factory=list)  # admission times, sorted
    leases: dict[str, _Lease] = field(default_factory=dict)


class MemoryLimitStore:
    """Exact limits for a single process.

    Leases expire `lease_seconds` after admission or their last renewal, like the Redis ones, so
    a ticket that a bug never settles frees its slot and reservation instead of blocking the user
    for good.
    """

    def __init__(self, lease_seconds: float = DEFAULT_LEASE_SECONDS) -> None:
        if lease_seconds <= 0:
            raise ValueError("lease_seconds must be positive")
        self._lease_seconds = lease_seconds
        self._users: dict[str, _Usage] = {}
        self._dirty: set[str] = set()

    async def admit(self, user: str, limits: Limits, estimate_tokens: int, now: float) -> Ticket:
        validate_tokens("estimate_tokens", estimate_tokens)
        usage = self._users.setdefault(user, _Usage())
        self._reap(usage, now)
        del usage.window[: bisect_right(usage.window, now - WINDOW_SECONDS)]
        start, used = roll_period(usage.start, usage.used, limits.period_seconds, now)
        refusal = check_limits(
            limits,
            estimate_tokens,
            start=start,
            used=used,
            reserved=usage.reserved,
            in_flight=len(usage.leases),
            window=usage.window,
            now=now,
        )
        if refusal is not None:
            raise rate_limited(
                *refusal,
                limits=limits,
                estimate=estimate_tokens,
                used=used,
                reserved=usage.reserved,
                in_flight=len(usage.leases),
            )
        if start is None:
            start = now  # the period begins with the user's first admitted request
        if start != usage.start:
            self._dirty.add(user)
        usage.start, usage.used, usage.at = start, used, now
        lease_id = uuid4().hex
        expires = now + self._lease_seconds
        usage.leases[lease_id] = _Lease(expires, estimate_tokens)
        usage.reserved += estimate_tokens
        insort(usage.window, now)
        return Ticket.leased(user, limits, estimate_tokens, start, lease_id, now, expires, "memory")

    async def settle(self, ticket: Ticket, used_tokens: int, now: float) -> None:
        self.settle_now(ticket, used_tokens, now)

    def settle_soon(self, ticket: Ticket, used_tokens: int, now: float) -> asyncio.Future[None]:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.settle_now(ticket, used_tokens, now)
        done.set_result(None)
        return done

    def settle_now(self, ticket: Ticket, used_tokens: int, now: float) -> None:
        """settle(), which in memory never has to wait."""
        validate_tokens("used_tokens", used_tokens)
        usage = self._users.setdefault(ticket.user, _Usage())
        self._reap(usage, now)
        lease = usage.leases.pop(ticket.lease_id, None)
        if lease is not None:
            usage.reserved -= lease.tokens
        # A lease that expired was released by the reaper; the usage is still charged.
        known_start = ticket.period_start if usage.start is None else usage.start
        start, used = roll_period(known_start, usage.used, ticket.period_seconds, now)
        usage.start = start
        usage.used = used + used_tokens
        usage.lifetime += used_tokens
        usage.at = now
        self._dirty.add(ticket.user)

    async def renew(self, tickets: Sequence[Ticket], now: float) -> None:
        for ticket in tickets:
            usage = self._users.get(ticket.user)
            lease = usage.leases.get(ticket.lease_id) if usage is not None else None
            if lease is not None and lease.expires > now:
                lease.expires = now + self._lease_seconds

    async def snapshot(self, user: str, limits: Limits, now: float) -> UsageSnapshot:
        usage = self._users.get(user)
        if usage is None:
            return UsageSnapshot(user, now, 0, 0, 0, 0, 0, as_of=now)
        start, used = roll_period(usage.start, usage.used, limits.period_seconds, now)
        return self._snapshot(user, usage, start, used, now)

    async def seed(
        self,
        user: str,
        period_start: float | None,
        period_tokens: int,
        lifetime_tokens: int,
        activity: Activity | None = None,
    ) -> None:
        validate_tokens("period_tokens", period_tokens)
        validate_tokens("lifetime_tokens", lifetime_tokens)
        if period_start is None:
            return  # nothing used yet; this store never loses what it counts
        usage = self._users.setdefault(user, _Usage())
        # The lifetime total only grows, so it tells which copy is newer.
        if usage.start is not None and usage.lifetime >= lifetime_tokens:
            return
        usage.start, usage.used, usage.lifetime = period_start, period_tokens, lifetime_tokens

    async def dirty(self) -> list[UsageSnapshot]:
        users, self._dirty = self._dirty, set()
        snapshots = []
        for user in sorted(users):
            usage = self._users[user]
            if usage.start is not None:
                snapshots.append(self._snapshot(user, usage, usage.start, usage.used, usage.at))
        return snapshots

    async def close(self) -> None:
        self._users.clear()
        self._dirty.clear()

    def _reap(self, usage: _Usage, now: float) -> None:
        expired = [lid for lid, lease in usage.leases.items() if lease.expires <= now]
        for lease_id in expired:
            usage.reserved -= usage.leases.pop(lease_id).tokens
        if not usage.leases:
            usage.reserved = 0

    @staticmethod
    def _snapshot(
        user: str, usage: _Usage, start: float | None, used: int, now: float
    ) -> UsageSnapshot:
        live = [lease for lease in usage.leases.values() if lease.expires > now]
        recent = len(usage.window) - bisect_right(usage.window, now - WINDOW_SECONDS)
        return UsageSnapshot(
            user=user,
            period_start=now if start is None else start,
            period_tokens=used,
            reserved_tokens=sum(lease.tokens for lease in live),
            lifetime_tokens=usage.lifetime,
            in_flight=len(live),
            requests_last_minute=recent,
            as_of=now,
        )
