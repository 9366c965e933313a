"""How the limit store speaks to Redis: Redis's errors as the store raises them, numbers on the
wire, and the usage view's reply.

Redis connection and timeout errors become `LimitStoreUnavailable` (an `Overloaded`) here, the
one place they are translated; an exhausted client pool is the store being busy, not Redis
being away.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Sequence
from contextlib import asynccontextmanager
from typing import Any, cast

from redis import exceptions as redis_errors
from redis.asyncio import Redis

from mindrouter.errors import Overloaded
from mindrouter.stores.limits.model import LimitStoreUnavailable, UsageSnapshot
from mindrouter.stores.redis_client import text_of


@asynccontextmanager
async def unavailable_on_redis_errors(client: Redis) -> AsyncIterator[None]:
    try:
        yield
    except redis_errors.MaxConnectionsError as exc:
        # Our own pool is exhausted (a non-blocking pool under a burst): Redis itself is fine, so
        # this must not trip the unavailability policy.
        raise Overloaded(f"rate limiting is busy (Redis client pool: {exc})") from exc
    except (redis_errors.ConnectionError, redis_errors.TimeoutError) as exc:
        raise await unavailable_after(client, exc) from exc


async def unavailable_after(client: Redis, exc: Exception) -> LimitStoreUnavailable:
    # After a Redis restart every idle pooled connection is dead, and each would fail one
    # request in turn: drop them all, so that the next calls connect afresh.
    with contextlib.suppress(Exception):
        await client.connection_pool.disconnect(inuse_connections=False)
    return _down(exc)


def unavailable(exc: BaseException) -> BaseException:
    """What a settlement sent on the pipelined connection failed with, as the store raises it."""
    if isinstance(exc, redis_errors.ConnectionError | redis_errors.TimeoutError):
        return _down(exc)
    return exc


def _down(exc: BaseException) -> LimitStoreUnavailable:
    return LimitStoreUnavailable(f"rate limiting is unavailable (Redis: {exc})")


def num(value: float) -> str:
    return repr(float(value))


async def await_(result: Awaitable[Any] | Any) -> Any:
    # redis-py types its asyncio commands as "awaitable or value" (shared with the sync client).
    return await cast(Awaitable[Any], result)


def parse_snapshot(user: str, reply: Sequence[object]) -> UsageSnapshot | None:
    if not reply:
        return None
    start, used, reserved, lifetime, in_flight, recent, as_of = (text_of(v) for v in reply)
    return UsageSnapshot(
        user=user,
        period_start=float(start) if start else float(as_of),
        period_tokens=int(used),
        reserved_tokens=int(reserved),
        lifetime_tokens=int(lifetime),
        in_flight=int(in_flight),
        requests_last_minute=int(recent),
        as_of=float(as_of),
    )
