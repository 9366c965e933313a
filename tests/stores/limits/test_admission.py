"""Requests per minute and requests in flight, on both stores, under real concurrency."""

from __future__ import annotations

import asyncio

import pytest

from mindrouter.errors import RateLimited
from mindrouter.stores.limits import Limits, LimitStore, Ticket

from .conftest import RedisServer, StoreFactory

T0 = 1_700_000_000.0
LIMITS = Limits(max_concurrent=4, rpm=60)


def admitted(results: list[Ticket | BaseException]) -> list[Ticket]:
    unexpected = [r for r in results if not isinstance(r, Ticket | RateLimited)]
    assert not unexpected, unexpected
    return [r for r in results if isinstance(r, Ticket)]


async def burst(stores: list[LimitStore], n: int, limits: Limits, now: float) -> list[Ticket]:
    results = await asyncio.gather(
        *(stores[i % len(stores)].admit("alice", limits, 10, now) for i in range(n)),
        return_exceptions=True,
    )
    return admitted(results)


async def test_concurrent_admits_take_exactly_the_free_slots(store: LimitStore) -> None:
    tickets = await burst([store], 200, LIMITS, T0)
    assert len(tickets) == 4
    snap = await store.snapshot("alice", LIMITS, T0)
    assert (snap.in_flight, snap.reserved_tokens, snap.requests_last_minute) == (4, 40, 4)

    with pytest.raises(RateLimited) as refused:
        await store.admit("alice", LIMITS, 10, T0)
    assert refused.value.limit == "concurrency"
    assert refused.value.retry_after == pytest.approx(1.0)

    for ticket in tickets:
        await store.settle(ticket, 5, T0 + 1)
    # The 196 refusals used no part of the 60 per minute: 56 more fit, and only then it is full.
    for _ in range(56):
        await store.settle(await store.admit("alice", LIMITS, 10, T0 + 2), 5, T0 + 2)
    with pytest.raises(RateLimited) as refused:
        await store.admit("alice", LIMITS, 10, T0 + 2)
    assert refused.value.limit == "rpm"
    snap = await store.snapshot("alice", LIMITS, T0 + 2)
    assert (snap.in_flight, snap.reserved_tokens, snap.requests_last_minute) == (0, 0, 60)
    assert snap.period_tokens == snap.lifetime_tokens == 60 * 5


async def test_two_processes_share_the_slots_exactly(redis_server: RedisServer) -> None:
    first, second = redis_server.store(), redis_server.store()
    tickets = await burst([first, second], 200, LIMITS, T0)
    assert len(tickets) == 4
    await first.settle(tickets[0], 1, T0 + 1)
    assert len(await burst([second, first], 50, LIMITS, T0 + 1)) == 1


async def test_rpm_is_a_sliding_window(store: LimitStore) -> None:
    limits = Limits(rpm=60)
    for i in range(60):  # one every half second, from T0 to T0 + 29.5
        await store.settle(await store.admit("alice", limits, 0, T0 + i / 2), 0, T0 + i / 2)

    with pytest.raises(RateLimited) as refused:
        await store.admit("alice", limits, 0, T0 + 30)
    assert refused.value.limit == "rpm"
    assert refused.value.retry_after == pytest.approx(30.0)  # the oldest leaves at T0 + 60
    with pytest.raises(RateLimited) as refused:
        await store.admit("alice", limits, 0, T0 + 59.75)
    assert refused.value.retry_after == pytest.approx(0.25)

    await store.admit("alice", limits, 0, T0 + 60)  # the oldest has just left
    with pytest.raises(RateLimited) as refused:
        await store.admit("alice", limits, 0, T0 + 60.25)
    assert refused.value.retry_after == pytest.approx(0.25)  # the next leaves at T0 + 60.5

    # A minute after the last of them, the whole minute is free again.
    tickets = [await store.admit("alice", limits, 0, T0 + 120) for _ in range(60)]
    assert len(tickets) == 60
    with pytest.raises(RateLimited):
        await store.admit("alice", limits, 0, T0 + 120)


async def test_users_do_not_share_limits(store: LimitStore) -> None:
    limits = Limits(max_concurrent=1, rpm=1)
    await store.admit("alice", limits, 0, T0)
    await store.admit("bob", limits, 0, T0)
    await store.admit("alice:window", limits, 0, T0)  # a name that looks like a key suffix
    with pytest.raises(RateLimited):
        await store.admit("alice", limits, 0, T0)


async def test_refusal_reports_the_longest_wait(store: LimitStore) -> None:
    limits = Limits(max_concurrent=1, rpm=1)
    await store.admit("alice", limits, 0, T0)
    with pytest.raises(RateLimited) as refused:  # both full: the minute is the longer wait
        await store.admit("alice", limits, 0, T0 + 10)
    assert refused.value.limit == "rpm"
    assert refused.value.retry_after == pytest.approx(50.0)


async def test_expired_leases_free_their_slots(new_store: StoreFactory) -> None:
    store = new_store(lease_seconds=300)
    limits = Limits(max_concurrent=2, token_budget=100)
    lost = await store.admit("alice", limits, 40, T0)  # its process "crashes": never settled
    await store.admit("alice", limits, 40, T0 + 100)
    with pytest.raises(RateLimited) as refused:
        await store.admit("alice", limits, 0, T0 + 299)
    assert refused.value.limit == "concurrency"

    live = await store.admit("alice", limits, 50, T0 + 300)  # `lost` expired: slot and tokens back
    snap = await store.snapshot("alice", limits, T0 + 300)
    assert (snap.in_flight, snap.reserved_tokens) == (2, 90)

    # Settling an expired ticket late charges its usage but releases nothing a second time.
    await store.settle(lost, 7, T0 + 301)
    await store.settle(live, 3, T0 + 302)
    snap = await store.snapshot("alice", limits, T0 + 302)
    assert (snap.in_flight, snap.reserved_tokens, snap.period_tokens) == (1, 40, 10)


async def test_invalid_arguments_are_rejected(store: LimitStore) -> None:
    with pytest.raises(ValueError):
        Limits(rpm=-1)
    with pytest.raises(ValueError):
        Limits(budget_period_days=0)
    with pytest.raises(ValueError):
        await store.admit("alice", Limits(), -1, T0)


async def test_renewed_leases_stay_held_and_unrenewed_ones_lapse(new_store: StoreFactory) -> None:
    """A live process renews its leases; a killed one stops, and its slots come back one lease
    length after its last renewal, however long its requests would have run."""
    store = new_store(lease_seconds=20)
    limits = Limits(max_concurrent=2, token_budget=1000)
    live = await store.admit("alice", limits, 100, T0)
    dead = await store.admit("alice", limits, 200, T0)
    for step in range(1, 6):  # only `live` is renewed, every 5 s, for 25 s
        await store.renew([live], T0 + 5 * step)
    with pytest.raises(RateLimited) as refused:  # before its lease ran out, `dead` held its slot
        await store.admit("alice", limits, 0, T0 + 19)
    assert refused.value.limit == "concurrency"
    snap = await store.snapshot("alice", limits, T0 + 26)
    assert (snap.in_flight, snap.reserved_tokens) == (1, 100)  # `dead` lapsed at T0 + 20
    second = await store.admit("alice", limits, 0, T0 + 26)
    with pytest.raises(RateLimited):  # `live` still holds its slot, 26 s after admission
        await store.admit("alice", limits, 0, T0 + 27)
    # A lease that lapsed is not brought back by a renewal.
    await store.renew([dead, live, second], T0 + 28)
    snap = await store.snapshot("alice", limits, T0 + 28)
    assert (snap.in_flight, snap.reserved_tokens) == (2, 100)
