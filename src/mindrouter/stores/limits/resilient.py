"""What the gateway does about limits while Redis is unreachable.

FAIL_CLOSED (the default) refuses requests with `Overloaded` ("rate limiting is unavailable"):
failing open would silently turn every user's limits into per-process ones, multiplying them by
the number of replicas. FAIL_OPEN_LOCAL keeps serving, enforcing the limits in this process's
memory, and calls `on_degraded(reason)` every time it does so (the caller logs it and counts a
metric): degrading is never silent.

Either way, settle() never fails for want of Redis: the request has already been served, so its
usage is charged locally and kept as a pending charge that dirty() (the periodic database sync)
and close() replay into Redis once it answers again. Leases held in Redis by requests that could
not be settled there are freed by their expiry. After a failure the primary is not asked again
for `retry_primary_after` seconds (of the callers' `now`), so a dead server costs one timeout per
interval rather than one per request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar
from uuid import uuid4

from mindrouter.stores.limits.memory import MemoryLimitStore
from mindrouter.stores.limits.model import (
    Activity,
    Limits,
    LimitStore,
    LimitStoreUnavailable,
    Ticket,
    UsageSnapshot,
)

_T = TypeVar("_T")
_log = logging.getLogger(__name__)


class RedisUnavailablePolicy(Enum):
    FAIL_CLOSED = "fail_closed"
    FAIL_OPEN_LOCAL = "fail_open_local"


@dataclass
class _PendingCharge:
    tokens: int
    now: float
    period_start: float
    period_seconds: float


def _log_degraded(reason: str) -> None:
    _log.warning("limit store degraded: %s", reason)


class ResilientLimitStore:
    def __init__(
        self,
        primary: LimitStore,
        policy: RedisUnavailablePolicy = RedisUnavailablePolicy.FAIL_CLOSED,
        fallback: MemoryLimitStore | None = None,
        on_degraded: Callable[[str], None] = _log_degraded,
        retry_primary_after: float = 1.0,
    ) -> None:
        self._primary = primary
        self._policy = policy
        self._fallback = fallback if fallback is not None else MemoryLimitStore()
        self._on_degraded = on_degraded
        self._retry_after = retry_primary_after
        self._down_until = float("-inf")
        self._local_leases: set[str] = set()
        self._pending: dict[str, _PendingCharge] = {}

    async def admit(self, user: str, limits: Limits, estimate_tokens: int, now: float) -> Ticket:
        async def local() -> Ticket:
            ticket = await self._fallback.admit(user, limits, estimate_tokens, now)
            self._local_leases.add(ticket.lease_id)  # so settle() returns it to the same store
            return ticket

        return await self._either(
            "admit", now, lambda: self._primary.admit(user, limits, estimate_tokens, now), local
        )

    async def settle(self, ticket: Ticket, used_tokens: int, now: float) -> None:
        await self.settle_soon(ticket, used_tokens, now)

    def settle_soon(self, ticket: Ticket, used_tokens: int, now: float) -> asyncio.Future[None]:
        """Never fails: a settlement Redis does not take is charged here instead (see the
        module doc). The future is done once it was applied, in one store or the other."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if ticket.lease_id in self._local_leases:
            self._local_leases.discard(ticket.lease_id)
        elif now >= self._down_until:

            def answered(sent: asyncio.Future[None]) -> None:
                exc = sent.exception() if not sent.cancelled() else LimitStoreUnavailable("")
                if isinstance(exc, LimitStoreUnavailable):
                    self._deferred(exc, ticket, used_tokens, now)
                elif exc is not None:
                    _log.error("settling limits failed: %s", exc)
                done.set_result(None)

            try:
                sent = self._primary.settle_soon(ticket, used_tokens, now)
            except LimitStoreUnavailable as exc:
                self._deferred(exc, ticket, used_tokens, now)
                done.set_result(None)
            else:
                sent.add_done_callback(answered)
            return done
        else:
            self._on_degraded("settle deferred: the limit store is marked unavailable")
        self._charge_here(ticket, used_tokens, now)
        done.set_result(None)
        return done

    def _deferred(
        self, exc: LimitStoreUnavailable, ticket: Ticket, used_tokens: int, now: float
    ) -> None:
        self._down_until = now + self._retry_after
        self._on_degraded(f"settle deferred: {exc.message}")
        self._charge_here(ticket, used_tokens, now)

    def _charge_here(self, ticket: Ticket, used_tokens: int, now: float) -> None:
        # The local store releases its own lease, or just charges a ticket it never issued.
        self._fallback.settle_now(ticket, used_tokens, now)
        if used_tokens:
            pending = self._pending.get(ticket.user)
            if pending is None:
                self._pending[ticket.user] = _PendingCharge(
                    used_tokens, now, ticket.period_start, ticket.period_seconds
                )
            else:
                pending.tokens += used_tokens
                pending.now = max(pending.now, now)

    async def renew(self, tickets: Sequence[Ticket], now: float) -> None:
        local = [t for t in tickets if t.lease_id in self._local_leases]
        await self._fallback.renew(local, now)
        shared = [t for t in tickets if t.lease_id not in self._local_leases]
        if shared and now >= self._down_until:
            try:
                await self._primary.renew(shared, now)
            except LimitStoreUnavailable as exc:
                # Not renewed, the leases lapse in Redis: the slots come back free, never stuck.
                self._down_until = now + self._retry_after
                self._on_degraded(f"renew: {exc.message}")

    async def snapshot(self, user: str, limits: Limits, now: float) -> UsageSnapshot:
        return await self._either(
            "snapshot",
            now,
            lambda: self._primary.snapshot(user, limits, now),
            lambda: self._fallback.snapshot(user, limits, now),
        )

    async def seed(
        self,
        user: str,
        period_start: float | None,
        period_tokens: int,
        lifetime_tokens: int,
        activity: Activity | None = None,
    ) -> None:
        # The local copy too, so that failing open starts from the persisted usage, not zero.
        await self._fallback.seed(user, period_start, period_tokens, lifetime_tokens)
        await self._either(
            "seed",
            None,
            lambda: self._primary.seed(
                user, period_start, period_tokens, lifetime_tokens, activity
            ),
            _nothing,
        )

    async def dirty(self) -> list[UsageSnapshot]:
        # Local numbers are partial; they reach the database through the replayed charges only.
        await self._fallback.dirty()
        await self._replay_pending()
        return await self._either("dirty", None, self._primary.dirty, _no_snapshots)

    async def close(self) -> None:
        await self._replay_pending()
        for user, pending in self._pending.items():
            self._on_degraded(f"lost {pending.tokens} tokens of usage for {user!r} at shutdown")
        await self._primary.close()
        await self._fallback.close()

    @property
    def pending_tokens(self) -> dict[str, int]:
        """Usage charged locally and not yet replayed into the primary, per user."""
        return {user: pending.tokens for user, pending in self._pending.items()}

    async def _either(
        self,
        operation: str,
        now: float | None,
        primary: Callable[[], Awaitable[_T]],
        fallback: Callable[[], Awaitable[_T]],
    ) -> _T:
        if now is None or now >= self._down_until:
            try:
                return await primary()
            except LimitStoreUnavailable as exc:
                if now is not None:
                    self._down_until = now + self._retry_after
                reason = f"{operation}: {exc.message}"
        else:
            reason = f"{operation}: rate limiting is unavailable (store marked down)"
        if self._policy is RedisUnavailablePolicy.FAIL_CLOSED:
            raise LimitStoreUnavailable(reason)
        self._on_degraded(f"{reason}; enforcing limits in this process only")
        return await fallback()

    async def _replay_pending(self) -> None:
        for user in list(self._pending):
            pending = self._pending[user]
            charge = Ticket(
                user=user,
                reserved_tokens=0,
                period_start=pending.period_start,
                lease_id=f"replay-{uuid4().hex}",
                admitted_at=pending.now,
                lease_expires=pending.now,
                period_seconds=pending.period_seconds,
                origin="redis",
            )
            try:
                await self._primary.settle(charge, pending.tokens, pending.now)
            except LimitStoreUnavailable:
                return
            del self._pending[user]


async def _nothing() -> None:
    return None


async def _no_snapshots() -> list[UsageSnapshot]:
    return []
