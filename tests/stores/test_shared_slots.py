"""SharedSlots against the real Redis server: each instance stands for one gateway process.

- open requests of several processes add up per backend, so `max_concurrent` bounds their sum;
- a process that stops withdraws at once, one that dies stops counting after the TTL;
- each process's best waiter per model reaches the others, and `defer` leaves a free slot for a
  better waiter elsewhere (never for the same user, never beyond the deferral);
- an exchange lets the local gate decide again;
- without Redis the others' counts are kept for the TTL, then each process counts alone;
- an uncontended deployment exchanges on its timer only.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from mindrouter.routing.backend_config import BackendConfig
from mindrouter.routing.catalog import BackendState
from mindrouter.scheduling import Standing
from mindrouter.stores.shared import RedisLink
from mindrouter.stores.slots import SharedSlots, SlotTiming
from tests.pipeline.harness import until

from .deployment import Deployment as BaseDeployment
from .fairshare.conftest import linked, new_client


class FakeGate:
    """The gate as the board sees it: the best waiters it reports, the nudges it gets."""

    def __init__(self) -> None:
        self.best: dict[str, Standing] = {}
        self.released: list[str] = []
        self.handing_over = False

    def best_waiting(self) -> dict[str, Standing]:
        return dict(self.best)

    def release(self, model: str) -> None:
        self.released.append(model)


class Process:
    def __init__(self, board: SharedSlots, backends: list[BackendState], gate: FakeGate) -> None:
        self.board = board
        self.gpu1, self.gpu2 = backends
        self.gate = gate


class Deployment(BaseDeployment[SharedSlots]):
    def process(self, client: Redis | None = None, **kw: Any) -> Process:
        client = client or new_client()
        backends = [
            BackendState(
                BackendConfig(n, "vllm", f"http://{n}", max_concurrent=2), serves={"chat": "chat"}
            )
            for n in ("gpu-1", "gpu-2")
        ]
        link, kw = linked(client, self.prefix, kw)
        board = self.track(SharedSlots(link, backends, SlotTiming(**kw)), client)
        gate = FakeGate()
        board.attach(gate)
        return Process(board, backends, gate)


@pytest.fixture
async def deployment() -> AsyncIterator[Deployment]:
    d = Deployment()
    try:
        yield d
    finally:
        await d.close()


async def sync_all(*processes: Process) -> None:
    for _ in range(2):  # the second round pulls what the others pushed in the first
        for p in processes:
            assert await p.board.sync()


def room(backend: BackendState) -> int:
    """Slots this process may take on `backend` now."""
    return max(0, backend.config.max_concurrent - backend.load)


async def test_open_requests_of_every_process_count_against_a_backend(
    deployment: Deployment,
) -> None:
    a, b, c = (deployment.process() for _ in range(3))
    a.gpu1.in_flight = 1
    b.gpu1.in_flight = 1
    b.gpu2.in_flight = 1
    await sync_all(a, b, c)
    for p in (a, b, c):  # gpu-1 is full (max_concurrent 2 between all of them)
        assert p.gpu1.full and room(p.gpu1) == 0
    assert c.gpu1.others_in_flight == 2 and a.gpu1.others_in_flight == 1
    # gpu-2's one free slot is one process's, the same one in every view.
    assert sorted(room(p.gpu2) for p in (a, b, c)) == [0, 0, 1]
    b.gpu1.in_flight = 0
    b.gpu2.in_flight = 0
    await sync_all(a, b, c)
    assert sorted(room(p.gpu1) for p in (a, b, c)) == [0, 0, 1]
    assert sorted(room(p.gpu2) for p in (a, b, c)) == [0, 1, 1]


async def test_free_slots_go_first_to_the_processes_with_the_best_waiters(
    deployment: Deployment,
) -> None:
    a, b, c = (deployment.process(interval=0.05, defer_limit=1.0) for _ in range(3))
    a.gpu1.in_flight = 2
    a.gpu2.in_flight = 1  # one slot free in all
    b.gate.best = {"chat": Standing(1, 500.0, "heavy")}
    c.gate.best = {"chat": Standing(1, 100.0, "light")}
    await sync_all(a, b, c)
    await asyncio.sleep(0.06)  # past the onset (a, waiting for nothing, has exchanged since)
    await sync_all(a, b, c)
    assert (room(a.gpu2), room(b.gpu2), room(c.gpu2)) == (0, 0, 1)
    a.gpu2.in_flight = 0  # two free: one each for the two that wait, best first
    await sync_all(a, b, c)
    assert (room(a.gpu2), room(b.gpu2), room(c.gpu2)) == (0, 1, 1)


async def test_a_stopped_process_withdraws_and_a_dead_one_expires(
    deployment: Deployment,
) -> None:
    a = deployment.process(ttl=0.3)
    b = deployment.process(ttl=0.3)
    c = deployment.process(ttl=0.3)
    a.gpu1.in_flight = 2
    b.gpu2.in_flight = 2
    await sync_all(a, b, c)
    assert c.gpu1.full and c.gpu2.full
    await a.board.stop()  # a clean shutdown: its slots are free for the others at once
    await sync_all(c)
    assert room(c.gpu1) == 1 and c.gpu2.full  # gpu-1's two free slots: one for b, one for c
    await asyncio.sleep(0.4)  # b stopped exchanging without saying so (it died)
    await sync_all(c)
    assert room(c.gpu1) == 2 and room(c.gpu2) == 2


async def test_best_waiters_reach_the_others_and_free_slots_are_left_for_them(
    deployment: Deployment,
) -> None:
    a = deployment.process(defer_limit=0.2)
    b = deployment.process(defer_limit=0.2)
    a.gate.best = {"chat": Standing(1, 100.0, "light")}
    b.gate.best = {"chat": Standing(1, 900.0, "heavy")}
    await sync_all(a, b)
    assert b.board.others_best() == {"chat": Standing(1, 100.0, "light")}
    assert a.board.others_best() == {"chat": Standing(1, 900.0, "heavy")}
    assert "chat" in a.gate.released and "chat" in b.gate.released  # each decides again

    # b has a free slot but a's waiter is more deserving: b leaves it, for 0.2 s at most.
    assert b.board.defer("chat", Standing(1, 900.0, "heavy"), now=10.0) == pytest.approx(0.2)
    assert b.board.defer("chat", Standing(1, 900.0, "heavy"), now=10.15) == pytest.approx(0.05)
    assert b.board.defer("chat", Standing(1, 900.0, "heavy"), now=10.2) == 0.0  # ended
    # Not for a waiter that comes after this one; a's own best comes first for a as well.
    assert b.board.defer("chat", Standing(1, 50.0, "newcomer"), now=11.0) == 0.0
    assert a.board.defer("chat", Standing(1, 100.0, "light"), now=11.0) == 0.0
    # What each side published is compared, not the live score of an already published
    # waiter: both processes see the same pair, so exactly one of them takes the slot.
    assert a.board.defer("chat", Standing(1, 950.0, "light"), now=11.0) == 0.0
    # A starving waiter outranks any score.
    assert a.board.defer("chat", Standing(0, -40.0, "x"), now=11.0) == 0.0
    assert b.board.defer("other-model", Standing(1, 900.0, "heavy"), now=11.0) == 0.0

    a.gate.best = {}  # a's waiter was served
    await sync_all(a, b)
    assert b.board.others_best() == {}
    assert b.board.defer("chat", Standing(1, 900.0, "heavy"), now=12.0) == 0.0


async def test_on_a_tie_exactly_one_process_takes_the_slot(deployment: Deployment) -> None:
    a = deployment.process()
    b = deployment.process()
    a.gate.best = {"chat": Standing(1, 100.0, "u")}
    b.gate.best = {"chat": Standing(1, 100.0, "u")}
    await sync_all(a, b)
    deferred = [p.board.defer("chat", Standing(1, 100.0, "u"), now=1.0) > 0 for p in (a, b)]
    assert sorted(deferred) == [False, True]


async def test_the_best_of_several_other_processes_is_the_one_that_counts(
    deployment: Deployment,
) -> None:
    a, b, c = (deployment.process() for _ in range(3))
    a.gate.best = {"chat": Standing(1, 300.0, "u1")}
    b.gate.best = {"chat": Standing(1, 200.0, "u2"), "embed": Standing(0, -31.0, "u3")}
    await sync_all(a, b, c)
    assert c.board.others_best() == {
        "chat": Standing(1, 200.0, "u2"),
        "embed": Standing(0, -31.0, "u3"),
    }


async def test_without_redis_the_last_counts_hold_for_the_ttl_then_each_counts_alone(
    deployment: Deployment,
) -> None:
    a = deployment.process()
    a.gpu1.in_flight = 2
    a.gate.best = {"chat": Standing(1, 1.0, "u")}
    await sync_all(a)
    broken = Redis(host="127.0.0.1", port=1, socket_timeout=0.2, retry=Retry(NoBackoff(), 0))
    b = deployment.process(client=broken, ttl=0.3, timeout=0.5)
    # b reached Redis once (an ordinary client over the same prefix stands for that moment).
    healthy = SharedSlots(
        RedisLink(new_client(), deployment.prefix), [b.gpu1, b.gpu2], SlotTiming(ttl=0.3)
    )
    assert await healthy.sync()
    await healthy.stop()  # withdraws nothing of a's
    assert b.gpu1.full
    assert not await b.board.sync() and not b.board.healthy
    assert b.gpu1.full  # the others' counts are kept for the TTL
    await asyncio.sleep(0.35)
    assert not await b.board.sync()
    assert room(b.gpu1) == 2 and b.board.others_best() == {}


async def test_an_uncontended_deployment_exchanges_on_its_timer_only(
    deployment: Deployment,
) -> None:
    a = deployment.process(interval=30.0)
    await a.board.start()
    await asyncio.sleep(0.05)
    first = a.board.exchanges
    assert first == 1
    for _ in range(20):  # requests come and go; nobody waits anywhere
        a.gpu1.in_flight += 1
        a.board.changed(a.gpu1)
        a.gpu1.in_flight -= 1
        a.board.changed(a.gpu1)
    await asyncio.sleep(0.05)
    assert a.board.exchanges == first
    # Someone waits: a slot taken here is told at once.
    a.gate.best = {"chat": Standing(1, 1.0, "u")}
    a.board.changed(a.gpu1)  # not contended yet as far as the board knows: the next exchange says
    assert await a.board.sync()
    before = a.board.exchanges
    a.gpu1.in_flight = 1
    a.board.changed(a.gpu1)
    for _ in range(50):
        await asyncio.sleep(0.01)
        if a.board.exchanges > before:
            break
    assert a.board.exchanges > before


async def test_a_slot_left_for_another_process_stays_left_until_the_deferral_ends(
    deployment: Deployment,
) -> None:
    a = deployment.process(defer_limit=0.2)
    b = deployment.process(defer_limit=0.2)
    a.gate.best = {"chat": Standing(1, 100.0, "light")}
    await sync_all(a, b)
    assert b.board.defer("chat", Standing(1, 900.0, "heavy"), now=5.0) > 0
    # A newcomer here that would come first does not take it: a may be taking it right now.
    assert b.board.defer("chat", Standing(1, 1.0, "newcomer"), now=5.1) > 0
    assert b.board.defer("chat", Standing(1, 1.0, "newcomer"), now=5.2) == 0.0


async def test_a_process_passed_over_while_slots_stay_free_takes_one_after_the_limit(
    deployment: Deployment,
) -> None:
    a = deployment.process(defer_limit=0.2)
    b = deployment.process(defer_limit=0.2)
    b.gate.best = {"chat": Standing(1, 1.0, "light")}
    await sync_all(b)  # b comes first, then stops taking anything (stuck, not yet expired)
    a.gate.best = {"chat": Standing(1, 500.0, "heavy")}
    a.gpu1.in_flight = a.gpu2.in_flight = 1  # one slot free on each
    assert await a.board.sync()
    assert room(a.gpu1) == 0 and room(a.gpu2) == 0  # b's, as b comes first
    await asyncio.sleep(0.25)
    assert await a.board.sync()
    assert room(a.gpu1) == 1 and room(a.gpu2) == 1


async def test_just_after_waiting_begins_an_idle_processs_part_is_left_to_it(
    deployment: Deployment,
) -> None:
    a = deployment.process(interval=0.1)
    b = deployment.process(interval=0.1)
    await sync_all(a, b)
    assert room(a.gpu1) == 1 and room(b.gpu1) == 1  # nobody waits: one each
    b.gate.best = {"chat": Standing(1, 1.0, "u")}  # b has more requests than its part
    await sync_all(b)
    # a has not exchanged since and may still take its slot: b does not count on it yet.
    assert room(b.gpu1) == 1
    await asyncio.sleep(0.11)
    await sync_all(a, b)
    assert room(b.gpu1) == 2 and room(a.gpu1) == 0


async def test_a_finished_deferral_leaves_nothing_behind(deployment: Deployment) -> None:
    a = deployment.process(defer_limit=0.05)
    b = deployment.process(defer_limit=0.05)
    a.gate.best = {"chat": Standing(1, 1.0, "light")}
    await sync_all(a, b)
    assert (
        b.board.defer("chat", Standing(1, 900.0, "heavy"), now=asyncio.get_running_loop().time())
        > 0
    )
    a.gate.best = {}  # a took the slot
    await asyncio.sleep(0.06)
    await sync_all(a, b)
    assert not b.board.contended  # back to the quiet interval
    now = asyncio.get_running_loop().time()
    a.gate.best = {"chat": Standing(1, 1.0, "light")}
    await sync_all(a, b)
    assert b.board.defer("chat", Standing(1, 900.0, "heavy"), now=now) == pytest.approx(0.05)


async def test_being_passed_over_is_counted_afresh_after_the_backend_was_full(
    deployment: Deployment,
) -> None:
    a = deployment.process(defer_limit=0.2)
    b = deployment.process(defer_limit=0.2)
    a.gate.best = {"chat": Standing(1, 500.0, "heavy")}
    b.gate.best = {"chat": Standing(1, 1.0, "light")}
    a.gpu1.in_flight = 1
    a.gpu2.in_flight = 2
    await sync_all(a, b)
    assert room(a.gpu1) == 0  # gpu-1's free slot is b's
    a.gpu1.in_flight = 2  # full: nobody is passed over
    await sync_all(a)
    await asyncio.sleep(0.25)
    a.gpu1.in_flight = 1
    await sync_all(a)
    assert room(a.gpu1) == 0  # a fresh wait, not the old one


async def test_an_idle_process_exchanges_less_often(
    deployment: Deployment,
) -> None:
    # Counts over equal spells of the same run: idle (nothing open here, nobody waits), then
    # with one request open. No wall-clock bound: only the ratio of the two.
    a = deployment.process(interval=0.02, idle_interval=0.2)
    await a.board.start()
    await asyncio.sleep(0.05)
    start = a.board.exchanges
    await asyncio.sleep(0.6)
    idle = a.board.exchanges - start
    a.gpu1.in_flight = 1
    a.board.changed(a.gpu1)
    start = a.board.exchanges
    await asyncio.sleep(0.6)
    busy = a.board.exchanges - start
    print(f"\nexchanges in 0.6 s: idle {idle}, one request open {busy}")
    assert idle >= 1
    assert busy >= 3 * idle


async def test_the_first_request_after_a_long_idle_pause_is_exchanged_at_once(
    deployment: Deployment,
) -> None:
    # The idle pause is far longer than the test waits: only the request can cause the exchange.
    a = deployment.process(interval=0.02, idle_interval=60.0, ttl=600.0)
    await a.board.start()
    # The waits end within 5 s at most, far inside the idle pause.
    await until(lambda: a.board.exchanges >= 1, "the exchange at the start", turns=5000)
    assert a.board.exchanges == 1
    await asyncio.sleep(0.05)  # the idle pause has now outlasted `interval`
    a.gpu1.in_flight = 1
    a.board.changed(a.gpu1)
    await until(lambda: a.board.exchanges >= 2, "the request's exchange", turns=5000)
    assert a.board.exchanges == 2
