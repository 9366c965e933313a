"""The local mirror on its own: the folded operations and the reads, without Redis."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mindrouter.scheduling import InMemoryFairShareState
from mindrouter.stores.fairshare import LocalMirror, Pending
from mindrouter.stores.fairshare.mirror import Pulled

# Small integers and halves: every sum is exact, so results compare with ==.
amounts = st.integers(-50, 400).map(lambda n: n / 2)
ops = st.lists(st.tuples(st.sampled_from(["charge", "lift"]), amounts), max_size=30)


def replay(value: float, sequence: list[tuple[str, float]]) -> float:
    for kind, x in sequence:
        value = value + x if kind == "charge" else max(value, x)
    return value


def fold(sequence: list[tuple[str, float]]) -> Pending:
    op = Pending()
    for kind, x in sequence:
        if kind == "charge":
            op.charge(x)
        else:
            op.lift(x)
    return op


@given(start=amounts, sequence=ops)
def test_a_folded_operation_replays_the_sequence_it_folds(
    start: float, sequence: list[tuple[str, float]]
) -> None:
    assert fold(sequence).apply(start) == replay(start, sequence)


@given(start=amounts, first=ops, second=ops)
def test_folded_operations_compose_in_order(
    start: float, first: list[tuple[str, float]], second: list[tuple[str, float]]
) -> None:
    assert fold(first).then(fold(second)).apply(start) == replay(start, first + second)


def test_no_lift_means_no_lower_bound() -> None:
    op = Pending()
    op.charge(-10.0)
    assert op.at_least == -math.inf
    assert op.apply(3.0) == -7.0


calls = st.lists(
    st.tuples(
        st.sampled_from(["charge", "lift", "raise_floor", "get", "floor"]),
        st.sampled_from(["m1", "m2"]),
        st.sampled_from(["u1", "u2", "u3"]),
        amounts,
    ),
    max_size=60,
)


@settings(max_examples=200)
@given(calls=calls, sync_every=st.integers(1, 10))
def test_alone_it_answers_exactly_like_the_in_memory_state(
    calls: list[tuple[str, str, str, float]], sync_every: int
) -> None:
    """One process with a perfect store behind it reads what the in-memory state reads, however
    often it exchanges (the store here applies the pushed operations as Redis would)."""
    mirror = LocalMirror()
    reference = InMemoryFairShareState()
    store: dict[tuple[str, str], float] = {}
    floors: dict[str, float] = {}
    for i, (kind, model, user, x) in enumerate(calls):
        if kind == "charge":
            assert mirror.charge(model, user, x) == reference.charge(model, user, x)
        elif kind == "lift":
            assert mirror.lift(model, user, x) == reference.lift(model, user, x)
        elif kind == "raise_floor":
            assert mirror.raise_floor(model, x) == reference.raise_floor(model, x)
        elif kind == "get":
            assert mirror.get(model, user) == reference.get(model, user)
            assert mirror.get_many(model, ["u1", "u2"]) == reference.get_many(model, ["u1", "u2"])
        else:
            assert mirror.floor(model) == reference.floor(model)
        if i % sync_every == 0:
            batch = mirror.take_batch(float(i))
            for acct, op in batch.ops.items():
                store[acct] = op.apply(store.get(acct, 0.0))
            for m, to in batch.floors.items():
                floors[m] = max(floors.get(m, 0.0), to)
            mirror.merge(
                Pulled(
                    {a: store.get(a) for a in batch.pull},
                    {m: floors.get(m) for m in batch.pull_floors},
                )
            )


def test_writes_made_during_an_exchange_stay_on_top_of_the_pulled_values() -> None:
    mirror = LocalMirror()
    mirror.charge("m", "u", 10.0)
    batch = mirror.take_batch(0.0)
    assert batch.ops[("m", "u")].add == 10.0
    mirror.charge("m", "u", 5.0)  # while the exchange is on the wire
    # Meanwhile another process charged 100: the shared value now holds both processes' writes.
    mirror.merge(Pulled({("m", "u"): 110.0}, {"m": None}))
    assert mirror.get("m", "u") == 115.0
    assert mirror.take_batch(1.0).ops[("m", "u")].add == 5.0


def test_an_unknown_account_reads_zero_and_is_pulled_at_the_next_exchange() -> None:
    mirror = LocalMirror()
    assert mirror.get_many("m", ["new"]) == {"new": 0.0}
    batch = mirror.take_batch(0.0)
    assert batch.pull == [("m", "new")]
    assert batch.pull_floors == ["m"]
    mirror.merge(Pulled({("m", "new"): 42.0}, {"m": 7.0}))
    assert mirror.get("m", "new") == 42.0
    assert mirror.floor("m") == 7.0


def test_accounts_idle_here_are_forgotten_and_read_again_when_needed() -> None:
    mirror = LocalMirror(forget_after=60.0)
    mirror.charge("m", "old", 1.0)
    mirror.take_batch(0.0)
    mirror.merge(Pulled({("m", "old"): 1.0}, {}))
    assert mirror.take_batch(30.0).pull == [("m", "old")]
    assert mirror.take_batch(61.0).pull == []  # not written for over a minute
    assert mirror.get("m", "old") == 0.0  # unknown again, so asked for
    assert mirror.take_batch(62.0).pull == [("m", "old")]


def test_forget_after_must_be_positive() -> None:
    with pytest.raises(ValueError):
        LocalMirror(forget_after=0)


def test_pending_output_is_published_whole_every_exchange_and_once_when_gone() -> None:
    m = LocalMirror()
    m.add_pending("chat", "alice", 120.0)
    m.add_pending("chat", "bob", 30.0)
    first = m.take_batch(0.0)
    assert first.publish == {"chat": {"alice": 120.0, "bob": 30.0}}
    # Unchanged, it goes again (that refreshes its expiry in the shared store).
    assert m.take_batch(0.1).publish == {"chat": {"alice": 120.0, "bob": 30.0}}
    m.add_pending("chat", "alice", -120.0)
    m.add_pending("chat", "bob", -30.0)
    # Gone to nothing: published once as empty, then no more.
    assert m.take_batch(0.2).publish == {"chat": {}}
    assert m.take_batch(0.3).publish == {}


def test_pending_reads_add_the_other_processes_part() -> None:
    m = LocalMirror()
    m.add_pending("chat", "alice", 100.0)
    assert m.pending_many("chat", ["alice", "bob"]) == {"alice": 100.0, "bob": 0.0}
    batch = m.take_batch(0.0)
    assert "chat" in batch.pull_floors  # the others' part of this model is asked for
    m.merge(Pulled(pending={"chat": {"alice": 40.0, "bob": 7.0}}))
    assert m.pending_many("chat", ["alice", "bob"]) == {"alice": 140.0, "bob": 7.0}
    # The in-process state answers the same way for one process.
    mem = InMemoryFairShareState()
    mem.add_pending("chat", "alice", 100.0)
    mem.add_pending("chat", "alice", -100.0)
    assert mem.pending_many("chat", ["alice"]) == {"alice": 0.0}
