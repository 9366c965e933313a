"""Keeps the limit leases of this process's requests in flight alive.

A concurrency slot and a token reservation are leases in the limit store (Redis with several
processes) that expire `lease_seconds` after their last renewal. Every `interval` seconds this
process renews the leases of every request it still has in flight, in one call; a process that
dies stops renewing, and its users' slots and reservations are free again, on every replica, at
most `lease_seconds` after its last renewal (20 s with the defaults).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from mindrouter.observability.logging import log
from mindrouter.stores.limits import LimitStore, Ticket
from mindrouter.tasks import stop_task


class LeaseKeeper:
    def __init__(
        self,
        limits: LimitStore,
        interval: float = 5.0,
        wall: Callable[[], float] = time.time,
    ) -> None:
        if interval <= 0:
            raise ValueError("the lease renewal interval must be positive")
        self._limits = limits
        self.interval = interval
        self._wall = wall
        self._held: dict[str, Ticket] = {}  # lease id -> ticket
        self._task: asyncio.Task[None] | None = None

    def hold(self, ticket: Ticket) -> None:
        self._held[ticket.lease_id] = ticket

    def release(self, ticket: Ticket) -> None:
        self._held.pop(ticket.lease_id, None)

    @property
    def held(self) -> int:
        return len(self._held)

    async def renew(self) -> None:
        """One renewal of every lease held; failures are logged, never raised."""
        tickets = list(self._held.values())
        if not tickets:
            return
        try:
            await self._limits.renew(tickets, self._wall())
        except Exception as exc:
            log.warning("limit leases not renewed", error=str(exc), leases=len(tickets))

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="lease-keeper")

    async def stop(self) -> None:
        if self._task is not None:
            await stop_task(self._task)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.renew()
