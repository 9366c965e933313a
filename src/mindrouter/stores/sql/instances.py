"""Gateway processes and their heartbeats, the checkpoints of their streams, and the sweeper that
closes what a dead one left open.

Each process registers a row at start and renews its `heartbeat_at` every few seconds; in the
same transaction it writes the tokens each of its requests in flight has produced so far into
its `pending` audit record (the checkpoint). A row whose heartbeat is older than the stale bound
belongs to a process that was killed (or stopped: a clean stop backdates its own heartbeat, so
anything it could not complete is swept at once). `sweep` closes such a process's `pending`
records as `interrupted`, charging each the tokens of its last checkpoint (`audit_close.py`),
then deletes the row. Heartbeats use each process's wall clock, so the replicas' clocks must
agree to well within the bound (NTP does).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from sqlalchemy import bindparam, delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from mindrouter.stores.records import Checkpoint, SweepResult
from mindrouter.stores.sql.audit_close import interrupt_records
from mindrouter.stores.sql.schema import audit_records, instances

SWEEP_BATCH = 500
_LONG_AGO = datetime(2000, 1, 1, tzinfo=UTC)

_CHECKPOINT = (
    update(audit_records)
    .where(
        audit_records.c.uuid == bindparam("b_uuid"),
        audit_records.c.instance_id == bindparam("b_instance"),
        audit_records.c.status == "pending",
    )
    .values(input_tokens=bindparam("b_input"), output_tokens=bindparam("b_output"))
)


class SqlInstances:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def register(self, instance_id: str, host: str, pid: int, now: datetime) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                insert(instances).values(
                    id=instance_id, host=host[:200], pid=pid, started_at=now, heartbeat_at=now
                )
            )

    async def heartbeat(
        self,
        instance_id: str,
        host: str,
        pid: int,
        now: datetime,
        checkpoints: Sequence[Checkpoint],
        stale_s: float | None = None,
    ) -> list[str]:
        """Renews the heartbeat and writes the checkpoints; with `stale_s`, also returns, read
        in the same transaction (one checkout, not two, every `heartbeat_s`), the processes
        whose heartbeat is older than that: what `sweep` is to close."""
        async with self.engine.begin() as conn:
            done = await conn.execute(
                update(instances).where(instances.c.id == instance_id).values(heartbeat_at=now)
            )
            if done.rowcount == 0:
                # Swept after a stall longer than the bound (the database was out of reach):
                # the records it closed stay closed; the requests from now on are ours again.
                await conn.execute(
                    insert(instances).values(
                        id=instance_id, host=host[:200], pid=pid, started_at=now, heartbeat_at=now
                    )
                )
            await _checkpoint(conn, instance_id, checkpoints)
            if stale_s is None:
                return []
            return await _stale(conn, now, stale_s)

    async def checkpoint(self, instance_id: str, checkpoints: Sequence[Checkpoint]) -> None:
        """The tokens so far of `instance_id`'s requests in flight, into their pending records
        (the last ones of a dead process, from its journal)."""
        async with self.engine.begin() as conn:
            await _checkpoint(conn, instance_id, checkpoints)

    async def retire(self, instance_id: str) -> None:
        """At a clean stop: the heartbeat is backdated, so a record this process could not
        complete is swept at once, and the row goes with the next sweep."""
        async with self.engine.begin() as conn:
            await conn.execute(
                update(instances)
                .where(instances.c.id == instance_id)
                .values(heartbeat_at=_LONG_AGO)
            )

    async def sweep(
        self, now: datetime, stale_s: float, dead: Sequence[str] | None = None
    ) -> SweepResult:
        """Closes what the processes stale at `now` left open: `dead`, as `heartbeat` found
        them, or read here."""
        cutoff = now - timedelta(seconds=stale_s)
        if dead is None:
            async with self.engine.connect() as conn:
                dead = await _stale(conn, now, stale_s)
        result = SweepResult(list(dead), 0, [])
        for instance_id in dead:
            while True:
                async with self.engine.begin() as conn:
                    found, closed, charges = await interrupt_records(
                        conn, instance_id, now, SWEEP_BATCH
                    )
                    if found < SWEEP_BATCH:
                        # Only while still stale: a process that came back renews its row.
                        await conn.execute(
                            delete(instances).where(
                                instances.c.id == instance_id, instances.c.heartbeat_at < cutoff
                            )
                        )
                result.closed += closed
                result.charges.extend(charges)
                if found < SWEEP_BATCH:
                    break
        return result


async def _stale(conn: AsyncConnection, now: datetime, stale_s: float) -> list[str]:
    cutoff = now - timedelta(seconds=stale_s)
    rows = await conn.execute(select(instances.c.id).where(instances.c.heartbeat_at < cutoff))
    return list(rows.scalars().all())


async def _checkpoint(
    conn: AsyncConnection, instance_id: str, checkpoints: Sequence[Checkpoint]
) -> None:
    if checkpoints:
        await conn.execute(
            _CHECKPOINT,
            [
                {
                    "b_uuid": c.uuid,
                    "b_instance": instance_id,
                    "b_input": c.input_tokens,
                    "b_output": c.output_tokens,
                }
                for c in checkpoints
            ],
        )
