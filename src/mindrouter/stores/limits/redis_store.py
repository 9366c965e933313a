"""Per-user limit counters in Redis, exact across every process and replica that shares the server.

Each admit and each settle is one Lua script (see `lua.py` for keys and TTLs), so check-all-then-
reserve is atomic on the server and a refused request reserves nothing. Admissions and
settlements (what every request sends), usage views and loads go over one pipelined connection
(`stores/redis_pipe.py`) on which their scripts are loaded when it opens: an admission is one
round trip, and a settlement is written to the socket by `settle_soon` without the request
waiting for its reply, ahead of anything this process sends afterwards (its next admissions and
views included); so do the lease renewals. Only the dirty set goes through the redis-py client.
Scripts run by EVALSHA; a server that lost its script cache under an open connection (SCRIPT
FLUSH) answers NOSCRIPT, and the script is then sent whole (EVAL).

Concurrency slots and reserved tokens are leases that expire `lease_seconds` (default 20 s) after
admission (by the caller's clock) unless renewed, and are reaped inside the scripts. The process
holding them renews the leases of its requests in flight every few seconds (`renew`, driven by
`pipeline/leases.py`), so a live request keeps its slot however long it runs, while the slots of a
process that was killed are free again at most `lease_seconds` after its last renewal.

Redis connection and timeout errors become `LimitStoreUnavailable` (an `Overloaded`,
`redis_wire.py`); `ResilientLimitStore` decides what to do about them. Give injected clients short
socket timeouts and no retries: redis-py retries by default, and a retried script that had already
run would admit twice. `from_url` builds such a client. Targets a single Redis server (or a primary
behind Sentinel): the scripts also touch the shared `dirty` set, which Redis Cluster would reject.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from uuid import uuid4

from redis import exceptions as redis_errors
from redis.asyncio import Redis

from mindrouter.stores.limits import lua
from mindrouter.stores.limits.model import (
    BUSY_RETRY_SECONDS,
    DEFAULT_LEASE_SECONDS,
    WINDOW_SECONDS,
    Activity,
    Limits,
    LimitStoreUnavailable,
    Ticket,
    UsageNotLoaded,
    UsageSnapshot,
    rate_limited,
    validate_tokens,
)
from mindrouter.stores.limits.redis_wire import (
    await_,
    num,
    parse_snapshot,
    unavailable,
    unavailable_after,
    unavailable_on_redis_errors,
)
from mindrouter.stores.redis_client import short_timeout_client, text_of
from mindrouter.stores.redis_pipe import PipedRedis, Script

# Garbage collection only (Redis's own clock); the scripts decide expiry by the caller's `now`.
_TTL_SLACK_MS = 60_000


_WINDOW, _BUSY_RETRY = num(WINDOW_SECONDS), num(BUSY_RETRY_SECONDS)


class RedisLimitStore:
    def __init__(
        self,
        client: Redis,
        prefix: str = "mr:",
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        owns_client: bool = False,
    ) -> None:
        if lease_seconds <= 0:
            raise ValueError("lease_seconds must be positive")
        self._client = client
        self._prefix = f"{prefix}limits:"
        self._lease_seconds = lease_seconds
        self._lease_ttl_ms = int(lease_seconds * 1000) + _TTL_SLACK_MS
        self._window_ttl_ms = int(WINDOW_SECONDS * 1000) + _TTL_SLACK_MS
        self._owns_client = owns_client
        self._admit = Script(lua.ADMIT)
        self._settle = Script(lua.SETTLE)
        self._snapshot = Script(lua.SNAPSHOT)
        self._renew = Script(lua.RENEW)
        self._seed = Script(lua.SEED)
        self._unreported: set[str] = set()  # popped from `dirty` but not yet handed out
        timeout = client.connection_pool.connection_kwargs.get("socket_timeout") or 5.0
        self._pipe = PipedRedis.like(
            client,
            timeout=timeout,
            scripts=(self._admit, self._settle, self._snapshot, self._seed, self._renew),
        )
        # Lease ids: unique across processes (the random part) and cheap per request (the count).
        self._lease_ids = map(f"{uuid4().hex[:16]}-{{:x}}".format, itertools.count())
        # Each user's key names, made once (a request's admission and settlement name them).
        self._keys: dict[str, list[str]] = {}
        self._admit_keys_of: dict[str, list[str]] = {}
        self._settle_keys_of: dict[str, list[str]] = {}

    @classmethod
    def from_url(
        cls,
        url: str,
        prefix: str = "mr:",
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        timeout_seconds: float = 1.0,
        max_connections: int = 64,
    ) -> RedisLimitStore:
        """A store owning a client with short timeouts, no retries (see the module doc) and a
        blocking pool: a burst waits for a connection instead of failing with "Too many
        connections", which the default pool does past its size."""
        client = short_timeout_client(
            url, max_connections=max_connections, timeout_seconds=timeout_seconds
        )
        return cls(client, prefix, lease_seconds=lease_seconds, owns_client=True)

    def _user_keys(self, user: str) -> list[str]:
        keys = self._keys.get(user)
        if keys is None:
            if len(self._keys) >= 10_000:
                # A bound, not a cache policy: rebuilding them is cheap.
                self._keys.clear()
                self._admit_keys_of.clear()
                self._settle_keys_of.clear()
            p = self._prefix
            keys = self._keys[user] = [
                f"{p}usage:{user}",
                f"{p}window:{user}",
                f"{p}leases:{user}",
                f"{p}lease_tokens:{user}",
            ]
        return keys

    def _admit_keys(self, user: str) -> list[str]:
        keys = self._admit_keys_of.get(user)
        if keys is None:
            keys = self._admit_keys_of[user] = [*self._user_keys(user), self._dirty_key]
        return keys

    def _settle_keys(self, user: str) -> list[str]:
        keys = self._settle_keys_of.get(user)
        if keys is None:
            usage, _window, leases, tokens = self._user_keys(user)
            keys = self._settle_keys_of[user] = [usage, leases, tokens, self._dirty_key]
        return keys

    @property
    def _dirty_key(self) -> str:
        return f"{self._prefix}dirty"

    async def admit(self, user: str, limits: Limits, estimate_tokens: int, now: float) -> Ticket:
        validate_tokens("estimate_tokens", estimate_tokens)
        lease_id = next(self._lease_ids)
        expires = now + self._lease_seconds
        args: list[str | int] = [
            num(now),
            limits.token_budget,
            limits.rpm,
            limits.max_concurrent,
            num(limits.period_seconds),
            estimate_tokens,
            lease_id,
            num(expires),
            user,
            _WINDOW,
            _BUSY_RETRY,
            self._window_ttl_ms,
            self._lease_ttl_ms,
        ]
        try:
            reply = await self._admit.call(self._pipe, self._admit_keys(user), args)
        except (redis_errors.ConnectionError, redis_errors.TimeoutError) as exc:
            raise await unavailable_after(self._client, exc) from exc
        except asyncio.CancelledError:
            # The caller left (its client hung up) with the script sent: it may have taken a
            # lease that nobody would give back before it lapses. Its release goes out now, on
            # the same connection, so Redis runs it after the admission; it changes nothing if
            # the admission took no lease.
            unanswered = Ticket.leased(
                user, limits, estimate_tokens, now, lease_id, now, expires, "redis"
            )
            self.settle_soon(unanswered, 0, now)
            raise
        if int(reply[0]) == 2:
            raise UsageNotLoaded(
                "rate limiting is reloading this user's usage after Redis lost it; retry"
            )
        if int(reply[0]) != 1:
            reason, wait, used, reserved, in_flight = (text_of(v) for v in reply[1:6])
            raise rate_limited(
                reason,
                float(wait),
                limits=limits,
                estimate=estimate_tokens,
                used=int(used),
                reserved=int(reserved),
                in_flight=int(in_flight),
            )
        start = float(text_of(reply[1]))
        return Ticket.leased(user, limits, estimate_tokens, start, lease_id, now, expires, "redis")

    async def settle(self, ticket: Ticket, used_tokens: int, now: float) -> None:
        await self.settle_soon(ticket, used_tokens, now)

    def settle_soon(self, ticket: Ticket, used_tokens: int, now: float) -> asyncio.Future[None]:
        """Writes the settlement now, ahead of anything this process sends Redis afterwards;
        the future is its reply (LimitStoreUnavailable when Redis did not take it)."""
        validate_tokens("used_tokens", used_tokens)
        keys = self._settle_keys(ticket.user)
        args: list[str | int] = [
            num(now),
            ticket.lease_id,
            used_tokens,
            num(ticket.period_seconds),
            num(ticket.period_start),
            ticket.user,
        ]
        sent = self._settle.send(self._pipe, keys, args)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        sent.add_done_callback(
            functools.partial(_settled, done, lambda: self._settle.call(self._pipe, keys, args))
        )
        return done

    async def renew(self, tickets: Sequence[Ticket], now: float) -> None:
        by_user: dict[str, list[str | int]] = {}
        for t in tickets:
            lease: list[str | int] = [t.lease_id, num(t.admitted_at), t.reserved_tokens]
            by_user.setdefault(t.user, []).extend(lease)
        if not by_user:
            return
        head: list[str | int] = [num(now), num(now + self._lease_seconds), self._lease_ttl_ms]
        # On the pipelined connection too: it connects afresh after Redis restarted, where an
        # idle pooled connection would fail the first renewal after it (and that failure would
        # mark the store down for the admissions).
        async with unavailable_on_redis_errors(self._client):
            for user, leases in by_user.items():
                usage, _window, lease_key, tokens = self._user_keys(user)
                await self._renew.call(self._pipe, [usage, lease_key, tokens], [*head, *leases])

    async def snapshot(self, user: str, limits: Limits, now: float) -> UsageSnapshot:
        args: list[str | int] = [num(now), num(limits.period_seconds), _WINDOW]
        # On the pipelined connection: a view this process shows after a request ended is
        # read after that request's settlement.
        async with unavailable_on_redis_errors(self._client):
            reply = await self._snapshot.call(self._pipe, self._user_keys(user), args)
        if len(reply) == 1:
            raise UsageNotLoaded("this user's usage is being reloaded after Redis lost it; retry")
        return parse_snapshot(user, reply) or UsageSnapshot(user, now, 0, 0, 0, 0, 0, as_of=now)

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
        start = "" if period_start is None else num(period_start)
        now = activity.now if activity is not None else 0.0
        admissions = activity.admissions if activity is not None else ()
        in_flight = activity.in_flight if activity is not None else 0
        args: list[str | int] = [
            start,
            period_tokens,
            lifetime_tokens,
            num(now + self._lease_seconds),
            self._window_ttl_ms,
            self._lease_ttl_ms,
            in_flight,
            num(now),
            *(num(t) for t in admissions),
        ]
        async with unavailable_on_redis_errors(self._client):
            await self._seed.call(self._pipe, self._user_keys(user), args)

    async def dirty(self) -> list[UsageSnapshot]:
        """Pops the shared dirty set: with several replicas, each change is reported by one."""
        async with unavailable_on_redis_errors(self._client):
            while batch := await await_(self._client.spop(self._dirty_key, 1000)):
                self._unreported.update(text_of(user) for user in batch)
            users = sorted(self._unreported)
            # Load once, then pipeline: one round trip for every changed user.
            await await_(self._client.script_load(self._snapshot.source))
            async with self._client.pipeline(transaction=False) as pipe:
                for user in users:
                    args = ["", "", num(WINDOW_SECONDS)]
                    pipe.evalsha(self._snapshot.sha, 4, *self._user_keys(user), *args)
                replies = await pipe.execute(raise_on_error=False)
            snapshots = []
            for user, piped in zip(users, replies, strict=True):
                reply = piped
                if isinstance(piped, redis_errors.NoScriptError):
                    args = ["", "", num(WINDOW_SECONDS)]
                    reply = await self._snapshot.run(self._client, self._user_keys(user), args)
                elif isinstance(piped, Exception):
                    raise piped
                snapshot = parse_snapshot(user, reply)
                if snapshot is not None:
                    snapshots.append(snapshot)
        # Only now are they handed out; a failure above keeps them for the next call.
        self._unreported.clear()
        return snapshots

    async def close(self) -> None:
        await self._pipe.aclose()  # the settlements still due are answered first
        if self._owns_client:
            await self._client.aclose()


def _settled(
    done: asyncio.Future[None],
    resend: Callable[[], Awaitable[Any]] | None,
    reply: asyncio.Future[Any],
) -> None:
    """Passes a settlement's reply on to `done`. Redis's script cache flushed under the open
    connection: sent once more whole (`resend`), whose reply then goes to `done`. A module
    function, not a closure that names itself for the retry: that loop would leave every
    settlement's future to the collector."""
    if reply.cancelled():
        done.set_exception(LimitStoreUnavailable("settling limits was cancelled"))
        return
    exc = reply.exception()
    if isinstance(exc, redis_errors.NoScriptError) and resend is not None:
        retry = asyncio.ensure_future(resend())
        retry.add_done_callback(functools.partial(_settled, done, None))
    elif exc is not None:
        done.set_exception(unavailable(exc))
    else:
        done.set_result(None)
