"""SharedBreakers against the real Redis server: each instance stands for one gateway process.

- failures spread over several processes add up to the threshold and open the breaker in all;
- a success anywhere closes it everywhere;
- after the cooldown exactly one of many concurrent claimers, across processes, gets the probe;
  its failure reopens the breaker for everyone, its abandonment lets another probe;
- the cooldown is measured on Redis's clock, whatever each process's own clock says;
- without Redis each process keeps its own breaker, and its events arrive once Redis is back.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis

from mindrouter.routing.backend_config import BackendConfig
from mindrouter.routing.breaker import Breaker
from mindrouter.routing.catalog import BackendState
from mindrouter.stores.breakers import BreakerTiming, SharedBreakers
from mindrouter.stores.shared import RedisLink

from .deployment import Deployment as BaseDeployment
from .fairshare.conftest import linked, new_client

COOLDOWN = 0.4


class Deployment(BaseDeployment[SharedBreakers]):
    """Processes sharing one Redis prefix, each with its own copy of the backends."""

    def process(self, threshold: int = 3, **kw: Any) -> tuple[SharedBreakers, BackendState]:
        client = new_client()
        backend = BackendState(
            BackendConfig("gpu-1", "vllm", "http://gpu-1"), breaker=Breaker(threshold, COOLDOWN)
        )
        link, kw = linked(client, self.prefix, kw)
        return self.track(SharedBreakers(link, [backend], BreakerTiming(**kw)), client), backend


@pytest.fixture
async def deployment() -> AsyncIterator[Deployment]:
    d = Deployment()
    try:
        yield d
    finally:
        await d.close()


async def sync_all(*processes: SharedBreakers) -> None:
    for _ in range(2):  # the second round pulls what the others pushed in the first
        for p in processes:
            assert await p.sync()


def fail(backend: BackendState) -> None:
    backend.breaker.on_attempt(0.0)
    backend.breaker.on_failure(asyncio.get_running_loop().time())


async def test_failures_in_three_processes_open_the_breaker_in_all(
    deployment: Deployment,
) -> None:
    procs = [deployment.process() for _ in range(3)]
    for shared, backend in procs:
        fail(backend)
        assert backend.breaker.state(backend.breaker.open_until) == "closed"  # 1 of 3 here
        assert await shared.sync()
    await sync_all(*(s for s, _ in procs))
    for _, backend in procs:
        b = backend.breaker
        assert (b.failures, b.opened_total) == (3, 1)
        assert not backend.usable(asyncio.get_running_loop().time())
        assert 0 < b.open_until - asyncio.get_running_loop().time() <= COOLDOWN


async def test_a_success_anywhere_resets_the_count_everywhere(deployment: Deployment) -> None:
    (a, ba), (b, bb) = deployment.process(), deployment.process()
    fail(ba)
    fail(ba)
    await sync_all(a, b)
    assert bb.breaker.failures == 2
    bb.breaker.on_success()
    await sync_all(a, b)
    assert (ba.breaker.failures, bb.breaker.failures) == (0, 0)
    # Consecutive: one more failure is one, not three.
    fail(ba)
    await sync_all(a, b)
    assert bb.breaker.state(asyncio.get_running_loop().time()) == "closed"
    assert bb.breaker.failures == 1


async def test_exactly_one_probe_in_the_whole_deployment(deployment: Deployment) -> None:
    procs = [deployment.process() for _ in range(4)]
    for _ in range(3):
        fail(procs[0][1])
    await sync_all(*(s for s, _ in procs))
    await asyncio.sleep(COOLDOWN + 0.05)
    now = asyncio.get_running_loop().time()
    assert all(b.breaker.state(now) == "half_open" for _, b in procs)

    async def claim(shared: SharedBreakers, backend: BackendState) -> bool:
        backend.breaker.on_attempt(now)  # the local claim, as the gateway makes it
        return await shared.claim_probe(backend)

    granted = await asyncio.gather(*(claim(s, b) for s, b in procs))
    assert sorted(granted) == [False, False, False, True]
    # The others keep out, and say so after the next exchange too.
    await sync_all(*(s for s, _ in procs))
    prober = granted.index(True)
    for i, (_, b) in enumerate(procs):
        assert b.breaker.state(asyncio.get_running_loop().time()) == "open"
        assert b.breaker.probe_here == (i == prober)

    # The probe fails: open again for a full cooldown, everywhere, and counted as an opening.
    procs[prober][1].breaker.on_failure(asyncio.get_running_loop().time())
    await sync_all(*(s for s, _ in procs))
    for _, b in procs:
        assert (b.breaker.opened_total, b.breaker.probing) == (2, False)
        assert b.breaker.open_until - asyncio.get_running_loop().time() > COOLDOWN / 2


async def a_probes_b_waits(
    deployment: Deployment,
) -> tuple[tuple[SharedBreakers, BackendState], tuple[SharedBreakers, BackendState], float]:
    """Two processes whose shared breaker (threshold 1) opened and cooled down; the first holds
    the probe, the second has not heard of it yet. Returns both and the time of the claim."""
    (a, ba), (b, bb) = deployment.process(threshold=1), deployment.process(threshold=1)
    fail(ba)
    await sync_all(a, b)
    await asyncio.sleep(COOLDOWN + 0.05)
    now = asyncio.get_running_loop().time()
    ba.breaker.on_attempt(now)
    assert await a.claim_probe(ba)
    return (a, ba), (b, bb), now


async def test_an_abandoned_probe_lets_another_process_probe(deployment: Deployment) -> None:
    (a, ba), (b, bb), now = await a_probes_b_waits(deployment)
    bb.breaker.on_attempt(now)
    assert not await b.claim_probe(bb)
    ba.breaker.on_abandoned()  # the client left before the backend said anything
    await sync_all(a, b)
    now = asyncio.get_running_loop().time()
    assert bb.breaker.state(now) == "half_open"
    bb.breaker.on_attempt(now)
    assert await b.claim_probe(bb)
    # And the probe's success closes the breaker for both.
    bb.breaker.on_success()
    await sync_all(a, b)
    assert ba.breaker.state(now) == bb.breaker.state(now) == "closed"


async def test_the_cooldown_runs_on_the_shared_clock(deployment: Deployment) -> None:
    # Two processes whose monotonic clocks are an hour apart agree on when the cooldown ends.
    (a, ba), (b, bb) = (
        deployment.process(threshold=1, clock=lambda: 10.0),
        deployment.process(threshold=1, clock=lambda: 3610.0),
    )
    ba.breaker.on_failure(10.0)
    await sync_all(a, b)
    assert 3610.0 < bb.breaker.open_until <= 3610.0 + COOLDOWN
    assert bb.breaker.state(3610.0) == "open"
    assert bb.breaker.state(3610.0 + COOLDOWN) == "half_open"


async def test_without_redis_each_process_keeps_its_own_and_catches_up_later(
    deployment: Deployment,
) -> None:
    down = SharedBreakers(
        RedisLink(
            Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2),
            deployment.prefix,
            timeout=0.5,
        ),
        [
            BackendState(
                BackendConfig("gpu-1", "vllm", "http://gpu-1"), breaker=Breaker(2, COOLDOWN)
            )
        ],
    )
    lost = down._backends[0]
    fail(lost)
    fail(lost)
    assert not await down.sync()
    assert not down.healthy
    # Locally it opened all the same, and the events wait to be pushed.
    assert not lost.usable(asyncio.get_running_loop().time())
    assert lost.breaker.unsent is not None and lost.breaker.unsent.failures == 2
    # A claim while Redis is away is answered locally.
    await asyncio.sleep(COOLDOWN + 0.05)
    lost.breaker.on_attempt(asyncio.get_running_loop().time())
    assert await down.claim_probe(lost)
    await down._pipe.aclose()
    await down._client.aclose()

    # The same events, kept, reach Redis through a process that can reach it.
    up, backend = deployment.process(threshold=2)
    backend.breaker.give_back(lost.breaker.take_unsent())
    assert await up.sync()
    other, seen = deployment.process(threshold=2)
    assert await other.sync()
    assert (seen.breaker.failures, seen.breaker.opened_total) == (2, 1)


async def test_a_healthy_backend_costs_no_writes(deployment: Deployment) -> None:
    shared, backend = deployment.process()
    for _ in range(100):
        backend.breaker.on_attempt(0.0)
        backend.breaker.on_success()
    assert not backend.breaker.unsent
    assert await shared.sync()
    assert [k async for k in deployment.admin.scan_iter(match=f"{deployment.prefix}*")] == []


async def test_only_the_probe_owner_can_release_it(deployment: Deployment) -> None:
    (a, _), (b, bb), now = await a_probes_b_waits(deployment)
    # B claimed locally, and its request was cancelled before Redis answered: it releases a
    # probe it never held. A's probe must survive that.
    bb.breaker.on_attempt(now)
    bb.breaker.on_abandoned()
    assert bb.breaker.unsent is not None and bb.breaker.unsent.release_probe
    await sync_all(a, b)
    assert bb.breaker.state(asyncio.get_running_loop().time()) == "open"  # still probing
    cc_shared, cc = deployment.process(threshold=1)
    assert await cc_shared.sync()
    now = asyncio.get_running_loop().time()
    cc.breaker.on_attempt(now)
    assert not await cc_shared.claim_probe(cc)


async def test_an_idle_process_exchanges_less_often(deployment: Deployment) -> None:
    # Counts over equal spells of the same run, idle and with a request open: only their ratio.
    p, backend = deployment.process(interval=0.02, idle_interval=0.2)
    await p.start()
    await asyncio.sleep(0.05)
    start = p.exchanges
    await asyncio.sleep(0.6)
    idle = p.exchanges - start
    backend.in_flight = 1
    p.changed()
    start = p.exchanges
    await asyncio.sleep(0.6)
    busy = p.exchanges - start
    print(f"\nexchanges in 0.6 s: idle {idle}, one request open {busy}")
    assert idle >= 1
    assert busy >= 3 * idle
