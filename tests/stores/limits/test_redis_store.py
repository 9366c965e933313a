"""The Redis store against its reference: the same random histories give the same answers.

Plus what only Redis has: the script cache, connection pools, and a store built from a URL.
"""

from __future__ import annotations

import asyncio
import random
import time

import pytest
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from mindrouter.errors import RateLimited
from mindrouter.stores.limits import (
    Activity,
    Limits,
    LimitStore,
    MemoryLimitStore,
    RedisLimitStore,
    Ticket,
    UsageNotLoaded,
)
from mindrouter.stores.limits.lua import ADMIT
from mindrouter.stores.redis_pipe import Script

from .conftest import REDIS_URL, RedisServer

T0 = 1_700_000_000.0
USERS = ("alice", "bob")


async def admit(store: LimitStore, user: str, limits: Limits, estimate: int, now: float) -> object:
    try:
        return await store.admit(user, limits, estimate, now)
    except RateLimited as refused:
        return (refused.limit, refused.message, refused.retry_after)


@pytest.mark.parametrize("seed", range(12))
async def test_redis_matches_the_memory_store(seed: int, redis_server: RedisServer) -> None:
    rng = random.Random(seed)
    memory = MemoryLimitStore(lease_seconds=40)
    shared = redis_server.store(lease_seconds=40)
    limits = {
        user: Limits(
            token_budget=rng.choice([0, 300, 1000]),
            rpm=rng.choice([0, 3, 10]),
            max_concurrent=rng.choice([0, 1, 3]),
            budget_period_days=1,
        )
        for user in USERS
    }
    now, held = T0, list[tuple[Ticket, Ticket]]()
    for step in range(150):
        now += rng.choice([0.0, 0.0, 0.5, 3.0, 20.0, 30_000.0])  # leases last 40 s, periods 1 day
        user = rng.choice(USERS)
        if rng.random() < 0.55:
            estimate = rng.randint(0, 150)
            expected = await admit(memory, user, limits[user], estimate, now)
            got = await admit(shared, user, limits[user], estimate, now)
            if isinstance(expected, Ticket):
                assert isinstance(got, Ticket), (step, got)
                assert got.period_start == expected.period_start
                held.append((expected, got))
            else:
                assert got == expected, step
        elif held:
            expected_ticket, ticket = held.pop(rng.randrange(len(held)))
            used = rng.randint(0, 200)
            await memory.settle(expected_ticket, used, now)
            await shared.settle(ticket, used, now)
        for name in USERS:
            expected_snap = await memory.snapshot(name, limits[name], now)
            assert await shared.snapshot(name, limits[name], now) == expected_snap, step
        if step % 30 == 0:
            assert await shared.dirty() == await memory.dirty(), step
    assert await shared.dirty() == await memory.dirty()


def _admit_call(prefix: str) -> tuple[list[str], list[str | int]]:
    """The keys and arguments of one admission of user `u` (5 tokens, no limits)."""
    p = f"{prefix}limits:"
    keys = [f"{p}usage:u", f"{p}window:u", f"{p}leases:u", f"{p}lease_tokens:u", f"{p}dirty"]
    args: list[str | int] = [repr(T0), 0, 0, 0, "86400.0", 5, "lease", repr(T0 + 9), "u"]
    args += ["60.0", "1.0", 120_000, 120_000]
    return keys, args


async def test_a_lost_script_cache_is_refilled(redis_server: RedisServer) -> None:
    # A variant of the admit script no server has seen: the first EVALSHA answers NOSCRIPT.
    script = Script(ADMIT + f"\n-- {redis_server.prefix}")
    client = redis_server.clients[0]
    assert await client.script_exists(script.sha) == [False]
    keys, args = _admit_call(redis_server.prefix)
    await client.hset(keys[0], "seeded", "1")  # the user's usage is loaded
    reply = await script.run(client, keys, args)
    assert int(reply[0]) == 1
    assert await client.script_exists(script.sha) == [True]
    # (SCRIPT FLUSH would show the same, but the server may be shared with other users.)


async def test_admissions_and_settlements_share_one_pipelined_connection(
    redis_server: RedisServer,
) -> None:
    client = Redis.from_url(REDIS_URL, max_connections=2, retry=Retry(NoBackoff(), 0))
    store = RedisLimitStore(client, redis_server.prefix, owns_client=True)
    await store.seed("alice", None, 0, 0)
    limits = Limits(max_concurrent=1, token_budget=1000)
    for step in range(30):
        # Sent, not waited for: the next admission, sent after it on the same connection,
        # finds the one slot free and the tokens charged.
        ticket = await store.admit("alice", limits, 10, T0 + step)
        done = store.settle_soon(ticket, 7, T0 + step)
    snap = await store.snapshot("alice", limits, T0 + 30)  # read after the settlements
    assert done.done()
    assert (snap.period_tokens, snap.in_flight, snap.reserved_tokens) == (210, 0, 0)
    # A burst far over the pool's size: no pooled connection is taken, all are admitted, and
    # their leases renewed at once.
    tickets = await asyncio.gather(*(store.admit("alice", Limits(), 1, T0) for _ in range(50)))
    assert len({t.lease_id for t in tickets}) == 50
    await asyncio.gather(*(store.renew([t], T0 + 1) for t in tickets))
    assert store._pipe.connects == 1
    await store.close()


async def test_a_script_missing_under_an_open_connection_is_sent_whole(
    redis_server: RedisServer,
) -> None:
    store = redis_server.store()
    await store.seed("u", None, 0, 0)
    await store.admit("u", Limits(), 1, T0)  # the pipelined connection is open
    script = Script(ADMIT + f"\n-- {redis_server.prefix} pipelined")
    client = redis_server.clients[0]
    assert await client.script_exists(script.sha) == [False]
    keys, args = _admit_call(redis_server.prefix)
    reply = await script.call(store._pipe, keys, args)
    assert int(reply[0]) == 1
    assert await client.script_exists(script.sha) == [True]


async def test_a_store_from_a_url_owns_its_client(redis_server: RedisServer) -> None:
    store = RedisLimitStore.from_url(REDIS_URL, redis_server.prefix, max_connections=4)
    await store.seed("alice", None, 0, 0)
    tickets = await asyncio.gather(*(store.admit("alice", Limits(), 1, T0) for _ in range(50)))
    assert len({t.lease_id for t in tickets}) == 50
    await store.close()


async def test_leases_lost_with_the_data_are_taken_back_at_the_next_renewal(
    redis_server: RedisServer,
) -> None:
    """Redis restarted empty while two requests ran: the reload restores two leases from the audit
    trail, and the renewals of the process serving the requests take them back for as long as
    the requests last, however long that is; so the user's third request waits throughout."""
    store = RedisLimitStore(redis_server.client(), redis_server.prefix, lease_seconds=20)
    limits = Limits(max_concurrent=2)
    await store.seed("ben", None, 0, 0, Activity(T0))
    first = await store.admit("ben", limits, 10, T0)
    second = await store.admit("ben", limits, 15, T0 + 1)

    await redis_server.clients[0].delete(*await redis_server.keys())  # the data is gone
    await store.seed("ben", None, 0, 0, Activity(T0 + 5, (T0, T0 + 1), in_flight=2))
    for t in range(10, 121, 5):  # far past one lease length after the reload
        await store.renew([first, second], T0 + t)
        with pytest.raises(RateLimited) as refused:
            await store.admit("ben", limits, 5, T0 + t + 1)
        assert refused.value.limit == "concurrency"
    snapshot = await store.snapshot("ben", limits, T0 + 121)
    assert (snapshot.in_flight, snapshot.reserved_tokens) == (2, 25)

    await store.settle(first, 12, T0 + 122)
    third = await store.admit("ben", limits, 5, T0 + 123)
    assert third.lease_id not in (first.lease_id, second.lease_id)


async def test_a_settled_lease_is_not_renewed_back(redis_server: RedisServer) -> None:
    store = RedisLimitStore(redis_server.client(), redis_server.prefix, lease_seconds=20)
    limits = Limits(max_concurrent=1)
    await store.seed("ana", None, 0, 0, Activity(T0))
    ticket = await store.admit("ana", limits, 10, T0)
    await store.settle(ticket, 10, T0 + 1)
    await store.renew([ticket], T0 + 2)  # a renewal that raced the settle
    assert (await store.snapshot("ana", limits, T0 + 3)).in_flight == 0


async def test_a_snapshot_of_usage_the_server_lost_asks_for_a_reload(
    redis_server: RedisServer,
) -> None:
    """No zeros for a user whose usage Redis lost: the snapshot raises UsageNotLoaded, as admission
    does, until the usage is loaded again; even when a request settled in the meantime (its
    charge alone is in the server, not the user's usage)."""
    store = RedisLimitStore(redis_server.client(), redis_server.prefix)
    limits = Limits(token_budget=1000)
    await store.seed("eve", T0, 300, 900, Activity(T0))
    ticket = await store.admit("eve", limits, 10, T0 + 1)
    snapshot = await store.snapshot("eve", limits, T0 + 2)
    assert (snapshot.period_tokens, snapshot.reserved_tokens, snapshot.in_flight) == (300, 10, 1)

    await redis_server.clients[0].delete(*await redis_server.keys())  # the data is gone
    with pytest.raises(UsageNotLoaded):
        await store.snapshot("eve", limits, T0 + 3)
    await store.settle(ticket, 8, T0 + 4)
    with pytest.raises(UsageNotLoaded):
        await store.snapshot("eve", limits, T0 + 5)

    await store.seed("eve", T0, 308, 908, Activity(T0 + 6))  # what the database holds
    snapshot = await store.snapshot("eve", limits, T0 + 7)
    assert (snapshot.period_tokens, snapshot.lifetime_tokens) == (308, 908)
    # What the database sync reads (as of each user's last change) is not asked for a reload.
    assert [s.user for s in await store.dirty()] == ["eve"]


async def test_an_admission_left_before_its_reply_gives_its_lease_back(
    redis_server: RedisServer,
) -> None:
    # A client that hangs up while its admission's reply is on the way: the script ran and took
    # a lease the gateway never heard of; without its release the user's one concurrent
    # request would be held until the lease lapsed.
    store = redis_server.store(lease_seconds=60)
    limits = Limits(token_budget=10**9, rpm=1000, max_concurrent=1, budget_period_days=30)
    await store.seed("u1", None, 0, 0)
    admission = asyncio.ensure_future(store.admit("u1", limits, 100, time.time()))
    await asyncio.sleep(0)  # the script is on its way to Redis
    admission.cancel()
    with pytest.raises(asyncio.CancelledError):
        await admission
    ticket = await store.admit("u1", limits, 100, time.time())
    snapshot = await store.snapshot("u1", limits, time.time())
    assert (snapshot.in_flight, snapshot.reserved_tokens) == (1, 100)
    await store.settle(ticket, 0, time.time())
