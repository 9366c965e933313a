"""One request's passage through the gated stages, and its clean-up: `Flight` sequences them.

`open_flight` is the request's one scope: on entry it runs stages 4–7 — the estimates
(`estimate.py`), the limits (`admit.py`), the durable audit record (`audit.py`) and the fair
gate (`schedule.py`); inside it the caller dispatches (`dispatch.py`), holding a backend slot
through `take()`, and says how the request ended (`end()`, or by raising); on exit, however the
request ended, it runs stage 12 in a task that cancellation cannot interrupt:

    1. release the backend slot and let the fair gate hand it to the next waiter
    2. mark the model as loaded
    3. complete the audit record (which charges the durable usage in the same transaction)
    4. settle the limit counters (quota; with Redis, sent without waiting for the answer, ahead
       of anything the process sends Redis later, and before the answer's ending is sent)
    5. the request's metrics and its final log line (`outcome.py`), once it was scheduled: one
       refused before that is the edge's refusal

A step that fails (a bug) is logged and the steps after it still run: the audit record and the
charge are never lost to a failure of the bookkeeping before them.

While it runs, the request is tracked by the process's `Recovery`, whose heartbeat checkpoints
the tokens produced so far into the pending audit record.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine, Sequence
from types import TracebackType
from typing import Any

from mindrouter.canonical import AnyRequest, AnyResult, StreamEvent, Usage
from mindrouter.errors import InternalError, MindRouterError
from mindrouter.observability.logging import log
from mindrouter.pipeline.admit import admit, settle
from mindrouter.pipeline.audit import AuditRecord, output_text
from mindrouter.pipeline.context import RequestContext
from mindrouter.pipeline.estimate import estimate_output, estimate_request_input
from mindrouter.pipeline.journal import Journal
from mindrouter.pipeline.outcome import Status, record_outcome
from mindrouter.pipeline.schedule import schedule
from mindrouter.pipeline.services import Services
from mindrouter.pipeline.tally import Tally
from mindrouter.routing.catalog import BackendState, ModelSpec, required_features
from mindrouter.scheduling import Job
from mindrouter.stores.limits import Ticket

# Output tokens are charged to the fair queue in batches, not one stream chunk at a time: when
# this many have gathered, or this long after the last charge (and always before the slot is
# given back). The queue's decisions are about whole requests; a few tokens late changes none.
CHARGE_TOKENS = 16
CHARGE_SECONDS = 0.05

# Clean-up tasks are kept referenced until they finish: cancellation of the request must not
# let them be garbage-collected half way.
_CLOSING: set[asyncio.Task[None]] = set()


async def wait_for_closing() -> None:
    """Waits for the clean-ups under way (at shutdown, before the stores close)."""
    if _CLOSING:
        await asyncio.gather(*list(_CLOSING), return_exceptions=True)


class Flight:
    def __init__(
        self, services: Services, ctx: RequestContext, req: AnyRequest, spec: ModelSpec
    ) -> None:
        assert ctx.principal is not None
        self.s = services
        self.ctx = ctx
        self.req = req
        self.spec = spec
        self.principal = ctx.principal
        self.est_input = 0  # counted by open()
        self.est_output = estimate_output(req)
        self.requires = required_features(req)
        # Refused here, before any admission or waiting, when no backend could ever take it.
        services.catalog.check_features(spec, self.requires)
        self.ticket: Ticket | None = None
        self.audit: AuditRecord | None = None
        self.job: Job | None = None
        self.backend: BackendState | None = None
        self.queued_ms: float | None = None
        self.tally = Tally()  # of the current attempt
        self._journal: Journal | None = None  # with the request's slot in it, once recorded
        self._slot = 0
        self._uncharged = 0  # output tokens not yet charged to the fair queue
        self._charged_at = 0.0
        # How the request ended, as `end()` says; otherwise what it raised, or "cancelled".
        self.status: Status | None = None
        self.error: MindRouterError | None = None
        self.usage: Usage | None = None
        self.output: str | None = None

    # -- stages 4 to 7 --------------------------------------------------------------------------

    async def open(self) -> None:
        s, p = self.s, self.principal
        self.est_input = await estimate_request_input(self.req, self.spec)
        self.ctx.input_estimate = self.est_input
        self.ticket = await admit(s, p, self.est_input + self.est_output)
        self.audit = AuditRecord(
            s, self.ctx, self.req, self.spec, lambda: self.tally.used(self.est_input)
        )
        if self.audit.slot is not None and s.recovery is not None:
            self._journal, self._slot = s.recovery.journal, self.audit.slot
        self.job = await schedule(
            s,
            self.ctx,
            self.req,
            self.spec,
            est_input=self.est_input,
            est_output=self.est_output,
            requires=self.requires,
            ready=self.audit.begun,
        )
        self.queued_ms = self.ctx.queued_s * 1000

    async def recorded(self) -> None:
        """Returns once the audit record is committed (raises if it could not be): called with
        the backend slot taken, before anything is sent to the backend."""
        if self.audit is not None:
            await self.audit.recorded()

    @property
    def deadline(self) -> float:
        """When the request's capacity wait (`capacity_wait_s` from entering the queue) ends:
        until then it may also wait for a backend to come back after it was admitted."""
        start = self.job.enqueued_at if self.job is not None else self.s.clock()
        return start + self.s.capacity_wait

    # -- backend slots --------------------------------------------------------------------------

    def take(self, backend: BackendState) -> None:
        """Hold a slot on `backend` (giving back the one held before, on a retry); a new
        attempt starts a new tally."""
        self.drop()
        self.tally = Tally()
        backend.in_flight += 1
        self.backend = backend
        self.ctx.backend = backend.name
        self.s.slots.changed(backend)

    def drop(self) -> None:
        """Gives back the slot held, after charging the fair queue what is left to charge (so
        the next decision sees it); the slot is given back even if the charge fails."""
        try:
            self._charge()
        finally:
            b = self.backend
            if b is not None:
                b.in_flight -= 1
                self.backend = None
                self.s.slots.changed(b)
                for model in b.serves:
                    if model != self.spec.name:
                        self.s.gate.release(model)

    def see(self, events: Sequence[StreamEvent]) -> None:
        """Events of the current attempt, as one read of the engine brought them: tallied,
        written to the process's journal (what a killed process is charged) and their output
        charged to the fair queue (in batches)."""
        tally = self.tally
        tokens = tally.see(events)
        journal, usage = self._journal, tally.usage
        if journal is not None:
            if usage is not None:
                journal.note(self._slot, usage.input_tokens, usage.output_tokens)
            elif tokens:
                journal.note(self._slot, self.est_input, tally.produced)
        if tokens and self.job is not None:
            self._uncharged += tokens
            if self._uncharged >= CHARGE_TOKENS or (
                self.s.clock() - self._charged_at >= CHARGE_SECONDS
            ):
                self._charge()

    def _charge(self) -> None:
        tokens, self._uncharged = self._uncharged, 0
        if tokens and self.job is not None:
            self.s.gate.queue.charge(self.job, tokens)
            self._charged_at = self.s.clock()

    # -- stage 12 -------------------------------------------------------------------------------

    def end(self, status: Status, error: MindRouterError | None = None) -> None:
        """How the request ended; its usage and output are what the last attempt produced
        (partial when it broke off or the client left)."""
        self.status, self.error = status, error

    def answered(self, result: AnyResult) -> None:
        """The request ended with `result`, whose usage and output are charged and recorded."""
        self.end("ok")
        self.usage, self.output = result.usage, output_text(result)

    def raised(self, exc: BaseException) -> None:
        """The request ended by raising `exc`, unless it had already said how it ended."""
        if self.status is not None:
            return
        if isinstance(exc, asyncio.CancelledError | GeneratorExit):
            self.end("cancelled")
        elif isinstance(exc, MindRouterError):
            self.end("error", exc)
        elif self.job is None:
            # Failed before it was scheduled: the edge logs the failure, the record keeps no
            # message of it.
            self.end("error")
        else:
            self.end("error", InternalError(f"the request failed inside the gateway: {exc}"))

    async def close(self) -> None:
        closing = self._closing()
        if not getattr(self.req, "stream", False) and (
            self.audit is None or self.audit.begun.done()
        ):
            # A whole answer's response waits for its clean-up, and nothing in the clean-up
            # waits once the record's commit is over, so no cancellation can cut it short:
            # run here rather than in a task, which would take two turns of the event loop
            # (the clean-up's median at 200 requests a second 0.23 -> 0.18 ms,
            # docs/benchmarks.md).
            await closing
            return
        # A stream's, or one that may wait for its record's commit: in a task of its own, which
        # a cancelled request cannot stop. A stream's runs there even when nothing in it waits:
        # inline it ends each stream a loop turn sooner, and streams that start together (a
        # closed loop of clients) then stay together; at 128 such streams the inter-chunk
        # gap's p99 grew by 2 ms (bench/results/overhead-requests-tasks.md).
        task = asyncio.ensure_future(closing)
        _CLOSING.add(task)
        task.add_done_callback(_CLOSING.discard)
        await asyncio.shield(task)

    def _closing(self) -> Coroutine[Any, Any, None]:
        """The clean-up, with how the request ended and what it used as they are now."""
        tally = self.tally
        usage = self.usage if self.usage is not None else tally.used(self.est_input)
        output = self.output
        if output is None and (tally.produced or tally.usage is not None):
            with _Step("the output's text"):
                output = tally.text
        return self._close(self.status or "cancelled", usage, output, self.error)

    async def _close(
        self,
        status: Status,
        usage: Usage | None,
        output: str | None,
        error: MindRouterError | None,
    ) -> None:
        s = self.s
        # Whoever ends the request passes what was really used (partial usage included);
        # a request that never produced anything costs nothing.
        used_in = usage.input_tokens if usage else 0
        used_out = usage.output_tokens if usage else 0
        used = used_in + used_out
        # Each step keeps something the others do not: one that fails is logged, and the
        # steps after it still run.
        # 1. The slot first, so the next waiter can start while we write records.
        served_by = self.backend
        with _Step("the backend slot"):
            self.drop()
        if self.job is not None:
            with _Step("the fair gate"):
                s.gate.finish(self.job, used_in, used_out)
        # 2. The model is resident on the backend that served it.
        if status == "ok" and served_by is not None:
            with _Step("the model's residency"):
                s.catalog.mark_used(self.spec.name, s.clock())
                served_by.loaded.add(self.spec.name)
        # 3. The audit record, with the usage charge.
        if self.audit is not None:
            with _Step("the audit record"):
                await self.audit.complete(
                    self.ctx,
                    status,
                    usage=usage,
                    output=output,
                    error=error,
                    queued_ms=self.queued_ms,
                    ticket=self.ticket,
                )
        # 4. The quota counters: the settlement is sent, its answer not waited for.
        if self.ticket is not None:
            with _Step("the limits"):
                settle(s, self.ticket, used)
        # 5. The request's metrics and log line.
        if self.job is not None:
            with _Step("the metrics and log line"):
                record_outcome(s.metrics, self.ctx, self.req.model, status, usage, error=error)


class _Step:
    """One step of a request's clean-up: an exception it raises is logged, not passed on. A
    class rather than `contextlib.contextmanager`, whose generator costs about 1 µs a step
    against 0.15 (seven steps a request)."""

    __slots__ = ("what",)

    def __init__(self, what: str) -> None:
        self.what = what

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        if not isinstance(exc, Exception):
            return False  # none, or a cancellation or exit, which goes on
        log.error("a step of a request's clean-up failed", step=self.what, exc_info=exc)
        return True


@contextlib.asynccontextmanager
async def open_flight(
    services: Services, ctx: RequestContext, req: AnyRequest, spec: ModelSpec
) -> AsyncIterator[Flight]:
    """The request from admission to its clean-up, which runs once on the way out."""
    flight = Flight(services, ctx, req, spec)
    try:
        await flight.open()
        yield flight
    except BaseException as exc:
        flight.raised(exc)
        raise
    finally:
        await flight.close()
