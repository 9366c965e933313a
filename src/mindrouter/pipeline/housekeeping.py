"""Chores a gateway process runs now and then, off the request path: each is a coroutine run at
start and then every `interval` seconds, its failures logged and the next run kept.

The chores: this process's heartbeat with the checkpoints of its requests in flight and the
sweep of dead processes' records (`recovery.py`, every `heartbeat_s`), audit retention and the
purge of expired stored responses (hourly). Every replica runs them; each is safe to run in
several places at once (conditional updates, idempotent deletes).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from mindrouter.observability.logging import log
from mindrouter.tasks import stop_task


@dataclass(frozen=True, slots=True)
class Chore:
    name: str
    interval: float
    run: Callable[[], Awaitable[int]]  # returns how many things it cleaned up


class Housekeeping:
    def __init__(self, chores: list[Chore]) -> None:
        self.chores = chores
        self.names = [chore.name for chore in chores]
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(self._loop(chore)) for chore in self.chores]

    async def stop(self) -> None:
        for task in self._tasks:
            await stop_task(task)
        self._tasks = []

    @staticmethod
    async def _loop(chore: Chore) -> None:
        while True:
            try:
                cleaned = await chore.run()
                if cleaned:
                    log.info("housekeeping", chore=chore.name, cleaned=cleaned)
            except Exception as exc:
                log.warning("housekeeping failed", chore=chore.name, error=str(exc))
            await asyncio.sleep(chore.interval)
