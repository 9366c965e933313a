"""The Redis client every shared store uses: short timeouts, no retries, a blocking pool.

No retries because the stores' scripts are not idempotent (a retried charge or failure would
count twice; each store decides itself what to send again). A blocking pool because a burst
should wait for a connection, not fail with "Too many connections" as the default pool does.
"""

from __future__ import annotations

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff


def short_timeout_client(url: str, *, max_connections: int, timeout_seconds: float) -> Redis:
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=timeout_seconds,
        socket_connect_timeout=timeout_seconds,
        socket_timeout=timeout_seconds,
        retry=Retry(NoBackoff(), 0),
    )
    return Redis.from_pool(pool)


def text_of(value: object) -> str:
    """A reply value as text: redis-py returns bytes unless the client decodes responses."""
    return value.decode() if isinstance(value, bytes) else str(value)
