"""The background exchange loop: its pauses, pokes and stop, without Redis (a counting sync)."""

from __future__ import annotations

import asyncio
import math

from mindrouter.stores.outage import ExchangeLoop


class Counting:
    def __init__(self) -> None:
        self.calls = 0
        self.loop: ExchangeLoop | None = None
        self.poke_during: set[int] = set()  # the calls that poke while they run

    async def sync(self) -> bool:
        self.calls += 1
        if self.calls in self.poke_during and self.loop is not None:
            self.loop.poke()
        return True


async def until(predicate: object, tries: int = 1000) -> None:
    for _ in range(tries):  # bounded: the loop gets there in a few turns
        if callable(predicate) and predicate():
            return
        await asyncio.sleep(0.005)


async def test_an_endless_pause_waits_for_a_poke() -> None:
    sync = Counting()
    loop = ExchangeLoop(sync.sync, interval=math.inf, retry_after=1.0, what="test")
    loop.start()
    await until(lambda: sync.calls >= 1)
    for _ in range(20):
        await asyncio.sleep(0)
    assert sync.calls == 1
    loop.poke()
    await until(lambda: sync.calls >= 2)
    assert sync.calls == 2
    await loop.stop(grace=5.0)


async def test_a_poke_during_an_exchange_shortens_the_next_pause_to_the_gap() -> None:
    sync = Counting()
    loop = ExchangeLoop(sync.sync, interval=3600.0, retry_after=1.0, what="test", min_gap=0.01)
    sync.loop = loop
    sync.poke_during = {1}
    loop.start()
    await until(lambda: sync.calls >= 2)
    assert sync.calls == 2  # then the hour-long pause
    await loop.stop(grace=5.0)


async def test_pokes_in_a_row_make_one_exchange() -> None:
    sync = Counting()
    loop = ExchangeLoop(sync.sync, interval=3600.0, retry_after=1.0, what="test", min_gap=0.02)
    loop.start()
    await until(lambda: sync.calls >= 1)
    for _ in range(10):
        loop.poke()
    await until(lambda: sync.calls >= 2)
    for _ in range(20):
        await asyncio.sleep(0)
    assert sync.calls == 2
    await loop.stop(grace=5.0)


async def test_stop_ends_an_endless_pause() -> None:
    sync = Counting()
    loop = ExchangeLoop(sync.sync, interval=math.inf, retry_after=1.0, what="test", min_gap=1.0)
    loop.start()
    await until(lambda: sync.calls >= 1)
    await asyncio.wait_for(loop.stop(grace=3600.0), 60)  # would hang without the wake-up
    assert sync.calls == 1
