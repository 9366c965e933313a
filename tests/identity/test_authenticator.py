"""The Authenticator against an in-memory KeyLookup: caching, single flight, the epoch, the
trust window, and last-used bookkeeping. (The same against real databases: tests/stores.)"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from mindrouter.errors import Unauthenticated
from mindrouter.identity.authenticate import Authenticator, AuthTuning
from mindrouter.stores.records import LimitOverrides

from .fakes import FAST_HASHER, CountingHasher, FakeKeys


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def test_principal_fields() -> None:
    store = FakeKeys()
    key = store.add(user="bob", admin=True)
    p = await Authenticator(store, hasher=FAST_HASHER).authenticate(bearer(key))
    assert (p.user_name, p.group_name, p.is_admin, p.key_prefix) == ("bob", "staff", True, key[:12])
    assert (p.scheduler_weight, p.token_budget, p.rpm, p.max_concurrent, p.budget_period_days) == (
        2.0,
        1000,
        10,
        4,
        30,
    )


async def test_concurrent_first_requests_share_one_lookup_and_one_argon2() -> None:
    store, hasher = FakeKeys(), CountingHasher()
    key = store.add()
    store.lookup_gate = asyncio.Event()
    auth = Authenticator(store, hasher=hasher)
    calls = [asyncio.create_task(auth.authenticate(bearer(key))) for _ in range(10)]
    await asyncio.sleep(0.01)
    store.lookup_gate.set()
    principals = await asyncio.gather(*calls)
    assert len({p.key_id for p in principals}) == 1
    assert (store.lookups, hasher.verifications) == (1, 1)


async def test_the_first_caller_going_away_does_not_fail_the_others() -> None:
    store = FakeKeys()
    key = store.add()
    store.lookup_gate = asyncio.Event()
    auth = Authenticator(store, hasher=FAST_HASHER)
    first = asyncio.create_task(auth.authenticate(bearer(key)))
    second = asyncio.create_task(auth.authenticate(bearer(key)))
    await asyncio.sleep(0.01)
    first.cancel()
    store.lookup_gate.set()
    assert (await second).user_name == "alice"


async def test_an_epoch_change_rereads_the_key_without_argon2() -> None:
    store, hasher = FakeKeys(), CountingHasher()
    key = store.add()
    auth = Authenticator(store, hasher=hasher)
    await auth.poll()
    await auth.authenticate(bearer(key))
    await auth.authenticate(bearer(key))
    assert store.lookups == 1

    store.change(key, overrides=LimitOverrides(rpm=99))
    await auth.poll()
    assert (await auth.authenticate(bearer(key))).rpm == 99
    assert (store.lookups, hasher.verifications) == (2, 1)

    store.change(key, revoked_at=datetime.now(UTC))
    await auth.poll()
    with pytest.raises(Unauthenticated, match="revoked"):
        await auth.authenticate(bearer(key))


async def test_without_a_recent_poll_the_cache_is_not_trusted() -> None:
    store, mono = FakeKeys(), Clock()
    key = store.add()
    auth = Authenticator(store, hasher=FAST_HASHER, monotonic=mono)
    await auth.poll()
    await auth.authenticate(bearer(key))
    mono.now += 0.9
    await auth.authenticate(bearer(key))
    assert store.lookups == 1
    mono.now += 0.2  # more than a second since the last poll began: ask the database
    await auth.authenticate(bearer(key))
    assert store.lookups == 2

    store.failing = True  # ...and when it cannot answer, fail closed
    with pytest.raises(ConnectionError):
        await auth.authenticate(bearer(key))


async def test_expiry_on_a_cached_key_uses_the_clock() -> None:
    store, wall = FakeKeys(), Clock()
    key = store.add(expires_at=datetime.fromtimestamp(wall.now + 5, UTC))
    auth = Authenticator(store, hasher=FAST_HASHER, clock=wall)
    await auth.poll()
    await auth.authenticate(bearer(key))
    wall.now += 5
    with pytest.raises(Unauthenticated, match="expired"):
        await auth.authenticate(bearer(key))


async def test_the_poller_clears_the_cache_and_records_use() -> None:
    store = FakeKeys()
    key = store.add()
    auth = Authenticator(
        store, hasher=FAST_HASHER, tuning=AuthTuning(poll_interval=0.01, max_staleness=0.5)
    )
    await auth.start()
    try:
        await auth.authenticate(bearer(key))
        store.change(key, user_active=False)
        async with asyncio.timeout(1):
            while True:
                try:
                    await auth.authenticate(bearer(key))
                except Unauthenticated as exc:
                    assert "inactive" in exc.message
                    break
                await asyncio.sleep(0.005)
        assert store.polls > 1
    finally:
        await auth.stop()
    assert set(store.used) == {1}
    assert store.used[1] > datetime.now(UTC) - timedelta(seconds=5)


async def test_a_failing_poll_keeps_the_poller_alive() -> None:
    store = FakeKeys()
    auth = Authenticator(
        store, hasher=FAST_HASHER, tuning=AuthTuning(poll_interval=0.01, max_staleness=0.5)
    )
    store.failing = True
    await auth.start()
    try:
        auth._asked = True  # requests come: the poller reads the epoch (it does not when idle)
        await asyncio.sleep(0.05)
        store.failing = False
        polls = store.polls
        auth._asked = True
        await asyncio.sleep(0.05)
        assert store.polls > polls
    finally:
        await auth.stop()


def test_the_poll_interval_must_be_inside_the_trust_window() -> None:
    with pytest.raises(ValueError):
        Authenticator(FakeKeys(), tuning=AuthTuning(poll_interval=1.0, max_staleness=1.0))


async def test_an_idle_poller_reads_nothing_and_the_next_request_catches_up() -> None:
    store = FakeKeys()
    auth = Authenticator(
        store, hasher=FAST_HASHER, tuning=AuthTuning(poll_interval=0.01, max_staleness=0.02)
    )
    await auth.start()
    try:
        polls = store.polls
        await asyncio.sleep(0.1)  # ten poll intervals without a request
        assert store.polls == polls
        # Past the trust window, a request reads the epoch itself before trusting the cache.
        with pytest.raises(Unauthenticated):
            await auth.authenticate({"authorization": "Bearer mr2_AAAAAAAA_nope"})
        assert store.polls >= polls + 1  # its own read (the poller may add one meanwhile)
    finally:
        await auth.stop()
