"""RedisFairShareState against the real server: several instances stand for several processes.

- charges from every process add up, and after an exchange every process reads the same value;
- lifts and floors are max-merges: whatever the order, the highest wins and nothing is lowered;
- any interleaving of charges and exchanges across processes gives the same totals;
- an exchange is applied once even when its reply is lost and it is sent again;
- without Redis everything keeps working locally, and the writes arrive once it is back;
- two fair queues, one per process, decide on each other's charges.
"""

from __future__ import annotations

import asyncio
import math
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis import exceptions as redis_errors
from redis.asyncio import Redis

from mindrouter.scheduling import FairPolicy, FairQueue, Job
from mindrouter.stores.fairshare import RedisFairShareState
from mindrouter.stores.redis_pipe import PipedRedis
from mindrouter.stores.shared import RedisLink

from .conftest import SharedRedis, open_shared


async def sync_all(*states: RedisFairShareState) -> None:
    # Twice: the second round pulls what the others pushed in the first.
    for _ in range(2):
        for state in states:
            assert await state.sync()


async def test_two_processes_charging_the_same_users_converge(redis_shared: SharedRedis) -> None:
    a, b = redis_shared.state(), redis_shared.state()
    a.charge("chat", "alice", 100.0)
    b.charge("chat", "alice", 30.0)
    b.charge("chat", "bob", 7.5)
    a.charge("chat", "bob", 0.5)
    a.charge("chat", "alice", -10.0)  # a refund
    # Before any exchange each process sees only its own writes.
    assert a.get("chat", "alice") == 90.0
    assert b.get("chat", "alice") == 30.0
    await sync_all(a, b)
    for state in (a, b):
        assert state.get_many("chat", ["alice", "bob"]) == {"alice": 120.0, "bob": 8.0}
    assert await redis_shared.counter("chat", "alice") == 120.0
    assert await redis_shared.counter("chat", "bob") == 8.0


async def test_models_are_separate_accounts(redis_shared: SharedRedis) -> None:
    a, b = redis_shared.state(), redis_shared.state()
    a.charge("big", "alice", 50.0)
    a.charge("small", "alice", 2.0)
    b.get_many("big", ["alice"])  # b pulls only what it uses
    b.get("small", "alice")
    await sync_all(a, b)
    assert b.get("big", "alice") == 50.0
    assert b.get("small", "alice") == 2.0
    assert b.get("other", "alice") == 0.0


async def test_a_reader_learns_an_account_it_never_wrote(redis_shared: SharedRedis) -> None:
    a, b = redis_shared.state(), redis_shared.state()
    a.charge("chat", "alice", 64.0)
    await a.sync()
    assert b.get("chat", "alice") == 0.0  # unknown here until the next exchange
    await b.sync()
    assert b.get("chat", "alice") == 64.0


async def test_lifts_are_max_merges(redis_shared: SharedRedis) -> None:
    a, b = redis_shared.state(), redis_shared.state()
    assert a.lift("chat", "carol", 100.0) == 100.0
    assert b.lift("chat", "carol", 50.0) == 50.0
    await sync_all(b, a)  # the lower lift lands first
    assert a.get("chat", "carol") == b.get("chat", "carol") == 100.0
    # A lift never lowers a counter, even one charged by another process.
    a.charge("chat", "dave", 500.0)
    await a.sync()
    b.lift("chat", "dave", 200.0)  # b has not seen dave yet: locally 200
    await sync_all(b, a)
    assert a.get("chat", "dave") == b.get("chat", "dave") == 500.0


async def test_a_lift_applies_to_the_shared_value_not_to_the_local_copy(
    redis_shared: SharedRedis,
) -> None:
    a, b = redis_shared.state(), redis_shared.state()
    a.charge("chat", "erin", 300.0)
    await a.sync()
    # b never saw erin: lifting her to the floor must not add the gap b believes in.
    b.lift("chat", "erin", 250.0)
    b.charge("chat", "erin", 10.0)
    await sync_all(b, a)
    assert a.get("chat", "erin") == b.get("chat", "erin") == 310.0


async def test_floors_are_max_merges(redis_shared: SharedRedis) -> None:
    a, b = redis_shared.state(), redis_shared.state()
    assert a.raise_floor("chat", 40.0) == 40.0
    assert b.raise_floor("chat", 90.0) == 90.0
    assert a.raise_floor("chat", 60.0) == 60.0  # a has not seen 90 yet
    await sync_all(a, b)
    assert a.floor("chat") == b.floor("chat") == 90.0
    assert b.raise_floor("chat", 10.0) == 90.0  # never lowered
    await sync_all(b, a)
    assert await redis_shared.floor("chat") == 90.0
    assert a.floor("unused") == 0.0


# -- any interleaving ----------------------------------------------------------------------------

step = st.one_of(
    st.tuples(
        st.just("charge"),
        st.integers(0, 2),  # which process
        st.sampled_from(["u1", "u2", "u3"]),
        st.integers(-20, 400).map(lambda n: n / 4),  # quarters: every sum is exact
    ),
    st.tuples(st.just("sync"), st.integers(0, 2), st.just(""), st.just(0.0)),
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=st.lists(step, min_size=1, max_size=40), order=st.randoms(use_true_random=False))
def test_any_interleaving_of_charges_gives_the_same_totals(
    steps: list[tuple[str, int, str, float]], order: random.Random
) -> None:
    async def scenario() -> None:
        shared = await open_shared()
        try:
            states = [shared.state() for _ in range(3)]
            for state in states:  # every process has these users: it pulls their counters
                state.get_many("m", ["u1", "u2", "u3"])
            totals: dict[str, float] = {}
            for kind, who, user, amount in steps:
                if kind == "charge":
                    states[who].charge("m", user, amount)
                    totals[user] = totals.get(user, 0.0) + amount
                else:
                    await states[who].sync()
            # Final exchanges in a random order, then once more so that everyone has everything.
            for state in order.sample(states, len(states)):
                assert await state.sync()
            for state in states:
                assert await state.sync()
            for state in states:
                assert state.get_many("m", totals) == totals
            for user, total in totals.items():
                assert await shared.counter("m", user) == total
        finally:
            await shared.close()

    asyncio.run(scenario())


async def test_many_concurrent_processes_add_up(redis_shared: SharedRedis) -> None:
    """Exchanges that really overlap on the server (eight processes, background tasks running)."""
    states = [redis_shared.state(sync_interval=0.005) for _ in range(8)]
    for state in states:
        await state.start()
    rng = random.Random(5)
    expected = 0.0
    for _ in range(400):
        amount = rng.randint(1, 64) / 8
        rng.choice(states).charge("m", "u", amount)
        expected += amount
        if rng.random() < 0.2:
            await asyncio.sleep(0)
    for state in states:
        await state.flush()
    await sync_all(*states)
    assert {state.get("m", "u") for state in states} == {expected}


# -- exactly once, and without Redis -------------------------------------------------------------


async def test_a_batch_sent_again_is_applied_once(redis_shared: SharedRedis) -> None:
    a = redis_shared.state()
    a.charge("m", "u", 10.0)
    a.lift("m", "v", 5.0)
    batch = a._mirror.take_batch(0.0)
    await a._exchange(1, batch)
    await a._exchange(1, batch)  # the reply was lost and the batch is re-sent
    assert await redis_shared.counter("m", "u") == 10.0
    a.charge("m", "u", 1.0)
    await a._exchange(2, a._mirror.take_batch(0.0))
    assert await redis_shared.counter("m", "u") == 11.0


class Cuttable:
    """A store's connection whose link to Redis can be cut: every command fails as if Redis
    were down."""

    def __init__(self, pipe: PipedRedis) -> None:
        self.pipe = pipe
        self.down = False
        self.fail_after_run = False

    async def call(self, *args: Any) -> Any:
        if self.down:
            raise redis_errors.ConnectionError("Error 111 connecting to 127.0.0.1:6379.")
        reply = await self.pipe.call(*args)
        if self.fail_after_run:
            raise redis_errors.TimeoutError("Timeout reading from 127.0.0.1:6379")
        return reply

    async def aclose(self) -> None:
        await self.pipe.aclose()


def cuttable_state(shared: SharedRedis, **kw: Any) -> tuple[RedisFairShareState, Cuttable]:
    state = shared.state(**kw)
    link = Cuttable(state._pipe)
    state._pipe = link  # type: ignore[assignment]
    return state, link


async def test_a_lost_reply_is_retried_without_charging_twice(redis_shared: SharedRedis) -> None:
    a, link = cuttable_state(redis_shared)
    a.charge("m", "u", 10.0)
    link.fail_after_run = True
    assert not await a.sync()  # the script ran, the reply was lost
    a.charge("m", "u", 1.0)
    link.fail_after_run = False
    assert await a.flush()
    assert await redis_shared.counter("m", "u") == 11.0
    assert a.get("m", "u") == 11.0


async def test_without_redis_it_keeps_working_locally_and_catches_up(
    redis_shared: SharedRedis,
) -> None:
    reasons: list[str] = []
    a, link = cuttable_state(redis_shared, on_degraded=reasons.append)
    b = redis_shared.state()
    link.down = True
    a.charge("m", "u", 10.0)
    a.lift("m", "v", 50.0)
    a.raise_floor("m", 20.0)
    assert not await a.sync()
    assert not await a.sync()
    assert not a.healthy
    assert len(reasons) == 2
    # The request path never notices: reads and writes go on, on this process's values.
    assert a.charge("m", "u", 5.0) == 15.0
    assert a.get_many("m", ["u", "v"]) == {"u": 15.0, "v": 50.0}
    assert a.floor("m") == 20.0
    b.charge("m", "u", 100.0)
    b.get("m", "v")
    b.floor("m")
    await b.sync()
    link.down = False
    assert await a.flush()
    assert a.healthy
    await b.sync()
    assert a.get("m", "u") == b.get("m", "u") == 115.0
    assert a.get("m", "v") == b.get("m", "v") == 50.0
    assert a.floor("m") == b.floor("m") == 20.0


async def test_an_unreachable_server_from_the_start_costs_nothing_on_the_request_path() -> None:
    dead = Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2)
    state = RedisFairShareState(
        RedisLink(dead, "mrtest:dead:", retry_after=0.05), sync_interval=0.01
    )
    await state.start()
    for _ in range(100):
        state.charge("m", "u", 1.0)
        await asyncio.sleep(0)
    await asyncio.sleep(0.2)
    assert state.get("m", "u") == 100.0
    assert not state.healthy
    assert state.failures >= 1
    await state.stop()  # the flush fails, is logged, and does not raise
    assert state.pending > 0
    await dead.aclose()


async def test_stop_pushes_what_is_pending(redis_shared: SharedRedis) -> None:
    a = redis_shared.state(sync_interval=3600)  # the background task would not get to it
    a.get("m", "u")  # used: the pause after the first exchange is the hour, not a quiet one
    await a.start()
    await asyncio.sleep(0.05)
    calls = a.exchanges
    a.charge("m", "u", 3.0)
    a.raise_floor("m", 1.0)
    for _ in range(10):
        await asyncio.sleep(0)
    assert a.exchanges == calls
    await a.stop()
    assert await redis_shared.counter("m", "u") == 3.0
    assert await redis_shared.floor("m") == 1.0


async def test_background_exchanges_carry_writes_to_other_processes(
    redis_shared: SharedRedis,
) -> None:
    a, b = redis_shared.state(sync_interval=0.02), redis_shared.state(sync_interval=0.02)
    await a.start()
    await b.start()
    b.get("m", "u")  # b uses the account, so it keeps pulling it
    a.charge("m", "u", 12.0)
    for _ in range(500):
        if b.get("m", "u") == 12.0:
            break
        await asyncio.sleep(0.01)
    assert b.get("m", "u") == 12.0
    assert a.exchanges > 0 and b.exchanges > 0


def test_writes_must_be_finite() -> None:
    state = RedisFairShareState(RedisLink(Redis(), "mrtest:unused:"))
    for bad in (math.inf, -math.inf, math.nan):
        with pytest.raises(ValueError):
            state.charge("m", "u", bad)
        with pytest.raises(ValueError):
            state.lift("m", "u", bad)
        with pytest.raises(ValueError):
            state.raise_floor("m", bad)


# -- two fair queues -----------------------------------------------------------------------------


def job(user: str, n: int, weight: float = 1.0) -> Job:
    return Job(f"{user}-{n}", user, "chat", weight, 100, 100, "chat", 0.0)


async def test_each_process_schedules_on_everyones_usage(redis_shared: SharedRedis) -> None:
    policy = FairPolicy(wait_bonus_per_s=0.0, burst_allowance=0.0)
    qa = FairQueue(redis_shared.state(), policy)
    qb = FairQueue(redis_shared.state(), policy)
    # Process B serves "heavy" a lot.
    heavy = job("heavy", 0)
    qb.push(heavy)
    assert qb.pick("chat", 0.0) is heavy
    qb.on_dispatch(heavy, 0.0)
    qb.charge(heavy, 1000)
    qb.on_complete(heavy, 100, 1000)
    # Process A has both users waiting; "heavy" arrived first.
    qa.push(job("heavy", 1))
    qa.push(job("light", 1))
    assert isinstance(qa.state, RedisFairShareState) and isinstance(qb.state, RedisFairShareState)
    await sync_all(qb.state, qa.state)
    chosen = qa.pick("chat", 1.0)
    assert chosen is not None and chosen.user == "light"


# -- pending output --------------------------------------------------------------------------------


async def test_pending_output_is_summed_over_processes(redis_shared: SharedRedis) -> None:
    a, b, c = redis_shared.state(), redis_shared.state(), redis_shared.state()
    a.add_pending("chat", "alice", 300.0)
    b.add_pending("chat", "alice", 200.0)
    b.add_pending("chat", "bob", 50.0)
    c.pending_many("chat", ["alice"])  # c only reads
    # Before an exchange each process knows its own part only.
    assert a.pending_many("chat", ["alice", "bob"]) == {"alice": 300.0, "bob": 0.0}
    await sync_all(a, b, c)
    assert a.pending_many("chat", ["alice", "bob"]) == {"alice": 500.0, "bob": 50.0}
    assert b.pending_many("chat", ["alice", "bob"]) == {"alice": 500.0, "bob": 50.0}
    assert c.pending_many("chat", ["alice", "bob"]) == {"alice": 500.0, "bob": 50.0}
    # Each process changes its own part; a part back at zero is taken out.
    a.add_pending("chat", "alice", -200.0)
    b.add_pending("chat", "alice", -200.0)
    b.add_pending("chat", "bob", -50.0)
    await sync_all(a, b, c)
    assert c.pending_many("chat", ["alice", "bob"]) == {"alice": 100.0, "bob": 0.0}
    assert b.pending_many("chat", ["alice", "bob"]) == {"alice": 100.0, "bob": 0.0}
    # Per model.
    assert c.pending_many("other", ["alice"]) == {"alice": 0.0}


async def test_a_process_that_stops_exchanging_stops_counting(redis_shared: SharedRedis) -> None:
    gone, stays = redis_shared.state(), redis_shared.state()
    gone.add_pending("chat", "alice", 400.0)
    stays.pending_many("chat", ["alice"])
    await sync_all(gone, stays)
    assert stays.pending_many("chat", ["alice"]) == {"alice": 400.0}
    # `gone` dies mid-stream: it never exchanges again, and its part expires.
    await asyncio.sleep(gone._pending_ttl_ms / 1000 + 0.2)
    assert await stays.sync()
    assert stays.pending_many("chat", ["alice"]) == {"alice": 0.0}


async def test_a_replica_sees_the_slot_another_just_gave(redis_shared: SharedRedis) -> None:
    policy = FairPolicy(wait_bonus_per_s=0.0, burst_allowance=0.0)
    qa = FairQueue(redis_shared.state(), policy)
    qb = FairQueue(redis_shared.state(), policy)
    assert isinstance(qa.state, RedisFairShareState) and isinstance(qb.state, RedisFairShareState)
    # Both users equal so far; B has just given "alice" a slot for a long answer, nothing has
    # streamed yet (so nothing is charged beyond the prompt).
    started = Job("alice-0", "alice", "chat", 1.0, 10, 2000, "chat", 0.0)
    qb.push(started)
    qb.on_dispatch(started, 0.0)
    bob_warm = Job("bob-0", "bob", "chat", 1.0, 10, 1, "chat", 0.0)
    qa.push(bob_warm)
    qa.on_dispatch(bob_warm, 0.0)
    qa.on_complete(bob_warm, 10, 0)
    # A has both waiting, alice first in line.
    qa.push(job("alice", 1))
    qa.push(job("bob", 1))
    await sync_all(qb.state, qa.state)
    chosen = qa.pick("chat", 1.0)
    assert chosen is not None and chosen.user == "bob"
    # Once alice's stream is over in B, the expectation goes away everywhere.
    qb.charge(started, 2000)
    qb.on_complete(started, 10, 2000)
    await sync_all(qb.state, qa.state)
    assert qa.state.pending_many("chat", ["alice"]) == {"alice": 0.0}
