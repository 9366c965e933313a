"""A process whose fair-share mirror nobody uses rests: no exchange at all while it never used
an account, one every `idle_interval` once it has, and at once on the first read or write after
such a pause."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from mindrouter.stores.fairshare import RedisFairShareState

from .conftest import SharedRedis, linked, new_client


class Counting(RedisFairShareState):
    calls = 0

    async def sync(self) -> bool:
        self.calls += 1
        return await super().sync()


def counting(shared: SharedRedis, **kw: float) -> Counting:
    client = new_client()
    shared.clients.append(client)
    link, rest = linked(client, shared.prefix, dict(kw))
    state = Counting(link, **rest)
    shared.states.append(state)
    return state


async def until(predicate: Callable[[], bool]) -> None:
    for _ in range(500):  # bounded: a few exchange turns at most
        if predicate():
            return
        await asyncio.sleep(0.01)


async def turns(n: int = 30) -> None:
    for _ in range(n):  # a hundred short intervals' worth of chances to exchange
        await asyncio.sleep(0.005)


async def test_a_process_that_never_used_an_account_does_not_exchange(
    redis_shared: SharedRedis,
) -> None:
    state = counting(redis_shared, sync_interval=0.001, idle_interval=0.001)
    await state.start()
    await until(lambda: state.calls >= 1)
    await turns()
    assert state.calls == 1
    state.charge("m", "u", 1.0)  # the first write wakes it
    await until(lambda: state.exchanges >= 1)
    assert await redis_shared.counter("m", "u") == 1.0


async def test_a_quiet_process_exchanges_at_once_when_used_again(
    redis_shared: SharedRedis,
) -> None:
    a = counting(redis_shared, sync_interval=0.001, idle_interval=3600.0)
    b = redis_shared.state()
    a.get("m", "u")
    await a.start()
    await until(lambda: a.exchanges >= 1)
    await turns()
    calls = a.calls
    await turns()
    assert a.calls == calls, "quiet: the next exchange is an hour away"
    b.charge("m", "u", 5.0)
    assert await b.sync()
    assert a.get("m", "u") == 0.0  # the read that ends the quiet spell sees the old value
    await until(lambda: a.get("m", "u") == 5.0)
    assert a.get("m", "u") == 5.0
    assert a.calls > calls
