"""What the limit check costs a request: microseconds per admit + settle, memory and Redis.

    .venv/bin/python -m bench.limits_cost [--requests N] [--redis-url URL] [--uvloop]

"sequential" is one request at a time (the latency a request pays); "concurrent" runs them in
batches with asyncio.gather (the throughput one process gets). Every check is active, with limits
high enough that nothing is refused, so the numbers include the window and lease bookkeeping.
An admit + settle is two round trips to Redis, so the time of two PINGs on the same client is
printed as the floor to compare with. Redis keys go under a random prefix and are deleted.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from uuid import uuid4

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from mindrouter.stores.limits import Limits, LimitStore, MemoryLimitStore, RedisLimitStore

LIMITS = Limits(token_budget=10**12, rpm=10**9, max_concurrent=10**6)
USERS = [f"user{i}" for i in range(100)]


async def one(store: LimitStore, user: str) -> None:
    now = time.time()
    ticket = await store.admit(user, LIMITS, 500, now)
    await store.settle(ticket, 450, now)


async def sequential(store: LimitStore, requests: int) -> float:
    started = time.perf_counter()
    for i in range(requests):
        await one(store, USERS[i % len(USERS)])
    return (time.perf_counter() - started) / requests * 1e6


async def concurrent(store: LimitStore, requests: int, batch: int = 64) -> float:
    started = time.perf_counter()
    for first in range(0, requests, batch):
        await asyncio.gather(
            *(one(store, USERS[i % len(USERS)]) for i in range(first, first + batch))
        )
    return (time.perf_counter() - started) / requests * 1e6


async def measure(name: str, store: LimitStore, requests: int) -> None:
    for user in USERS:  # as the gateway does the first time it sees a user: nothing used yet
        await store.seed(user, None, 0, 0)
    await sequential(store, min(requests, 500))  # warm up: connections, script cache
    seq = await sequential(store, requests)
    conc = await concurrent(store, requests)
    print(f"{name:<8} sequential {seq:8.1f} µs/request   concurrent {conc:8.1f} µs/request")


async def main(requests: int, redis_url: str) -> None:
    await measure("memory", MemoryLimitStore(), requests)
    prefix = f"mrbench:{uuid4().hex}:"
    pool = BlockingConnectionPool.from_url(
        redis_url, max_connections=64, timeout=10, socket_timeout=5, retry=Retry(NoBackoff(), 0)
    )
    client = Redis.from_pool(pool)
    try:
        await measure("redis", RedisLimitStore(client, prefix), requests)
        started = time.perf_counter()
        for _ in range(requests):
            await client.ping()
        floor = 2 * (time.perf_counter() - started) / requests * 1e6
        print(f"{'2 PINGs':<8} sequential {floor:8.1f} µs/request   (the round-trip floor)")
    finally:
        keys = [key async for key in client.scan_iter(match=f"{prefix}*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--uvloop", action="store_true", help="run on uvloop, as `serve` does")
    options = parser.parse_args()
    if options.uvloop:
        import uvloop

        uvloop.run(main(options.requests, options.redis_url))
    else:
        asyncio.run(main(options.requests, options.redis_url))
