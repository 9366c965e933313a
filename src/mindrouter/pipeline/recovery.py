"""This process's instance in the database: its heartbeat, the checkpoints of its requests in
flight, and the sweep that closes what a dead process left open.

Every `heartbeat_s` (one housekeeping chore) the process renews its heartbeat and, in the same
transaction, writes into each of its `pending` audit records the tokens that request has
produced so far (the engine's usage when it has arrived, else the input estimate plus one token
per output chunk relayed: what the request would be charged if it ended now). Then it sweeps:
the `pending` records of every process whose heartbeat is older than `instance_stale_s` are
closed as `interrupted` and charged the tokens of their last checkpoint, exactly once, and those
tokens are passed on to the limit counters too, so the budget sees them on every replica.

A process sweeps others only once its own heartbeats have reached the database for
`instance_stale_s`, with no gap of half of it (the journals of processes dead on its own
machine excepted: those deaths are certain). After an outage of the database longer than
`instance_stale_s`, every replica finds every other one stale; the first back would otherwise
close the records of requests still running elsewhere, and their real outcomes, coming later,
would change nothing.

A process killed mid-stream therefore has its records closed by a replica that has been up
for `instance_stale_s` at most `instance_stale_s` plus one `heartbeat_s` after its last
heartbeat (20 s with the defaults, under 25 s from the kill with a sweep taking a few seconds
at most); a replica started after the kill waits its own `instance_stale_s` first. What it
relayed after its last checkpoint is in its journal (`journal.py`): a process on the same
machine finds the dead one's file at its next heartbeat, writes those counts as the last
checkpoint and sweeps the records at once; without such a process, up to `heartbeat_s` worth of
output per stream is not charged.
"""

from __future__ import annotations

import math
import os
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from uuid import uuid4

from mindrouter.canonical import Usage
from mindrouter.observability.logging import log
from mindrouter.pipeline.journal import Journal, orphans
from mindrouter.pipeline.usage_sync import limit_key
from mindrouter.stores.limits import LimitStore, Ticket
from mindrouter.stores.limits.model import DAY_SECONDS
from mindrouter.stores.ports import InstanceLedger
from mindrouter.stores.records import Charge, Checkpoint


class Recovery:
    def __init__(
        self,
        ledger: InstanceLedger,
        limits: LimitStore,
        *,
        stale_s: float,
        journal_dir: Path | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._ledger = ledger
        self._limits = limits
        self.stale_s = stale_s
        self._wall = wall
        self.instance_id = uuid4().hex
        self._host = socket.gethostname()
        self._pid = os.getpid()
        self._flights: dict[str, Callable[[], Usage | None]] = {}  # audit uuid -> used so far
        self._journal_dir = journal_dir
        self.journal: Journal | None = None  # from start(), when there is a journal directory
        self.swept = 0  # records this process closed for dead ones
        # This process's last heartbeat that reached the database, and the first of the run of
        # them with no gap longer than half of `stale_s` (wall clock).
        self._last_heartbeat = -math.inf
        self._reaching_since = 0.0

    def track(self, audit_uuid: str, used: Callable[[], Usage | None]) -> int | None:
        """Follows a request in flight; returns its journal slot (for `Journal.note`), if any."""
        self._flights[audit_uuid] = used
        return self.journal.take(audit_uuid) if self.journal is not None else None

    def untrack(self, audit_uuid: str, slot: int | None) -> None:
        """The request has ended; `slot` is what `track` returned for it."""
        self._flights.pop(audit_uuid, None)
        if slot is not None and self.journal is not None:
            self.journal.give(slot)

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._wall(), UTC)

    async def start(self) -> None:
        await self._ledger.register(self.instance_id, self._host, self._pid, self._now())
        if self._journal_dir is not None:
            try:
                self.journal = Journal(self._journal_dir, self.instance_id)
            except OSError as exc:
                # Without it a kill costs up to a heartbeat of output per stream, as documented;
                # that is no reason to refuse to serve.
                log.warning("no journal of requests in flight", error=str(exc))
        log.info("instance registered", instance=self.instance_id)

    async def stop(self) -> None:
        # Whatever could not be completed is swept at once, with its tokens so far.
        await self._ledger.checkpoint(self.instance_id, self.checkpoints())
        await self._ledger.retire(self.instance_id)
        if self.journal is not None:
            self.journal.remove()
            self.journal = None

    def checkpoints(self) -> list[Checkpoint]:
        points = []
        for audit_uuid, used in list(self._flights.items()):
            usage = used()
            if usage is not None:
                points.append(Checkpoint(audit_uuid, usage.input_tokens, usage.output_tokens))
        return points

    async def tick(self) -> int:
        """One heartbeat with checkpoints, which finds the dead processes, the journals of
        processes that died here taken in, then their sweep; returns the records swept."""
        wall = self._wall()
        now = datetime.fromtimestamp(wall, UTC)
        dead: list[str] | None = await self._ledger.heartbeat(
            self.instance_id, self._host, self._pid, now, self.checkpoints(), self.stale_s
        )
        if wall - self._last_heartbeat > self.stale_s / 2:
            # Out of reach for half of `stale_s` (or just started): long enough for a live
            # process, whose heartbeats come every third of it at most, to have lapsed too.
            self._reaching_since = wall
        self._last_heartbeat = wall
        taken = await self._take_orphans(self._journal_dir) if self._journal_dir else []
        if wall - self._reaching_since < self.stale_s:
            # This process has reached the database for less than `stale_s`: the heartbeats
            # it finds stale may have lapsed in the same outage, of processes still alive.
            # Only the deaths it is sure of (their journals, taken in) are swept yet.
            dead = taken
        elif taken:
            dead = None  # backdated since the heartbeat found the dead: the sweep reads again
        if dead == []:
            return 0
        result = await self._ledger.sweep(now, self.stale_s, dead)
        if result.closed:
            self.swept += result.closed
            log.warning(
                "audit records of a dead gateway process closed",
                instances=result.instances,
                records=result.closed,
                tokens=sum(c.tokens for c in result.charges),
            )
        for charge in result.charges:
            await self._count(charge)
        return result.closed

    async def _take_orphans(self, directory: Path) -> list[str]:
        """Each dead process's last counts into its pending records, which are then swept at
        once (its heartbeat backdated) rather than after `instance_stale_s`; returns the
        instances taken in."""
        taken: list[str] = []
        for orphan in orphans(directory):
            try:
                await self._ledger.checkpoint(orphan.instance_id, orphan.points)
                await self._ledger.retire(orphan.instance_id)
            except Exception as exc:
                os.close(orphan.fd)  # kept for the next tick
                log.warning("a dead process's journal not taken in", error=str(exc))
                continue
            orphan.remove()
            log.info(
                "journal of a dead gateway process taken in",
                instance=orphan.instance_id,
                requests=len(orphan.points),
            )
            taken.append(orphan.instance_id)
        return taken

    async def _count(self, charge: Charge) -> None:
        """The swept tokens, added to the limit counters (no lease of ours to release)."""
        at = charge.at.timestamp()
        start = (charge.period_start or charge.at).timestamp()
        ticket = Ticket(
            user=limit_key(charge.user_id),
            reserved_tokens=0,
            period_start=start,
            lease_id=f"swept-{uuid4().hex}",
            admitted_at=at,
            lease_expires=at,
            period_seconds=charge.period_days * DAY_SECONDS,
            origin="redis",
        )
        try:
            await self._limits.settle(ticket, charge.tokens, at)
        except Exception as exc:
            log.warning("swept tokens not counted in the limits", error=str(exc))
