"""Token budgets: reservations, reconciliation, and the period rolling over."""

from __future__ import annotations

import asyncio

import pytest

from mindrouter.errors import RateLimited
from mindrouter.stores.limits import Limits, LimitStore, Ticket

T0 = 1_700_000_000.0
DAY = 86_400.0


async def use(store: LimitStore, limits: Limits, tokens: int, now: float) -> None:
    await store.settle(await store.admit("alice", limits, tokens, now), tokens, now)


async def test_concurrent_admits_cannot_overshoot_more_than_is_in_flight(
    store: LimitStore,
) -> None:
    """Budget 1000 with 900 used leaves R = 100; 50 concurrent admits estimate e = 20 each.

    Admission bound: admitted * e <= R, because every admit counts the others' reservations
    (so exactly 5 here: check-then-reserve is atomic). Reconciling each to its real usage u = 30
    overshoots the budget by at most the in-flight underestimate: used - 1000 <= admitted * (u - e).
    """
    limits = Limits(token_budget=1000)
    await use(store, limits, 900, T0)
    remaining, estimate, actual = 100, 20, 30

    results = await asyncio.gather(
        *(store.admit("alice", limits, estimate, T0 + 1) for _ in range(50)),
        return_exceptions=True,
    )
    tickets = [r for r in results if isinstance(r, Ticket)]
    refusals = [r for r in results if isinstance(r, RateLimited)]
    assert len(tickets) + len(refusals) == 50
    assert len(tickets) * estimate <= remaining
    assert len(tickets) == remaining // estimate
    # Refused only because of what is in flight: worth retrying in a second, not next month.
    assert {(r.limit, r.retry_after) for r in refusals} == {("tokens", 1.0)}

    for ticket in tickets:
        await store.settle(ticket, actual, T0 + 2)
    snap = await store.snapshot("alice", limits, T0 + 2)
    overshoot = snap.period_tokens - limits.token_budget
    assert snap.period_tokens == 900 + len(tickets) * actual
    assert 0 < overshoot <= len(tickets) * (actual - estimate)
    assert snap.reserved_tokens == 0

    with pytest.raises(RateLimited) as refused:
        await store.admit("alice", limits, 1, T0 + 3)
    assert refused.value.limit == "tokens"
    assert refused.value.retry_after == pytest.approx(30 * DAY - 3)  # until the period resets


async def test_estimate_larger_than_the_budget_is_refused_with_a_reason(store: LimitStore) -> None:
    with pytest.raises(RateLimited) as refused:
        await store.admit("alice", Limits(token_budget=100), 101, T0)
    assert refused.value.limit == "tokens"
    assert "whole budget" in refused.value.message


async def test_period_rolls_over_and_lifetime_does_not(store: LimitStore) -> None:
    limits = Limits(token_budget=500, budget_period_days=1)
    await use(store, limits, 500, T0)
    with pytest.raises(RateLimited):
        await store.admit("alice", limits, 1, T0 + DAY - 1)

    snap = await store.snapshot("alice", limits, T0 + DAY + 10)
    assert (snap.period_start, snap.period_tokens, snap.lifetime_tokens) == (T0 + DAY, 0, 500)
    await use(store, limits, 200, T0 + DAY + 10)

    # Idle for two and a half periods: the start moves by whole periods, keeping its phase.
    snap = await store.snapshot("alice", limits, T0 + 3.5 * DAY)
    assert (snap.period_start, snap.period_tokens, snap.lifetime_tokens) == (T0 + 3 * DAY, 0, 700)


async def test_usage_settled_after_a_rollover_is_charged_to_the_new_period(
    store: LimitStore,
) -> None:
    limits = Limits(token_budget=1000, budget_period_days=1)
    await use(store, limits, 300, T0)
    ticket = await store.admit("alice", limits, 100, T0 + DAY - 1)
    assert ticket.period_start == T0
    await store.settle(ticket, 120, T0 + DAY + 1)
    snap = await store.snapshot("alice", limits, T0 + DAY + 1)
    assert (snap.period_start, snap.period_tokens, snap.lifetime_tokens) == (T0 + DAY, 120, 420)
    assert (snap.reserved_tokens, snap.in_flight) == (0, 0)


async def test_unlimited_budget_still_counts(store: LimitStore) -> None:
    limits = Limits()
    for _ in range(3):
        await use(store, limits, 1_000_000, T0)
    snap = await store.snapshot("alice", limits, T0)
    assert (snap.period_tokens, snap.lifetime_tokens, snap.period_start) == (3e6, 3e6, T0)
