"""Audit records written with group commit.

`begin(record)` must not return before the record is committed: the audit trail has to exist
even if inference then crashes or the client goes away. Committing each record on its own
would make every request pay a full transaction (an fsync on SQLite); instead, records that
arrive while a commit is in flight wait for the next one, so a burst of N requests costs a few
transactions, not N. No transaction is held open while requests run.

`complete(uuid, outcome)` only queues; completions are written in batches, one at a time,
always after the begins queued before them (a completion never overtakes the insert it
updates); on PostgreSQL on a connection and in a task of their own, so that no begin waits
behind a batch's round trip (docs/benchmarks.md, "The stores floor"). A batch charges the
records' tokens to their users' usage in the same transaction (`audit_close.py`), and a record a
sweeper closed first is neither overwritten nor charged again. Nobody waits for a completion,
so they are gathered for up to `complete_delay` (50 ms) after the oldest was queued, or until
`max_batch` are queued; a begin never waits for that pause. `written(seconds)` waits until the
outcomes queued so far are in the database (a reload of usage reads them there), without the
pause. `flush()` and `close()` write everything queued at once.

A connection the database dropped fails the first statement sent on it; the batch is then
tried once more on a fresh connection, so the pool needs no ping before every checkout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import insert
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from mindrouter.errors import InternalError
from mindrouter.observability.logging import log
from mindrouter.stores.audit_records import AuditOutcome, AuditStart
from mindrouter.stores.sql.audit_close import close_records
from mindrouter.stores.sql.audit_pg import AuditRowsRejected, PgAuditConnection
from mindrouter.stores.sql.audit_values import outcome_values, start_values
from mindrouter.stores.sql.schema import audit_records
from mindrouter.stores.sql.transactions import DATABASE_ERRORS, unreachable
from mindrouter.tasks import Alarm, pause, release

MAX_BATCH = 500
COMPLETE_DELAY = 0.05
COMPLETE_RETRIES = 5
MAX_RETRY_PAUSE = 5.0
# A record the driver cannot serialise fails with TypeError / ValueError (OverflowError for an
# integer wider than the column: SQLite's driver), before any SQL runs.
WRITE_ERRORS: tuple[type[Exception], ...] = (
    *DATABASE_ERRORS,
    AuditRowsRejected,
    TypeError,
    ValueError,
    OverflowError,
)


@dataclass(slots=True)
class WriterStats:
    begin_batches: int = 0
    begun: int = 0
    complete_batches: int = 0
    completed: int = 0


class AuditWriter:
    def __init__(
        self,
        engine: AsyncEngine,
        *,
        max_batch: int = MAX_BATCH,
        complete_delay: float = COMPLETE_DELAY,
        pg: PgAuditConnection | None = None,
        outcomes_pg: PgAuditConnection | None = None,
    ) -> None:
        self.engine = engine
        # PostgreSQL: straight on asyncpg; the outcomes on a connection of their own (with the
        # server's durability: they carry the usage charges), each batch in a task of its own.
        self.pg = pg
        self.outcomes_pg = outcomes_pg or pg
        self._writing: asyncio.Task[None] | None = None
        self.max_batch = max_batch
        self.complete_delay = complete_delay
        self.stats = WriterStats()
        self._begins: list[tuple[dict[str, Any], asyncio.Future[None]]] = []
        self._completions: list[dict[str, Any]] = []
        self._oldest_completion = 0.0
        self._complete_failures = 0
        # Outcomes ever queued, and how many of them (in queue order) are written or given up
        # on; `written()` waits for the second to reach the first as it was when called.
        self._queued = 0
        self._settled = 0
        self._barriers: list[tuple[int, asyncio.Future[None]]] = []
        self._waiter: asyncio.Future[None] | None = None  # the drain's pause; a begin ends it
        self._pause_due = 0.0  # when the pause under way ends, unless woken before
        self._alarm = Alarm()
        self._urgent = False  # flush() or close() is waiting: no pause for completions
        self._retry: asyncio.Future[None] | None = None  # an outcome task's back-off
        self._drain: asyncio.Task[None] | None = None
        self._closed = False
        self._stopping = False  # flush_final(): the process stops, no waiting for the database

    @property
    def _own_outcomes(self) -> bool:
        """Whether outcome batches go on a connection, and so in a task, of their own."""
        return self.outcomes_pg is not self.pg

    def begin(self, record: AuditStart) -> asyncio.Future[None]:
        """Queues the record's start; the future is done once it is committed and fails with
        InternalError if it could not be. The record is written whatever becomes of the future:
        a caller that goes away (cancelling its await) does not take it back."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        if self._closed:
            future.set_exception(InternalError("the audit writer is closed"))
            return future
        self._begins.append((start_values(record), future))
        if len(self._begins) == 1:
            # The writer is started at the end of this turn of the event loop, so that the
            # requests this turn handles share one transaction.
            loop.call_soon(self._kick)
        return future

    def complete(self, uuid: str, outcome: AuditOutcome) -> None:
        """Queues the outcome; written soon after by the drain task, at the latest by close()."""
        if not self._completions:
            self._oldest_completion = asyncio.get_running_loop().time()
        self._completions.append(outcome_values(uuid, outcome))
        self._queued += 1
        if self._drain is None or self._drain.done():
            self._drain = asyncio.create_task(self._run(), name="audit-writer")

    async def flush(self) -> None:
        """Waits until everything queued so far has been written (or given up on)."""
        self._urgent = True
        self._hurry()
        try:
            # The drain task, then an outcome batch's task that outlived it (it failed).
            while task := next(
                (t for t in (self._drain, self._writing) if t is not None and not t.done()), None
            ):
                await asyncio.shield(task)
        finally:
            self._urgent = False

    async def written(self, seconds: float) -> bool:
        """Waits until the outcomes queued so far are written or given up on, at most
        `seconds`; whether they were. Unlike flush(), later outcomes are not waited for."""
        target = self._queued
        if self._settled >= target:
            return True
        barrier = (target, asyncio.get_running_loop().create_future())
        self._barriers.append(barrier)
        self._hurry()  # no gathering pause, nor back-off, while someone waits
        try:
            await pause(barrier[1], seconds)
        finally:
            self._barriers.remove(barrier)
        return self._settled >= target

    def _settle_outcomes(self, count: int) -> None:
        self._settled += count
        for target, waiter in self._barriers:
            if target <= self._settled:
                release(waiter)

    async def flush_final(self) -> None:
        """flush() as the process stops: outcomes the database cannot take are given up after a
        few tries (their records stay `pending` for a sweeper); begins are still taken."""
        self._stopping = True
        await self.flush()

    async def close(self) -> None:
        self._closed = True
        await self.flush()
        if self._begins or self._completions:
            self._kick()
            await self.flush()
        self._alarm.cancel()
        await self._close_pg()

    async def _close_pg(self) -> None:
        for conn in {id(c): c for c in (self.pg, self.outcomes_pg) if c is not None}.values():
            await conn.close()

    def _kick(self) -> None:
        self._wake()  # a begin must not wait out the completions' pause
        if self._drain is None or self._drain.done():
            self._drain = asyncio.create_task(self._run(), name="audit-writer")

    def _wake(self) -> None:
        if self._waiter is not None:
            release(self._waiter)

    def _hurry(self) -> None:
        """Someone waits for the outcomes: the drain task's pause and an outcome task's back-off
        end now (a begin only ends the first)."""
        self._wake()
        if self._retry is not None:
            release(self._retry)

    async def _pause_until(self, due: float) -> None:
        """Waits until the loop's time is `due`, or less if woken (by nearly every begin; the
        pause is then taken up again to the same time, its timer kept set by `Alarm`), and not
        at all with begins queued (they may have come while a write was failing)."""
        if self._begins:
            return
        self._pause_due = due
        self._alarm.arm(due, self._pause_over)
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _pause_over(self, now: float) -> float | None:
        if self._waiter is None:
            return None
        if now < self._pause_due:
            return self._pause_due
        self._wake()
        return None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._begins or self._completions or self._writing is not None:
                if self._begins:
                    await self._write_begins()
                    continue
                if self._writing is not None:
                    await self._while_writing(self._writing)
                    continue
                due = self._oldest_completion + self.complete_delay
                hurry = self._urgent or self._barriers
                if not hurry and len(self._completions) < self.max_batch and due > loop.time():
                    await self._pause_until(due)
                    continue
                # The batch is taken now, in this turn: a begin queued after it cannot have its
                # outcome in it, so no outcome is written before its record.
                size = self.max_batch
                batch, self._completions = self._completions[:size], self._completions[size:]
                if self._own_outcomes:
                    self._writing = loop.create_task(self._write_completions(batch))
                    self._writing.add_done_callback(lambda _: self._wake())
                else:
                    await self._write_completions(batch)
                self._oldest_completion = loop.time()
            if self._closed:
                await self._close_pg()  # outcomes queued after close() reopened it
        except BaseException as exc:
            # Cancelled (event loop shutting down) or a bug: nobody may wait forever.
            pending, self._begins = self._begins, []
            for _, future in pending:
                self._settle(future, InternalError("the audit writer stopped"))
            if isinstance(exc, Exception):
                log.error("the audit writer failed", exc_info=exc)
                return
            raise

    async def _while_writing(self, task: asyncio.Task[None]) -> None:
        """Waits for the outcome batch under way in its own task, or less if a begin comes."""
        if not task.done():
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
            if not task.done():
                return
        self._writing = None
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("the audit writer failed", exc_info=exc)

    async def _write_begins(self) -> None:
        batch, self._begins = self._begins[: self.max_batch], self._begins[self.max_batch :]
        try:
            failure = await self._insert([values for values, _ in batch])
            if failure is not None and len(batch) > 1 and not unreachable(failure.__cause__):
                # One bad record (say, messages that cannot be serialised) must not fail the
                # requests that happened to share its transaction: retry each on its own.
                for values, future in batch:
                    self._settle(future, await self._insert([values]))
                return
        except BaseException:
            for _, future in batch:
                self._settle(future, InternalError("the audit writer stopped"))
            raise
        for _, future in batch:
            self._settle(future, failure)

    async def _insert(self, rows: list[dict[str, Any]]) -> Exception | None:
        try:
            if self.pg is not None:
                await self.pg.insert(rows)
            else:

                async def write(conn: AsyncConnection) -> None:
                    await conn.execute(insert(audit_records), rows)

                await self._transaction(write)
        except WRITE_ERRORS as exc:
            log.error("audit records could not be written", error=str(exc), records=len(rows))
            failure = InternalError("the audit record could not be written")
            failure.__cause__ = exc
            return failure
        self.stats.begin_batches += 1
        self.stats.begun += len(rows)
        return None

    async def _update(self, batch: list[dict[str, Any]]) -> None:
        if self.outcomes_pg is not None:
            await self.outcomes_pg.complete(batch)
            return

        async def write(conn: AsyncConnection) -> None:
            await close_records(conn, batch)

        await self._transaction(write)

    async def _complete_one_by_one(self, batch: list[dict[str, Any]]) -> None:
        for n, row in enumerate(batch):
            try:
                await self._update([row])
            except WRITE_ERRORS as exc:
                if unreachable(exc):
                    # The database went away meanwhile: the rest wait for it, as a batch does.
                    self._completions[:0] = batch[n:]
                    self._settle_outcomes(n)
                    return
                log.error("an audit outcome was refused", error=str(exc), uuid=row["b_uuid"])
                continue
            self.stats.complete_batches += 1
            self.stats.completed += 1
        self._settle_outcomes(len(batch))

    async def _transaction(self, work: Callable[[AsyncConnection], Awaitable[None]]) -> None:
        """One transaction; again on a fresh connection if the pooled one had been dropped."""
        try:
            async with self.engine.begin() as conn:
                await work(conn)
        except DBAPIError as exc:
            if not exc.connection_invalidated:
                raise
            log.info("database connection was dropped; writing the audit batch again")
            async with self.engine.begin() as conn:
                await work(conn)

    @staticmethod
    def _settle(future: asyncio.Future[None], failure: Exception | None) -> None:
        if future.done():
            return
        if failure is None:
            future.set_result(None)
        else:
            future.set_exception(failure)
            future.exception()  # a caller that went away has nobody to raise it to

    async def _write_completions(self, batch: list[dict[str, Any]]) -> None:
        try:
            await self._update(batch)
        except Exception as exc:
            if not isinstance(exc, WRITE_ERRORS):  # a bug: the batch is lost, the rest goes on
                log.error("audit outcomes dropped", exc_info=exc, records=len(batch))
                self._settle_outcomes(len(batch))
                return
            if len(batch) > 1 and not unreachable(exc):
                # One outcome the database refuses must not take the others with it.
                await self._complete_one_by_one(batch)
                return
            self._complete_failures += 1
            # While the database is out of reach the outcomes wait (they carry the usage
            # charge); at close or shutdown, or for a batch the database itself refuses, they
            # are given up after a few tries: the records stay `pending`, and once this
            # process's heartbeat lapses a sweeper closes them with their last checkpoint.
            waiting = unreachable(exc) and not (self._closed or self._stopping)
            if self._complete_failures >= COMPLETE_RETRIES and not waiting:
                log.error("audit outcomes dropped", error=str(exc), records=len(batch))
                self._complete_failures = 0
                self._settle_outcomes(len(batch))
                return
            log.warning("audit outcomes not written yet; retrying", error=str(exc))
            self._completions[:0] = batch
            # Back off, but a begin arriving meanwhile is written at once.
            backoff = min(0.1 * 2 ** min(self._complete_failures, 6), MAX_RETRY_PAUSE)
            if self._own_outcomes:  # the begins go on meanwhile; a flush cuts this one short
                self._retry = asyncio.get_running_loop().create_future()
                try:
                    await pause(self._retry, backoff)
                finally:
                    self._retry = None
            else:
                await self._pause_until(asyncio.get_running_loop().time() + backoff)
            return
        self._complete_failures = 0
        self.stats.complete_batches += 1
        self.stats.completed += len(batch)
        self._settle_outcomes(len(batch))
