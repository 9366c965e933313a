"""The ports the request path talks to, each declared here once.

Each is as small as the caller's need, so a stage can be tested against an in-memory fake:

    KeyLookup     authenticate: keys by prefix, the auth epoch, last-used times
    AuditSink     audit: begin (durable before the request runs), complete (queued)
    UsageLedger   account: a user's period and lifetime token counters, and their last minute
                  of admissions and requests in flight, loaded into the limit store
    BreakerBoard  route: the circuit breakers' link to the other gateway processes
    SlotBoard     route and wait: the backend slots shared with the other gateway processes
    Gate          what the slot board needs of the capacity gate
    InstanceLedger
                  recover: this process's heartbeat and checkpoints, the dead ones' sweep

The first three and the instance ledger are implemented by `stores.sql`; the boards by
`stores.breakers` and `stores.slots` through Redis, and by the stand-ins of `stores.shared` in a
single process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol

from mindrouter.routing.catalog import BackendState
from mindrouter.scheduling import Arbiter, Standing
from mindrouter.stores.audit_records import AuditOutcome, AuditStart
from mindrouter.stores.records import Checkpoint, KeyRecord, SweepResult, UsageCounters


class KeyLookup(Protocol):
    async def find_keys(self, prefix: str) -> Sequence[KeyRecord]:
        """Every key whose stored prefix is `prefix` (normally one), joined with user and group."""
        ...

    async def auth_epoch(self) -> int:
        """A counter bumped with every change that can invalidate a verified key."""
        ...

    async def record_key_use(self, uses: Mapping[int, datetime]) -> None:
        """Sets last-used times, key id -> time; written in batches, off the request path."""
        ...


class AuditSink(Protocol):
    def begin(self, record: AuditStart) -> asyncio.Future[None]:
        """Queues the record's start: the future is done once it is committed, failed if it
        could not be; cancelling it does not take the record back."""
        ...

    def complete(self, uuid: str, outcome: AuditOutcome) -> None:
        """Queues the outcome of a begun record; written soon after, never lost on shutdown."""
        ...


class UsageLedger(Protocol):
    async def get_usage(self, user_id: int, now: datetime | None = None) -> UsageCounters:
        """The counters as of `now` (a period that has ended reads as empty)."""
        ...

    async def recent_activity(self, user_id: int, now: datetime) -> tuple[list[datetime], int]:
        """The admission times of the user's last minute before `now`, and how many of their
        requests are still in flight."""
        ...


class BreakerBoard(Protocol):
    """The circuit breakers' link to the other gateway processes."""

    async def claim_probe(self, backend: BackendState) -> bool:
        """Whether this process may send the half-open probe it has claimed locally."""
        ...

    def changed(self) -> None:
        """A breaker recorded something worth telling the other processes now."""
        ...

    async def track(self, backends: Sequence[BackendState]) -> None:
        """Shares the breakers of `backends` from now on (the catalog changed)."""
        ...


class Gate(Protocol):
    """What the slot board needs of the capacity gate: its best waiters, and a nudge to decide."""

    @property
    def handing_over(self) -> bool: ...

    def best_waiting(self) -> dict[str, Standing]: ...

    def release(self, model: str) -> None: ...


class SlotBoard(Arbiter, Protocol):
    """The backend slots shared with the other gateway processes, and the arbiter of free ones
    (`defer`, asked by the capacity gate)."""

    @property
    def shared(self) -> bool:
        """Whether other processes take part (False for a single process's stand-in)."""
        ...

    def attach(self, gate: Gate) -> None:
        """The gate whose waiters this process publishes and which decides after exchanges."""
        ...

    async def track(self, backends: Sequence[BackendState]) -> None:
        """Counts the slots of `backends` from now on (the catalog changed)."""
        ...

    def changed(self, backend: BackendState) -> None:
        """A slot of `backend` was taken or given back here."""
        ...

    def others_best(self) -> dict[str, Standing]:
        """model -> the most deserving waiter of the other processes."""
        ...


class InstanceLedger(Protocol):
    """This process's row among the gateway processes, and the sweep of the dead ones'
    pending records (`pipeline.recovery`)."""

    async def register(self, instance_id: str, host: str, pid: int, now: datetime) -> None: ...

    async def heartbeat(
        self,
        instance_id: str,
        host: str,
        pid: int,
        now: datetime,
        checkpoints: list[Checkpoint],
        stale_s: float | None = None,
    ) -> list[str]: ...

    async def checkpoint(self, instance_id: str, checkpoints: list[Checkpoint]) -> None: ...

    async def retire(self, instance_id: str) -> None: ...

    async def sweep(
        self, now: datetime, stale_s: float, dead: Sequence[str] | None = None
    ) -> SweepResult: ...
