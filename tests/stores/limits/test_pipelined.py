"""The limit store's pipelined connection when its Redis goes away, hangs, or comes back empty.

Each test runs a redis-server of its own (a free port, nothing saved), which it kills or stops.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench.harness import OwnRedis
from redis import exceptions as redis_errors

from mindrouter.stores.limits import (
    Limits,
    LimitStoreUnavailable,
    RedisLimitStore,
    RedisUnavailablePolicy,
    ResilientLimitStore,
    UsageNotLoaded,
)
from mindrouter.stores.redis_pipe import PipedRedis

T0 = 1_700_000_000.0
LIMITS = Limits(max_concurrent=2, token_budget=1000)


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    server = OwnRedis(tmp_path / "redis").start()
    yield server
    server.stop()


async def test_a_settlement_lost_with_redis_is_charged_here_and_the_next_admission_reconnects(
    own_redis: OwnRedis,
) -> None:
    primary = RedisLimitStore.from_url(own_redis.url, "mrtest:", timeout_seconds=1.0)
    store = ResilientLimitStore(primary, RedisUnavailablePolicy.FAIL_CLOSED, retry_primary_after=1)
    await store.seed("alice", None, 0, 0)
    ticket = await store.admit("alice", LIMITS, 10, T0)
    own_redis.kill()
    await store.settle_soon(ticket, 7, T0 + 1)  # sent to nobody: charged in this process
    assert store.pending_tokens == {"alice": 7}
    own_redis.start()  # empty: no usage, no scripts
    # The connection is opened again with the scripts loaded: the store asks for the usage.
    with pytest.raises(UsageNotLoaded):
        await primary.admit("alice", LIMITS, 10, T0 + 3)
    await store.seed("alice", None, 0, 0)
    await store.admit("alice", LIMITS, 10, T0 + 3)
    await store.dirty()  # replays the charge made here
    assert store.pending_tokens == {}
    snap = await store.snapshot("alice", LIMITS, T0 + 4)
    assert (snap.period_tokens, snap.in_flight) == (7, 1)
    await store.close()


async def test_a_hung_redis_times_out_and_the_connection_is_opened_again(
    own_redis: OwnRedis,
) -> None:
    store = RedisLimitStore.from_url(own_redis.url, "mrtest:", timeout_seconds=0.3)
    await store.seed("bob", None, 0, 0)
    first = await store.admit("bob", LIMITS, 10, T0)
    assert own_redis._proc is not None
    pid = own_redis._proc.pid
    os.kill(pid, signal.SIGSTOP)  # hung: connected, not answering
    try:
        sent = store.settle_soon(first, 5, T0 + 1)  # nobody waits for it: its timer does
        with pytest.raises(LimitStoreUnavailable):
            await store.admit("bob", LIMITS, 10, T0 + 1)
        with pytest.raises(LimitStoreUnavailable):
            await sent
    finally:
        os.kill(pid, signal.SIGCONT)
    # Redis answers again; what it ran of the above is its own business (the settlement may
    # have been applied): the store connects afresh and goes on.
    for _ in range(20):
        try:
            await store.admit("bob", Limits(), 1, T0 + 2)
            break
        except LimitStoreUnavailable:
            await asyncio.sleep(0.1)
    else:
        pytest.fail("the store did not reconnect")
    assert store._pipe.connects >= 2
    await store.close()


async def test_the_first_renewal_after_redis_restarted_reaches_it(own_redis: OwnRedis) -> None:
    # Renewals run every few seconds, long after the restart: none of them may meet a
    # connection that died with the old server, which would mark the store down and refuse
    # admissions that Redis could answer.
    primary = RedisLimitStore.from_url(own_redis.url, "mrtest:", timeout_seconds=1.0)
    store = ResilientLimitStore(primary, RedisUnavailablePolicy.FAIL_CLOSED, retry_primary_after=60)
    await store.seed("carol", None, 0, 0)
    tickets = [await store.admit("carol", LIMITS, 10, T0) for _ in range(2)]
    await store.renew(tickets, T0 + 1)
    own_redis.kill()
    own_redis.start()  # empty
    for _ in range(1000):  # the loss is seen when the loop next reads the socket
        if primary._pipe._conn is None:
            break
        await asyncio.sleep(0.001)
    await store.seed("carol", None, 0, 0)  # as the usage sync reloads it
    await store.renew(tickets, T0 + 2)
    # Not marked down: the next admission is Redis's.
    await store.settle(tickets[0], 5, T0 + 3)
    ticket = await store.admit("carol", LIMITS, 10, T0 + 3)
    assert ticket.origin == "redis" and store.pending_tokens == {}
    await store.close()


async def test_one_watchdog_times_out_each_command_at_its_own_deadline(
    own_redis: OwnRedis,
) -> None:
    """Commands answered in time never time out, however long the traffic lasts past the
    first one's deadline; once Redis hangs, a command fails `timeout` after it was sent, not
    when an earlier one's deadline passed."""
    pipe = PipedRedis({"host": "127.0.0.1", "port": own_redis.port}, timeout=0.2)
    loop = asyncio.get_running_loop()
    try:
        until = loop.time() + 0.7  # past three deadlines, a command every 10 ms
        while loop.time() < until:
            assert await pipe.call("PING") == b"PONG"
            pipe.send("PING")
            await asyncio.sleep(0.01)
        assert pipe.connects == 1
        assert own_redis._proc is not None
        pid = own_redis._proc.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            sent_at = loop.time()
            with pytest.raises(redis_errors.TimeoutError):
                await pipe.call("PING")
            waited = loop.time() - sent_at
        finally:
            os.kill(pid, signal.SIGCONT)
        assert waited >= 0.2 - 0.005  # its own deadline, not one set before it
        assert await pipe.call("PING") == b"PONG"  # a new connection
        assert pipe.connects == 2
    finally:
        await pipe.aclose()
