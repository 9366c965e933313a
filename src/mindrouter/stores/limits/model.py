"""The data, the port and the pure decision rules shared by every limit store.

Both implementations (memory and the Redis Lua scripts) follow the rules written here, so a test
that passes against one describes the other. Times are float seconds supplied by the caller
(`now`), never read from a clock here, so tests can move time past a minute or a whole period.

`retry_after` is the truth (a budget can be days away); capping what goes into a `Retry-After`
header is the HTTP layer's decision, not the store's.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from mindrouter.errors import Overloaded, RateLimited

DAY_SECONDS = 86_400.0
# The per-minute limit is a sliding window of this length over admission times.
WINDOW_SECONDS = 60.0
# Nothing tells us when an in-flight request will finish; a second is a polite first retry.
BUSY_RETRY_SECONDS = 1.0
# A lease is renewed by the process holding it (`renew`, every few seconds), so it need not
# outlive the longest request: only bound how long a crashed process's slots stay held.
DEFAULT_LEASE_SECONDS = 20.0

Refusal = Literal["budget", "reserved", "rpm", "concurrency"]


@dataclass(frozen=True)
class Limits:
    """The effective limits for one user (group values with the user's overrides applied).

    0 means unlimited for the three counters.
    """

    token_budget: int = 0
    rpm: int = 0
    max_concurrent: int = 0
    budget_period_days: int = 30

    def __post_init__(self) -> None:
        if min(self.token_budget, self.rpm, self.max_concurrent) < 0:
            raise ValueError("limits must be >= 0 (0 means unlimited)")
        if self.budget_period_days < 1:
            raise ValueError("budget_period_days must be at least 1")

    @property
    def period_seconds(self) -> float:
        return self.budget_period_days * DAY_SECONDS


@dataclass(frozen=True)
class Ticket:
    """What admit() reserved; hand it back to settle() exactly once."""

    user: str
    reserved_tokens: int
    period_start: float
    lease_id: str
    admitted_at: float
    lease_expires: float
    period_seconds: float
    origin: Literal["memory", "redis"]

    @classmethod
    def leased(
        cls,
        user: str,
        limits: Limits,
        estimate: int,
        period_start: float,
        lease_id: str,
        now: float,
        expires: float,
        origin: Literal["memory", "redis"],
    ) -> Ticket:
        """The ticket of an admission at `now` that reserved `estimate` tokens of the period
        begun at `period_start` and took lease `lease_id` until `expires`."""
        return cls(
            user, estimate, period_start, lease_id, now, expires, limits.period_seconds, origin
        )


@dataclass(frozen=True)
class Activity:
    """What the durable audit trail says a user has going on, as of `now`: the admission times
    of the last minute and the requests still in flight. A store that lost its counters (Redis
    restarted empty) rebuilds the per-minute window and the in-flight count from it."""

    now: float
    admissions: tuple[float, ...] = ()
    in_flight: int = 0


@dataclass
class UsageSnapshot:
    """A user's counters as of `as_of`; the first five fields are what the database keeps."""

    user: str
    period_start: float
    period_tokens: int
    reserved_tokens: int
    lifetime_tokens: int
    in_flight: int
    requests_last_minute: int
    as_of: float = 0.0


class LimitStore(Protocol):
    async def admit(self, user: str, limits: Limits, estimate_tokens: int, now: float) -> Ticket:
        """Checks every limit, then reserves a slot, a window entry and the estimate, atomically.

        Raises RateLimited (nothing reserved) when any limit would be exceeded.
        """
        ...

    async def settle(self, ticket: Ticket, used_tokens: int, now: float) -> None:
        """Releases the slot and reservation and charges the real usage to the current period."""
        ...

    def settle_soon(self, ticket: Ticket, used_tokens: int, now: float) -> asyncio.Future[None]:
        """settle() without waiting for the store: when this returns, the settlement is made
        (in memory) or on its way (to Redis, ahead of anything this process sends it later, so
        its next admissions find the slot free); the future says when it was applied, or
        raises what stopped it (LimitStoreUnavailable)."""
        ...

    async def renew(self, tickets: Sequence[Ticket], now: float) -> None:
        """Extends the leases of `tickets` (requests still in flight here) to `now` plus the
        lease length. Leases already released or expired stay so; a store that lost its data
        since a ticket's admission takes the ticket's lease back (the request is still in
        flight), in place of one it restored from `activity` when it reloaded the user."""
        ...

    async def snapshot(self, user: str, limits: Limits, now: float) -> UsageSnapshot:
        """The user's counters as of `now`; raises UsageNotLoaded, as admit() does, when a store
        that can lose its data does not hold the user's usage (load it with seed() first)."""
        ...

    async def seed(
        self,
        user: str,
        period_start: float | None,
        period_tokens: int,
        lifetime_tokens: int,
        activity: Activity | None = None,
    ) -> None:
        """Loads persisted usage unless the store already holds newer numbers for the user
        (`period_start` None: the user has none yet); admit() raises UsageNotLoaded until a
        store that can lose its data has been seeded for the user. A store seeded for the first
        time since it lost its data also takes `activity`: the window entries, and leases (of
        no tokens, for one lease length unless renew() takes them back) for the requests in
        flight."""
        ...

    async def dirty(self) -> list[UsageSnapshot]:
        """Users whose usage changed since the previous call, each as of its last change."""
        ...

    async def close(self) -> None: ...


class LimitStoreUnavailable(Overloaded):
    """The shared counter store cannot be reached; limits cannot be enforced exactly."""


class UsageNotLoaded(Overloaded):
    """The shared counter store holds no usage for the user (it lost its data): load the
    user's usage from the database with seed(), then admit again."""


def roll_period(
    start: float | None, used: int, period_seconds: float, now: float
) -> tuple[float | None, int]:
    """Advances a finished period by whole periods and empties it; lifetime is not touched."""
    if start is None or now < start + period_seconds:
        return start, used
    return start + math.floor((now - start) / period_seconds) * period_seconds, 0


def check_limits(
    limits: Limits,
    estimate: int,
    *,
    start: float | None,
    used: int,
    reserved: int,
    in_flight: int,
    window: Sequence[float],
    now: float,
) -> tuple[Refusal, float] | None:
    """The refusal with the longest wait, or None when the request fits every limit.

    `start`/`used` are already rolled to `now`; `window` holds the sorted admission times of the
    last minute. Reporting the longest wait keeps a client from retrying into the next limit.
    """
    worst: tuple[Refusal, float] | None = None

    def consider(reason: Refusal, wait: float) -> None:
        nonlocal worst
        if worst is None or wait > worst[1]:
            worst = (reason, wait)

    budget = limits.token_budget
    if budget:
        if used + estimate > budget:
            consider(
                "budget",
                limits.period_seconds if start is None else start + limits.period_seconds - now,
            )
        elif used + reserved + estimate > budget:
            # Only in-flight reservations are in the way; they settle soon, often for less.
            consider("reserved", BUSY_RETRY_SECONDS)
    if limits.rpm and len(window) >= limits.rpm:
        # Enough entries must leave for one to fit: the one at this index is the last of them.
        consider("rpm", window[len(window) - limits.rpm] + WINDOW_SECONDS - now)
    if limits.max_concurrent and in_flight >= limits.max_concurrent:
        consider("concurrency", BUSY_RETRY_SECONDS)
    return worst


def rate_limited(
    reason: str,
    retry_after: float,
    *,
    limits: Limits,
    estimate: int,
    used: int,
    reserved: int,
    in_flight: int,
) -> RateLimited:
    if reason == "budget" and estimate > limits.token_budget:
        message = (
            f"This request needs about {estimate} tokens, more than the whole budget of "
            f"{limits.token_budget} tokens per {limits.budget_period_days}-day period."
        )
    elif reason == "budget":
        message = (
            f"Token budget used up: {used} of {limits.token_budget} tokens in the current "
            f"{limits.budget_period_days}-day period; this request needs about {estimate} more."
        )
    elif reason == "reserved":
        message = (
            f"Token budget held by requests in flight: {used} used and {reserved} reserved of "
            f"{limits.token_budget}; retry when they finish."
        )
    elif reason == "rpm":
        message = f"Rate limit reached: at most {limits.rpm} requests per minute."
    else:
        message = (
            f"Too many concurrent requests: {in_flight} in flight, "
            f"the limit is {limits.max_concurrent}."
        )
    limit = {"budget": "tokens", "reserved": "tokens"}.get(reason, reason)
    return RateLimited(message, retry_after=max(retry_after, 0.0), limit=limit)


def validate_tokens(name: str, value: int) -> None:
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
