"""The capacity gate: fair admission, one wake-up per freed slot, no queue jumping, timeouts."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from mindrouter.scheduling import (
    CapacityGate,
    FairPolicy,
    FairQueue,
    InMemoryFairShareState,
    Job,
    Standing,
)
from mindrouter.scheduling.gate import NoLongerServed

from .sim import job


class Slots:
    """Free slots per model, as the backends' `max_concurrent − in_flight` would say."""

    def __init__(self, **free: int) -> None:
        self.free = dict(free)

    def has_capacity(self, model: str, requires: frozenset[str] = frozenset()) -> bool:
        return not requires and self.free.get(model, 0) > 0

    def take(self, model: str) -> None:
        assert self.free[model] > 0, "admitted without a free slot"
        self.free[model] -= 1


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make_gate(**kw: float) -> tuple[CapacityGate, Clock]:
    clock = Clock()
    queue = FairQueue(InMemoryFairShareState(), FairPolicy(wait_bonus_per_s=0.0))
    return CapacityGate(queue, clock=clock, **kw), clock


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def start(gate: CapacityGate, slots: Slots, j: Job, admitted: list[str]) -> asyncio.Task[None]:
    async def run() -> None:
        await gate.acquire(j, slots.has_capacity, timeout=5.0)
        slots.take(j.model)  # takes the slot before its next await, as the contract says
        admitted.append(j.user)

    return asyncio.create_task(run())


async def test_a_freed_slot_goes_to_the_best_waiter_with_one_wake_up() -> None:
    gate, _ = make_gate()
    slots = Slots(m=0)
    usage = {"d": 400.0, "b": 200.0, "a": 100.0, "c": 300.0}
    for user, used in usage.items():
        gate.queue.state.charge("m", user, used)
    admitted: list[str] = []
    tasks = [start(gate, slots, job(u, 0.0), admitted) for u in usage]
    await settle()
    assert gate.waiting == 4 and gate.wakeups == 0
    for expected in ("a", "b", "c", "d"):
        slots.free["m"] += 1
        gate.release("m")
        await settle()
        assert admitted[-1] == expected
    assert gate.wakeups == 4  # one per freed slot: nobody was woken to find no room
    await asyncio.gather(*tasks)


async def test_release_without_room_wakes_nobody() -> None:
    gate, _ = make_gate()
    slots = Slots(m=0)
    admitted: list[str] = []
    task = start(gate, slots, job("u", 0.0), admitted)
    await settle()
    gate.release("m")
    await settle()
    assert gate.wakeups == 0 and admitted == []
    slots.free["m"] = 1
    gate.release("m")
    await task
    assert admitted == ["u"]


async def test_several_free_slots_are_handed_out_one_decision_at_a_time() -> None:
    gate, _ = make_gate()
    slots = Slots(m=0)
    admitted: list[str] = []
    tasks = [start(gate, slots, job(f"u{i}", 0.0), admitted) for i in range(5)]
    await settle()
    slots.free["m"] = 3
    gate.release("m")
    gate.release("m")
    gate.release("m")
    await settle()
    assert len(admitted) == 3 and gate.wakeups == 3 and slots.free["m"] == 0
    assert gate.waiting == 2
    slots.free["m"] = 2
    gate.release("m")
    await asyncio.gather(*tasks)


async def test_a_new_arrival_does_not_jump_ahead_of_waiters() -> None:
    gate, clock = make_gate()
    slots = Slots(m=0)
    admitted: list[str] = []
    gate.queue.state.charge("m", "early", 100.0)
    gate.queue.state.charge("m", "late", 500.0)
    first = start(gate, slots, job("early", 0.0), admitted)
    await settle()
    # A slot frees without anyone calling release, just as a worse-ranked request arrives.
    clock.now = 1.0
    slots.free["m"] = 1
    second = start(gate, slots, job("late", 1.0), admitted)
    await settle()
    assert admitted == ["early"]
    slots.free["m"] = 1
    gate.release("m")
    await asyncio.gather(first, second)
    assert admitted == ["early", "late"]


async def test_a_users_next_request_waits_behind_its_earlier_one() -> None:
    gate, clock = make_gate()
    slots = Slots(m=0)
    admitted: list[str] = []
    j1, j2 = job("u", 0.0), job("u", 1.0)
    t1 = start(gate, slots, j1, admitted)
    await settle()
    clock.now, slots.free["m"] = 1.0, 1
    t2 = start(gate, slots, j2, admitted)
    await t1
    assert gate.queue.running() == [j1] and gate.waiting == 1
    slots.free["m"] = 1
    gate.release("m")
    await t2


async def test_an_arrival_dispatches_at_once_when_nobody_better_waits() -> None:
    gate, _ = make_gate()
    slots = Slots(m=1)
    j = job("u", 0.0)
    await gate.acquire(j, slots.has_capacity)  # no await inside: returns without waiting
    assert gate.queue.running() == [j] and gate.wakeups == 0


async def test_one_models_backlog_does_not_block_another_model() -> None:
    gate, _ = make_gate()
    slots = Slots(big=0, small=1)
    admitted: list[str] = []
    waiting = [start(gate, slots, job(f"h{i}", 0.0, model="big"), admitted) for i in range(20)]
    await settle()
    other = job("s", 0.0, model="small")
    await asyncio.wait_for(gate.acquire(other, slots.has_capacity), timeout=0.5)
    assert other in gate.queue.running()
    for t in waiting:
        t.cancel()
    await asyncio.gather(*waiting, return_exceptions=True)
    assert len(gate.queue) == 0


class FeatureSlots:
    """Free slots of one model on two kinds of backend: plain ones, and ones with the
    structured-output feature."""

    def __init__(self, plain: int, able: int) -> None:
        self.plain, self.able = plain, able

    def has_capacity(self, model: str, requires: frozenset[str]) -> bool:
        return self.able > 0 or (not requires and self.plain > 0)

    def take(self, j: Job) -> None:
        if j.requires or self.plain == 0:
            assert self.able > 0, "admitted without a slot it can use"
            self.able -= 1
        else:
            self.plain -= 1


async def test_a_slot_the_best_waiter_cannot_use_goes_to_the_best_that_can() -> None:
    gate, clock = make_gate()
    slots = FeatureSlots(plain=0, able=0)
    admitted: list[str] = []

    def enter(j: Job) -> asyncio.Task[None]:
        async def run() -> None:
            await gate.acquire(j, slots.has_capacity, timeout=5.0)
            slots.take(j)
            admitted.append(j.user)

        return asyncio.create_task(run())

    gate.queue.state.charge("m", "worse", 500.0)
    needs = frozenset({"structured_output"})
    structured = dataclasses.replace(job("best", 0.0), requires=needs)
    tasks = [enter(structured), enter(job("worse", 0.0))]
    await settle()
    # A plain backend frees: the best waiter cannot use it, so the next one takes it.
    clock.now, slots.plain = 1.0, 1
    gate.release("m")
    await settle()
    assert admitted == ["worse"] and gate.wakeups == 1
    # A backend with the feature frees: the waiting structured request gets it.
    slots.able = 1
    gate.release("m")
    await asyncio.gather(*tasks)
    assert admitted == ["worse", "best"] and gate.wakeups == 2


async def test_acquire_times_out_and_withdraws_the_job() -> None:
    gate, _ = make_gate()
    slots = Slots(m=0)
    j = job("u", 0.0)
    with pytest.raises(TimeoutError):
        await gate.acquire(j, slots.has_capacity, timeout=0.05)
    assert len(gate.queue) == 0 and gate.waiting == 0
    assert gate.queue.accounts() == []  # no longer active either


async def test_the_default_deadline_is_150_seconds() -> None:
    gate, _ = make_gate()
    assert gate.default_timeout == 150.0


async def test_a_cancelled_waiter_leaves_the_queue() -> None:
    gate, _ = make_gate()
    slots = Slots(m=0)
    task = asyncio.create_task(gate.acquire(job("u", 0.0), slots.has_capacity))
    await settle()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(gate.queue) == 0 and gate.waiting == 0


async def test_a_waiter_cancelled_just_after_being_chosen_passes_the_slot_on() -> None:
    gate, _ = make_gate()
    slots = Slots(m=0)
    gate.queue.state.charge("m", "second", 10.0)
    chosen = asyncio.create_task(gate.acquire(job("first", 0.0), slots.has_capacity))
    admitted: list[str] = []
    other = start(gate, slots, job("second", 0.0), admitted)
    await settle()
    slots.free["m"] = 1
    gate.release("m")  # "first" is chosen ...
    chosen.cancel()  # ... and cancelled before it could run
    with pytest.raises(asyncio.CancelledError):
        await chosen
    await other
    assert admitted == ["second"]
    assert gate.queue.state.get("m", "first") == 0.0  # its prompt charge was refunded


def enter_with(
    gate: CapacityGate, slots: Slots, j: Job, admitted: list[str], ready: asyncio.Future[None]
) -> asyncio.Task[None]:
    async def run() -> None:
        await gate.acquire(j, slots.has_capacity, timeout=5.0, ready=ready)
        slots.take(j.model)
        admitted.append(j.user)

    return asyncio.create_task(run())


async def test_a_slot_freed_while_a_light_job_gets_ready_is_its() -> None:
    gate, _ = make_gate()
    slots = Slots(m=0)
    admitted: list[str] = []
    gate.queue.state.charge("m", "heavy", 5000.0)
    heavy = start(gate, slots, job("heavy", 0.0), admitted)
    ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    light = enter_with(gate, slots, job("light", 0.0), admitted, ready)
    await settle()
    slots.free["m"] = 1
    gate.release("m")  # the light job is chosen though its record is not in yet
    await light
    assert admitted == ["light"] and gate.wakeups == 1 and not ready.done()
    heavy.cancel()
    with pytest.raises(asyncio.CancelledError):
        await heavy


async def test_a_job_whose_ready_fails_while_it_waits_is_withdrawn() -> None:
    gate, _ = make_gate()
    slots = Slots(m=0)
    ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(
        gate.acquire(job("u", 0.0), slots.has_capacity, timeout=5.0, ready=ready)
    )
    await settle()
    ready.set_exception(RuntimeError("the audit database is down"))
    with pytest.raises(RuntimeError, match="audit database"):
        await asyncio.wait_for(task, timeout=1.0)
    assert len(gate.queue) == 0 and gate.waiting == 0 and gate.queue.accounts() == []


async def test_capacity_that_appears_without_release_is_noticed_by_polling() -> None:
    gate, _ = make_gate(poll_interval=0.01)
    slots = Slots(m=0)
    admitted: list[str] = []
    task = start(gate, slots, job("u", 0.0), admitted)
    await settle()
    slots.free["m"] = 1  # e.g. a backend came back: nobody calls release
    await asyncio.wait_for(task, timeout=1.0)
    assert admitted == ["u"]


async def test_finish_settles_the_charges_and_passes_the_slot_on() -> None:
    gate, _ = make_gate()
    slots = Slots(m=1)
    first = job("a", 0.0, prompt=100)
    await gate.acquire(first, slots.has_capacity)
    slots.take("m")
    admitted: list[str] = []
    nxt = start(gate, slots, job("b", 0.0), admitted)
    await settle()
    slots.free["m"] += 1  # the backend gave the slot back
    gate.finish(first, actual_prompt=100, actual_output=7)
    await nxt
    assert admitted == ["b"]
    assert gate.queue.state.get("m", "a") == pytest.approx(100 + 2 * 7)


# -- with an arbiter: a free slot offered to another process's more deserving waiter first -------


class Elsewhere:
    """An arbiter standing for the other gateway processes: while `better` is set, it asks for
    free slots to be left alone for `wait` seconds (counted from the first time it asked)."""

    def __init__(self, wait: float = 0.05) -> None:
        self.wait = wait
        self.better = True
        self.asked: list[tuple[str, Standing]] = []
        self._since: float | None = None

    def defer(self, model: str, best_here: Standing, now: float) -> float:
        self.asked.append((model, best_here))
        if not self.better:
            return 0.0
        if self._since is None:
            self._since = now
        return max(0.0, self._since + self.wait - now)


def gate_with(arbiter: Elsewhere) -> CapacityGate:
    queue = FairQueue(InMemoryFairShareState(), FairPolicy(wait_bonus_per_s=0.0))
    return CapacityGate(queue, arbiter=arbiter)


async def test_a_slot_is_left_for_a_better_waiter_elsewhere_until_the_deferral_ends() -> None:
    arbiter = Elsewhere(wait=0.05)
    gate = gate_with(arbiter)
    slots = Slots(m=0)
    admitted: list[str] = []
    gate.queue.state.charge("m", "here", 10.0)
    task = start(gate, slots, job("here", 0.0), admitted)
    await settle()
    slots.free["m"] = 1
    gate.release("m")
    await settle()
    assert admitted == [] and slots.free["m"] == 1  # left alone for the other process
    assert gate.deferrals == 1 and gate.wakeups == 0
    model, standing = arbiter.asked[-1]
    assert model == "m" and standing.user == "here" and standing.score == 10.0
    await asyncio.wait_for(task, 1.0)  # the deferral ended: the slot goes to the local waiter
    assert admitted == ["here"] and gate.wakeups == 1


async def test_a_slot_taken_elsewhere_during_the_deferral_stays_taken() -> None:
    arbiter = Elsewhere(wait=0.05)
    gate = gate_with(arbiter)
    slots = Slots(m=0)
    admitted: list[str] = []
    task = start(gate, slots, job("here", 0.0), admitted)
    await settle()
    slots.free["m"] = 1
    gate.release("m")
    await settle()
    slots.free["m"] = 0  # the other process took it
    await asyncio.sleep(0.08)
    assert admitted == [] and gate.wakeups == 0 and not task.done()
    arbiter.better = False  # nobody better waits elsewhere any more; a slot frees here
    slots.free["m"] = 1
    gate.release("m")
    await asyncio.wait_for(task, 1.0)
    assert admitted == ["here"]


async def test_a_new_arrival_does_not_take_a_slot_left_for_another_process() -> None:
    arbiter = Elsewhere(wait=0.05)
    gate = gate_with(arbiter)
    slots = Slots(m=1)
    admitted: list[str] = []
    task = start(gate, slots, job("new", 0.0), admitted)
    await settle()
    assert admitted == [] and gate.waiting == 1 and gate.deferrals == 1
    await asyncio.wait_for(task, 1.0)
    assert admitted == ["new"]


async def test_an_arbiter_that_defers_nothing_changes_nothing() -> None:
    arbiter = Elsewhere()
    arbiter.better = False
    gate = gate_with(arbiter)
    slots = Slots(m=1)
    admitted: list[str] = []
    await start(gate, slots, job("u", 0.0), admitted)
    assert admitted == ["u"] and gate.deferrals == 0
    assert gate.best_waiting() == {}


async def test_a_job_whose_model_loses_its_backends_while_it_waits_is_withdrawn() -> None:
    gate, _ = make_gate(poll_interval=0.01)
    slots = Slots(m=0)
    served = True
    task = asyncio.create_task(
        gate.acquire(job("u", 0.0), slots.has_capacity, timeout=5.0, served=lambda: served)
    )
    await asyncio.sleep(0.05)
    assert not task.done()  # still served: it waits for capacity
    served = False  # an admin disabled the model's last backend
    with pytest.raises(NoLongerServed, match="'m'"):
        await asyncio.wait_for(task, timeout=1.0)
    assert len(gate.queue) == 0 and gate.waiting == 0
