"""FairQueue bookkeeping: charges, lifts, ordering, views and the admin snapshot."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mindrouter.scheduling import (
    FairPolicy,
    FairQueue,
    InMemoryFairShareState,
    Standing,
    TokenCosts,
    take_snapshot,
)

from .sim import job


def make_queue(**kw: Any) -> FairQueue:
    return FairQueue(InMemoryFairShareState(), FairPolicy(**kw))


def test_prompt_is_charged_at_dispatch_and_output_as_it_streams() -> None:
    q = make_queue()
    j = job("u", 0.0, weight=2.0, prompt=100, output=300)
    q.push(j)
    assert q.state.get("m", "u") == 0.0
    q.on_dispatch(j, 1.0)
    assert q.state.get("m", "u") == pytest.approx(100 / 2.0)
    q.charge(j, 10)
    q.charge(j, 10)
    assert q.state.get("m", "u") == pytest.approx((100 + 2 * 20) / 2.0)
    # Completion corrects both: the prompt was really 120, and 5 more tokens were never reported.
    q.on_complete(j, actual_prompt=120, actual_output=25)
    assert q.state.get("m", "u") == pytest.approx((120 + 2 * 25) / 2.0)


def test_a_job_that_never_ran_is_refunded() -> None:
    q = make_queue()
    j = job("u", 0.0, prompt=100)
    q.push(j)
    q.on_dispatch(j, 0.0)
    q.on_complete(j, 0, 0)
    assert q.state.get("m", "u") == 0.0


def test_output_still_expected_counts_in_the_rank_until_it_streams() -> None:
    q = make_queue(wait_bonus_per_s=0.0)
    running = job("u", 0.0, prompt=0, output=100)
    q.push(running)
    q.on_dispatch(running, 0.0)
    waiting = job("u", 0.0, prompt=0)
    q.push(waiting)
    assert q.priority(waiting, 1.0) == pytest.approx(200.0)  # nothing streamed yet
    q.charge(running, 40)
    assert q.priority(waiting, 1.0) == pytest.approx(200.0)  # 80 charged, 120 still expected
    q.on_complete(running, 0, 40)  # stopped early: nothing is expected any more
    assert q.priority(waiting, 1.0) == pytest.approx(80.0)


def test_a_newcomer_is_lifted_to_the_floor_minus_the_burst_allowance() -> None:
    q = make_queue(burst_allowance=50.0)
    q.state.charge("m", "busy", 1000.0)
    q.push(job("busy", 0.0))
    q.push(job("new", 0.0))
    assert q.state.get("m", "new") == 950.0
    assert q.state.floor("m") == 1000.0


def test_a_lift_never_lowers_a_counter() -> None:
    q = make_queue(burst_allowance=50.0)
    q.state.charge("m", "busy", 1000.0)
    q.state.charge("m", "heavy", 5000.0)
    q.push(job("busy", 0.0))
    q.push(job("heavy", 0.0))
    assert q.state.get("m", "heavy") == 5000.0


def test_the_floor_keeps_the_last_users_counter_when_everyone_leaves() -> None:
    q = make_queue(burst_allowance=0.0)
    j = job("alone", 0.0, prompt=500, output=0)
    q.push(j)
    q.on_dispatch(j, 0.0)
    q.on_complete(j, 500, 0)
    assert q.state.floor("m") == 500.0
    q.push(job("later", 600.0))
    assert q.state.get("m", "later") == 500.0


def test_counters_are_per_model() -> None:
    q = make_queue(burst_allowance=0.0)
    q.state.charge("a", "u", 1e6)
    q.push(job("u", 0.0, model="b"))
    q.push(job("v", 0.0, model="b"))
    assert q.pick("b", 0.0) is not None
    assert q.state.get("b", "u") == 0.0


def test_within_one_user_jobs_leave_in_arrival_order() -> None:
    q = make_queue()
    jobs = [job("u", float(t)) for t in range(5)]
    for j in reversed(jobs):  # pushed out of order: arrival order is the push order
        q.push(j)
    served = []
    while (nxt := q.pick("m", 10.0)) is not None:
        q.on_dispatch(nxt, 10.0)
        served.append(nxt)
    assert served == list(reversed(jobs))


def test_pick_can_be_limited_to_the_jobs_that_fit() -> None:
    q = make_queue()
    q.state.charge("m", "rich", 1000.0)
    needs = frozenset({"structured_output"})
    poor_first = dataclasses.replace(job("poor", 0.0), requires=needs)
    poor_second = job("poor", 1.0)
    rich = job("rich", 0.0)
    for j in (poor_first, poor_second, rich):
        q.push(j)
    assert q.pick("m", 2.0) is poor_first
    # Only plain jobs fit: the least-served user's first plain job stands for it.
    assert q.pick("m", 2.0, lambda j: not j.requires) is poor_second
    assert q.pick("m", 2.0, lambda j: j.user == "rich") is rich
    assert q.pick("m", 2.0, lambda j: False) is None


def test_pushing_a_job_twice_is_refused() -> None:
    q = make_queue()
    j = job("u", 0.0)
    q.push(j)
    with pytest.raises(ValueError, match="already"):
        q.push(j)


def test_removing_a_waiting_job() -> None:
    q = make_queue()
    j = job("u", 0.0)
    q.push(j)
    assert q.remove(j.id) == j
    assert q.remove(j.id) is None
    assert len(q) == 0
    assert q.pick("m", 0.0) is None


def test_job_validation() -> None:
    with pytest.raises(ValueError, match="weight"):
        job("u", 0.0, weight=0.0)
    with pytest.raises(ValueError, match="negative"):
        job("u", 0.0, prompt=-1)
    with pytest.raises(ValueError, match="negative"):
        TokenCosts(prompt=-1.0)


def test_global_per_user_and_per_model_views() -> None:
    q = make_queue()
    a1, b1, a2 = job("a", 0.0, model="x"), job("b", 1.0, model="y"), job("a", 2.0, model="y")
    for j in (a1, b1, a2):
        q.push(j)
    assert q.queued() == [a1, b1, a2]
    assert q.by_user() == {"a": [a1, a2], "b": [b1]}
    assert q.by_model() == {"x": [a1], "y": [b1, a2]}
    assert q.waiting("y") == 2
    q.on_dispatch(a1, 3.0)
    assert q.running() == [a1]


def test_snapshot_for_the_admin_api() -> None:
    q = make_queue(wait_bonus_per_s=0.0)
    q.state.charge("m", "heavy", 900.0)
    heavy = [job("heavy", 0.0, weight=3.0) for _ in range(2)]
    light = job("light", 1.0)
    for j in (*heavy, light):
        q.push(j)
    q.on_dispatch(heavy[0], 2.0)
    snap = take_snapshot(q, 5.0)
    assert snap.waiting == 2 and snap.running == 1
    assert [w.id for w in snap.models["m"]] == [light.id, heavy[1].id]  # serving order
    assert snap.models["m"][0].waited_s == 4.0
    accounts = {a.user: a for a in snap.accounts}
    assert accounts["heavy"].in_flight == 1 and accounts["heavy"].queued == 1
    assert accounts["heavy"].entitled_share == pytest.approx(0.75)
    assert accounts["heavy"].running_share == 1.0
    assert accounts["light"].entitled_share == pytest.approx(0.25)
    assert snap.floors == {"m": 900.0}


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from("abcdef"),
            st.floats(0, 100),
            st.floats(0, 5000),
            st.sampled_from([0.5, 1.0, 3.0]),
        ),
        min_size=1,
        max_size=25,
    ),
    st.floats(0, 400),
)
def test_pick_is_the_first_job_in_rank_order(
    spec: list[tuple[str, float, float, float]], now: float
) -> None:
    q = make_queue()
    for user, at, usage, weight in sorted(spec, key=lambda s: s[1]):  # pushed as they arrive
        q.state.charge("m", user, usage)
        q.push(job(user, at, weight=weight))
    if (first := q.pick("m", 150.0)) is not None:
        q.on_dispatch(first, 150.0)
    ranked = q.ranked("m", 150.0 + now)
    assert q.pick("m", 150.0 + now) is (ranked[0][1] if ranked else None)


def test_a_job_passed_over_long_enough_goes_first() -> None:
    q = make_queue(wait_bonus_per_s=1.0, max_wait_bonus=10.0)
    q.state.charge("m", "heavy", 1e6)
    old = job("heavy", 0.0)
    q.push(old)
    q.push(job("light", 5.0))
    assert q.pick("m", 9.9).user == "light"  # type: ignore[union-attr]
    assert q.pick("m", 10.0) is old
    assert q.rank_of(old, 10.0).tier == 0


def test_best_waiting_names_each_models_most_deserving_waiter_and_where_it_stands() -> None:
    q = make_queue(wait_bonus_per_s=1.0, max_wait_bonus=10.0)
    q.state.charge("m", "heavy", 500.0)
    q.state.charge("m", "light", 50.0)
    for j in (job("heavy", 0.0), job("light", 2.0), job("other", 0.0, model="n")):
        q.push(j)
    best = q.best_waiting(4.0)
    assert set(best) == {"m", "n"}
    assert best["m"] == Standing(1, 50.0 - 2.0, "light")  # counter minus 2 s of wait bonus
    assert best["n"].user == "other"
    starving = q.best_waiting(20.0)["m"]  # 20 s passed over: past the bound, oldest first
    assert starving.tier == 0 and starving.user == "heavy"
    assert starving.outranks(best["m"]) and not best["m"].outranks(best["m"])
