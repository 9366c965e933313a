"""Usage counters: charging, period rollover aligned to the first charge, a lifetime total that
never resets, and concurrent writers."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from mindrouter.errors import NotFound
from mindrouter.stores.records import GroupLimits, LimitOverrides
from mindrouter.stores.sql import SqlStores, open_stores
from mindrouter.stores.sql.usage import current_period_start

from .conftest import FAST_HASHER, unique

T0 = datetime(2030, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)


async def make_user(stores: SqlStores, period_days: int = 30, override: int | None = None) -> int:
    group = unique("g")
    await stores.directory.create_group(group, GroupLimits(budget_period_days=period_days))
    user = await stores.directory.create_user(
        unique("u"), group, overrides=LimitOverrides(budget_period_days=override)
    )
    return user.id


def test_periods_are_aligned_to_the_first_charge() -> None:
    assert current_period_start(T0, 7, T0 + timedelta(days=6)) == T0
    assert current_period_start(T0, 7, T0 + timedelta(days=7)) == T0 + timedelta(days=7)
    assert current_period_start(T0, 7, T0 + timedelta(days=23)) == T0 + timedelta(days=21)


async def test_charge_and_read(stores: SqlStores) -> None:
    uid = await make_user(stores)
    empty = await stores.usage.get_usage(uid, T0)
    assert (empty.period_start, empty.period_tokens, empty.lifetime_tokens) == (None, 0, 0)

    first = await stores.usage.add_usage(uid, 100, T0)
    assert (first.period_start, first.period_tokens, first.lifetime_tokens) == (T0, 100, 100)
    second = await stores.usage.add_usage(uid, 50, T0 + timedelta(hours=1))
    assert (second.period_tokens, second.lifetime_tokens) == (150, 150)
    assert await stores.usage.get_usage(uid, T0 + timedelta(hours=2)) == second


async def test_rollover_resets_the_period_and_keeps_the_lifetime(stores: SqlStores) -> None:
    uid = await make_user(stores, period_days=30, override=7)  # the user's period wins
    await stores.usage.add_usage(uid, 100, T0)
    later = T0 + timedelta(days=15)
    seen = await stores.usage.get_usage(uid, later)
    assert (seen.period_start, seen.period_tokens, seen.lifetime_tokens) == (
        T0 + timedelta(days=14),
        0,
        100,
    )
    charged = await stores.usage.add_usage(uid, 30, later)
    assert (charged.period_start, charged.period_tokens, charged.lifetime_tokens) == (
        T0 + timedelta(days=14),
        30,
        130,
    )


async def test_concurrent_writers_lose_nothing(stores: SqlStores, db_url: str) -> None:
    uid = await make_user(stores, period_days=1)
    other = open_stores(db_url, hasher=FAST_HASHER)
    try:
        # Two engines (two processes, as far as the database can tell), racing over the first
        # insert and over a rollover.
        writers = [stores.usage, other.usage] * 10
        await asyncio.gather(*(w.add_usage(uid, 1, T0) for w in writers))
        rollover = T0 + timedelta(days=1, seconds=1)
        await asyncio.gather(*(w.add_usage(uid, 2, rollover) for w in writers))
    finally:
        await other.aclose()
    final = await stores.usage.get_usage(uid, rollover)
    assert (final.period_tokens, final.lifetime_tokens) == (40, 60)


async def test_unknown_user(stores: SqlStores) -> None:
    with pytest.raises(NotFound):
        await stores.usage.add_usage(987654321, 1, T0)
