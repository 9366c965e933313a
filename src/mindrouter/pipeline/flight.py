"""One request's passage through the gated stages: admit, audit, schedule — and the clean-up.

`open_flight` is the request's one scope: it runs stages 4–6 (limits, the durable audit record,
the fair gate) on entry; inside it the caller dispatches, holding a backend slot through
`take()`, and says how the request ended (`end()`, or by raising); on exit, however the request
ended, it runs stage 12 in a task that cancellation cannot interrupt:

    1. release the backend slot and let the fair gate hand it to the next waiter
    2. mark the model as loaded
    3. complete the audit record (which charges the durable usage in the same transaction)
    4. settle the limit counters (quota; Redis when configured)
    5. the request's metrics and its final log line (`outcome.py`), once it was scheduled: one
       refused before that is the edge's refusal

While it runs, the request is tracked by the process's `Recovery`, whose heartbeat checkpoints
the tokens produced so far into the pending audit record.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any, Literal

from mindrouter.canonical import (
    AnyRequest,
    ChatRequest,
    CompletionRequest,
    EmbeddingRequest,
    ImagePart,
    StreamEvent,
    Usage,
)
from mindrouter.errors import InternalError, MindRouterError, Overloaded
from mindrouter.observability.logging import log
from mindrouter.pipeline.context import RequestContext
from mindrouter.pipeline.fit import estimate_limit, refuse_far_over
from mindrouter.pipeline.outcome import record_outcome
from mindrouter.pipeline.services import Services
from mindrouter.pipeline.tally import Tally
from mindrouter.pipeline.usage_sync import limit_key
from mindrouter.routing.catalog import BackendState, ModelSpec, required_features
from mindrouter.scheduling import Job
from mindrouter.stores.audit_records import AuditOutcome, AuditStart
from mindrouter.stores.limits import Limits, Ticket, UsageNotLoaded
from mindrouter.tokens import (
    estimate_chat_input,
    estimate_completion_input,
    estimate_embedding_input,
    estimate_relevance_input,
)

Status = Literal["ok", "error", "cancelled"]

# What a request is assumed to generate when it does not say (for reservations and the queue).
DEFAULT_OUTPUT_ESTIMATE = 512

# Clean-up tasks are kept referenced until they finish: cancellation of the request must not
# let them be garbage-collected half way.
_CLOSING: set[asyncio.Task[None]] = set()


async def wait_for_closing() -> None:
    """Waits for the clean-ups under way (at shutdown, before the stores close)."""
    if _CLOSING:
        await asyncio.gather(*list(_CLOSING), return_exceptions=True)


# Above this many characters of text, counting the input's tokens (about 12 ms per 100 KB here)
# runs in a worker thread, where tiktoken releases the GIL, instead of holding up the event loop.
OFF_LOOP_CHARS = 32_768


def estimate_input(req: AnyRequest, limit: int | None = None) -> int:
    """The input estimate; chat and completion counting stops past `limit` (fit.py)."""
    if isinstance(req, ChatRequest):
        return estimate_chat_input(req, limit)
    if isinstance(req, CompletionRequest):
        return estimate_completion_input(req, limit)
    if isinstance(req, EmbeddingRequest):
        return estimate_embedding_input(req)
    return estimate_relevance_input(req)


def text_size(req: AnyRequest) -> int:
    """Roughly how many characters the estimate has to tokenize (cheap to compute)."""
    if isinstance(req, ChatRequest):
        size = sum(len(m.text()) + len(m.reasoning or "") for m in req.messages)
        size += sum(len(c.arguments) for m in req.messages for c in m.tool_calls)
        return size + sum(len(t.description or "") + len(repr(t.parameters)) for t in req.tools)
    if isinstance(req, CompletionRequest):
        return sum(len(p) for p in req.prompt)
    if isinstance(req, EmbeddingRequest):
        return sum(len(i) for i in req.inputs if isinstance(i, str))
    return sum(len(q) for q in req.queries) + sum(len(d) for d in req.documents)


async def estimate_input_off_loop(req: AnyRequest, limit: int | None = None) -> int:
    if text_size(req) < OFF_LOOP_CHARS:
        return estimate_input(req, limit)
    return await asyncio.to_thread(estimate_input, req, limit)


def estimate_output(req: AnyRequest) -> int:
    if isinstance(req, ChatRequest | CompletionRequest):
        requested = req.sampling.max_tokens
        return requested if requested is not None else DEFAULT_OUTPUT_ESTIMATE
    return 0


def audit_messages(req: AnyRequest) -> Any:
    """The conversation as plain JSON, whatever dialect it came in."""
    if isinstance(req, ChatRequest):
        out = []
        for m in req.messages:
            item: dict[str, Any] = {"role": m.role, "content": m.text()}
            images = [p for p in m.content if isinstance(p, ImagePart)]
            if images:
                item["images"] = len(images)
            if m.reasoning:
                item["reasoning"] = m.reasoning
            if m.tool_calls:
                item["tool_calls"] = [
                    {"id": c.id, "name": c.name, "arguments": c.arguments} for c in m.tool_calls
                ]
            if m.tool_call_id:
                item["tool_call_id"] = m.tool_call_id
            out.append(item)
        return out
    if isinstance(req, CompletionRequest):
        return [{"role": "prompt", "content": p} for p in req.prompt]
    if isinstance(req, EmbeddingRequest):
        return [
            {"role": "input", "content": i if isinstance(i, str) else f"<{len(i)} token ids>"}
            for i in req.inputs
        ]
    return [{"role": "query", "content": q} for q in req.queries] + [
        {"role": "document", "content": d} for d in req.documents
    ]


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
        self._audit: AuditStart | None = None
        self._begin: asyncio.Future[None] | None = None  # the audit record being committed
        self.job: Job | None = None
        self.backend: BackendState | None = None
        self.queued_ms: float | None = None
        self.tally = Tally()  # of the current attempt
        # How the request ended, as `end()` says; otherwise what it raised, or "cancelled".
        self.status: Status | None = None
        self.error: MindRouterError | None = None
        self.usage: Usage | None = None
        self.output: str | None = None

    # -- stages 4 to 6 --------------------------------------------------------------------------

    async def open(self) -> None:
        p = self.principal
        s = self.s
        if isinstance(self.req, ChatRequest | CompletionRequest):
            self.est_input = await estimate_input_off_loop(self.req, estimate_limit(self.spec))
            refuse_far_over(self.spec, self.est_input)
        else:
            self.est_input = await estimate_input_off_loop(self.req)
        await s.usage.ensure_seeded(p.user_id)
        limits = Limits(p.token_budget, p.rpm, p.max_concurrent, p.budget_period_days)
        estimate = self.est_input + self.est_output
        try:
            self.ticket = await s.limits.admit(limit_key(p.user_id), limits, estimate, s.wall())
        except UsageNotLoaded:
            await s.usage.reload(p.user_id)
            self.ticket = await s.limits.admit(limit_key(p.user_id), limits, estimate, s.wall())
        if s.leases is not None:
            s.leases.hold(self.ticket)
        start = AuditStart(
            user_id=p.user_id,
            user_name=p.user_name,
            key_id=p.key_id,
            key_prefix=p.key_prefix,
            model=self.spec.name,
            endpoint=self.ctx.endpoint,
            messages=audit_messages(self.req),
            stream=bool(getattr(self.req, "stream", False)),
            client_ip=self.ctx.client_ip,
            user_agent=self.ctx.user_agent,
            request_id=self.ctx.request_id,
            instance_id=s.recovery.instance_id if s.recovery is not None else None,
        )
        # The record is committed while the request waits for a slot, so that it has its place
        # in the queue at once; `recorded` keeps it from reaching a backend before the record.
        self._audit = start
        self._begin = asyncio.ensure_future(s.audit.begin(start))
        if s.recovery is not None:
            s.recovery.track(start.uuid, lambda: self.tally.used(self.est_input))
        await self._schedule(self._begin)

    async def recorded(self) -> None:
        """Returns once the audit record is committed (raises if it could not be): called with
        the backend slot taken, before anything is sent to the backend."""
        if self._begin is not None:
            await self._begin

    async def _audit_uuid(self) -> str | None:
        """The committed audit record's id, once its commit has ended; None if it failed."""
        begin = self._begin
        if begin is None or self._audit is None:
            return None
        with contextlib.suppress(BaseException):
            await begin
        if not begin.done() or begin.cancelled() or begin.exception() is not None:
            return None
        return self._audit.uuid

    async def _schedule(self, ready: asyncio.Future[None]) -> None:
        s = self.s
        modality = self.req.modality
        job = Job(
            id=self.ctx.request_id,
            user=limit_key(self.principal.user_id),
            model=self.spec.name,
            weight=self.principal.scheduler_weight,
            est_prompt_tokens=self.est_input,
            est_output_tokens=self.est_output,
            modality="chat" if modality == "completion" else modality,
            enqueued_at=s.clock(),
            requires=self.requires,
        )
        try:
            await s.gate.acquire(job, self._has_capacity, timeout=s.capacity_wait, ready=ready)
        except TimeoutError:
            raise Overloaded(
                f"no backend had room for model '{self.spec.name}' within "
                f"{s.capacity_wait:g} s; the cluster is busy, try again shortly"
            ) from None
        self.job = job
        self.ctx.queued_s = s.clock() - job.enqueued_at
        self.queued_ms = self.ctx.queued_s * 1000

    def _has_capacity(self, model: str, requires: frozenset[str]) -> bool:
        return self.s.catalog.has_room(model, requires, self.s.clock())

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
        b = self.backend
        if b is not None:
            b.in_flight -= 1
            self.backend = None
            self.s.slots.changed(b)
            for model in b.serves:
                if model != self.spec.name:
                    self.s.gate.release(model)

    def see(self, event: StreamEvent) -> None:
        """An event of the current attempt: tallied, and its output charged to the fair queue."""
        tokens = self.tally.see(event)
        if self.job is not None and tokens > 0:
            self.s.gate.queue.charge(self.job, tokens)

    # -- stage 12 -------------------------------------------------------------------------------

    def end(
        self,
        status: Status,
        error: MindRouterError | None = None,
        usage: Usage | None = None,
        output: str | None = None,
    ) -> None:
        """How the request ended. `usage` and `output` default to what the last attempt
        produced (partial when it broke off or the client left)."""
        self.status, self.error, self.usage, self.output = status, error, usage, output

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
        tally = self.tally
        usage = self.usage if self.usage is not None else tally.used(self.est_input)
        output = self.output
        if output is None and (tally.produced or tally.usage is not None):
            output = tally.text
        task = asyncio.ensure_future(
            self._close(self.status or "cancelled", usage, output, self.error)
        )
        _CLOSING.add(task)
        task.add_done_callback(_CLOSING.discard)
        await asyncio.shield(task)

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
        # 1. The slot first, so the next waiter can start while we write records.
        served_by = self.backend
        self.drop()
        if self.job is not None:
            s.gate.finish(self.job, used_in, used_out)
        # 2. The model is resident on the backend that served it.
        if status == "ok" and served_by is not None:
            s.catalog.mark_used(self.spec.name, s.clock())
            served_by.loaded.add(self.spec.name)
        # 3. The audit record (its commit may still be under way if the request failed early),
        # with the usage charge.
        if s.recovery is not None and self._audit is not None:
            s.recovery.untrack(self._audit.uuid)
        audit_uuid = await self._audit_uuid()
        ticket = self.ticket
        if audit_uuid is not None:
            now = s.clock()
            first = self.ctx.first_token_at
            s.audit.complete(
                audit_uuid,
                AuditOutcome(
                    status=status,
                    output=output,
                    input_tokens=used_in if used else None,
                    output_tokens=used_out if used else None,
                    error_message=error.message if error else None,
                    backend=self.ctx.backend,
                    attempts=self.ctx.attempts,
                    queued_ms=self.queued_ms,
                    first_token_ms=(first - self.ctx.received_at) * 1000 if first else None,
                    total_ms=(now - self.ctx.received_at) * 1000,
                    completed_at=datetime.now(UTC),
                    period_start=(
                        datetime.fromtimestamp(ticket.period_start, UTC) if ticket else None
                    ),
                ),
            )
        # 4. The quota counters.
        if ticket is not None:
            if s.leases is not None:
                s.leases.release(ticket)
            try:
                await s.limits.settle(ticket, used, s.wall())
            except Exception as exc:
                log.error("settling limits failed", error=str(exc), tokens=used)
        # 5. The request's metrics and log line.
        if self.job is not None:
            record_outcome(s.metrics, self.ctx, self.req.model, status, usage, error=error)


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
