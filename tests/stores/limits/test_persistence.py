"""What reaches the database (dirty) and what comes back from it at start (seed)."""

from __future__ import annotations

from mindrouter.stores.limits import Limits, LimitStore, MemoryLimitStore, UsageSnapshot

from .conftest import RedisServer, StoreFactory

T0 = 1_700_000_000.0
LIMITS = Limits(token_budget=10_000, budget_period_days=1)


async def use(store: LimitStore, user: str, tokens: int, now: float) -> None:
    await store.settle(await store.admit(user, LIMITS, tokens, now), tokens, now)


def persisted(snap: UsageSnapshot) -> tuple[str, float, int, int]:
    return snap.user, snap.period_start, snap.period_tokens, snap.lifetime_tokens


async def test_dirty_reports_each_change_once(store: LimitStore) -> None:
    assert await store.dirty() == []
    await use(store, "alice", 100, T0)
    await use(store, "bob", 5, T0 + 1)
    await use(store, "alice", 20, T0 + 2)
    ticket = await store.admit("alice", LIMITS, 7, T0 + 3)  # in flight when the sync runs

    snaps = sorted(await store.dirty(), key=lambda s: s.user)
    assert [persisted(s) for s in snaps] == [("alice", T0, 120, 120), ("bob", T0 + 1, 5, 5)]
    assert (snaps[0].in_flight, snaps[0].reserved_tokens, snaps[0].as_of) == (1, 7, T0 + 3)
    assert await store.dirty() == []

    await store.settle(ticket, 7, T0 + 4)
    assert [persisted(s) for s in await store.dirty()] == [("alice", T0, 127, 127)]


async def test_a_rollover_is_persisted_with_the_next_change(store: LimitStore) -> None:
    await use(store, "alice", 100, T0)
    await store.dirty()
    await use(store, "alice", 1, T0 + 1.5 * 86_400)
    assert [persisted(s) for s in await store.dirty()] == [("alice", T0 + 86_400, 1, 101)]


async def test_usage_survives_a_restart(new_store: StoreFactory, kind: str) -> None:
    before = new_store()
    await use(before, "alice", 300, T0)
    synced = {s.user: s for s in await before.dirty()}
    await before.close()

    after = new_store()  # Redis: same prefix, state is still there; memory: only the database
    for snap in synced.values():  # what the gateway does at start, from the database rows
        await after.seed(snap.user, snap.period_start, snap.period_tokens, snap.lifetime_tokens)
    snap = await after.snapshot("alice", LIMITS, T0 + 10)
    assert (snap.period_start, snap.period_tokens, snap.lifetime_tokens) == (T0, 300, 300)
    await use(after, "alice", 50, T0 + 20)
    assert [persisted(s) for s in await after.dirty()] == [("alice", T0, 350, 350)]


async def test_seed_never_replaces_newer_usage(store: LimitStore) -> None:
    await use(store, "alice", 300, T0)
    await store.seed("alice", T0 - 5, 200, 200)  # a database row from before the last sync
    snap = await store.snapshot("alice", LIMITS, T0 + 1)
    assert (snap.period_start, snap.period_tokens, snap.lifetime_tokens) == (T0, 300, 300)

    # A larger lifetime means the store lost data (a Redis restored from an old dump).
    await store.seed("alice", T0 - 5, 900, 4000)
    snap = await store.snapshot("alice", LIMITS, T0 + 1)
    assert (snap.period_start, snap.period_tokens, snap.lifetime_tokens) == (T0 - 5, 900, 4000)

    await store.seed("carol", T0 - 100, 10, 99)  # never seen: taken as it is, and not dirty
    snap = await store.snapshot("carol", LIMITS, T0)
    assert (snap.period_start, snap.period_tokens, snap.lifetime_tokens) == (T0 - 100, 10, 99)
    assert [s.user for s in await store.dirty()] == ["alice"]


async def test_seeded_period_rolls_over(store: LimitStore) -> None:
    await store.seed("alice", T0 - 86_400 - 60, 9_999, 50_000)
    ticket = await store.admit("alice", LIMITS, 9_000, T0)  # the seeded period ended a minute ago
    assert ticket.period_start == T0 - 60
    await store.settle(ticket, 10, T0)
    snap = await store.snapshot("alice", LIMITS, T0)
    assert (snap.period_tokens, snap.lifetime_tokens) == (10, 50_010)


async def test_redis_keys_stay_under_the_prefix_and_expire(redis_server: RedisServer) -> None:
    store = redis_server.store(lease_seconds=30)
    await use(store, "alice", 1, T0)
    client = redis_server.clients[0]
    keys = sorted(k.decode() for k in await redis_server.keys())
    p = redis_server.prefix + "limits:"
    assert keys == [p + "dirty", p + "usage:alice", p + "window:alice"]
    assert await client.ttl(p + "usage:alice") == -1  # lifetime usage never expires
    assert 0 < await client.ttl(p + "window:alice") <= 120

    await store.admit("alice", LIMITS, 1, T0)
    for kind in ("leases", "lease_tokens"):
        assert 0 < await client.ttl(f"{p}{kind}:alice") <= 90


async def test_memory_store_is_independent_per_instance() -> None:
    first, second = MemoryLimitStore(), MemoryLimitStore()
    await use(first, "alice", 10, T0)
    assert (await second.snapshot("alice", LIMITS, T0)).lifetime_tokens == 0
