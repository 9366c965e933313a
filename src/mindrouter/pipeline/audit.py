"""Stage 6: the request's durable audit record, begun on admission and completed at its end.

The record is committed while the request waits for a slot, so that it has its place in the
queue at once; nothing reaches a backend before the commit (`AuditRecord.recorded`). While the
request runs, the process's `Recovery` checkpoints the tokens produced so far into the pending
record; the clean-up completes it with how the request ended, which charges the durable usage in
the same transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson

from mindrouter.canonical import (
    AnyRequest,
    AnyResult,
    ChatRequest,
    CompletionRequest,
    EmbeddingRequest,
    EmbeddingResult,
    ImagePart,
    RelevanceResult,
    Usage,
)
from mindrouter.errors import MindRouterError
from mindrouter.pipeline.context import RequestContext
from mindrouter.pipeline.outcome import Status
from mindrouter.pipeline.services import Services
from mindrouter.routing.catalog import ModelSpec
from mindrouter.stores.audit_records import AuditOutcome, AuditStart
from mindrouter.stores.limits import Ticket


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


def output_text(result: AnyResult) -> str | None:
    """What the audit record keeps as the output: the text, or the scores of a rerank."""
    if isinstance(result, EmbeddingResult):
        return None
    if isinstance(result, RelevanceResult):
        return orjson.dumps(result.scores).decode()
    choice = result.first
    calls = "".join(f"\n[tool call {c.name}] {c.arguments}" for c in choice.tool_calls)
    return choice.text + calls


def audit_start(
    s: Services, ctx: RequestContext, model: str, req: AnyRequest | None = None
) -> AuditStart:
    """The start of the caller's record for `model`: who asked, from where, and what (`req`;
    None for a request refused before it is read)."""
    p = ctx.principal
    assert p is not None
    return AuditStart(
        messages=None if req is None else audit_messages(req),
        user_id=p.user_id,
        user_name=p.user_name,
        key_id=p.key_id,
        key_prefix=p.key_prefix,
        model=model,
        stream=bool(getattr(req, "stream", False)),
        endpoint=ctx.endpoint,
        client_ip=ctx.client_ip,
        user_agent=ctx.user_agent,
        request_id=ctx.request_id,
        instance_id=s.recovery.instance_id if s.recovery is not None else None,
    )


class AuditRecord:
    """One request's record, from the commit of its start to its completion."""

    def __init__(
        self,
        s: Services,
        ctx: RequestContext,
        req: AnyRequest,
        spec: ModelSpec,
        progress: Callable[[], Usage | None],
    ) -> None:
        """Starts committing the record; `progress` is what the request has used so far."""
        self.s = s
        self.start = audit_start(s, ctx, spec.name, req)
        self.begun = s.audit.begin(self.start)  # done once its start is committed
        # Its place in the process's journal, rewritten at each output chunk (`Flight.see`).
        self.slot = s.recovery.track(self.start.uuid, progress) if s.recovery else None

    async def recorded(self) -> None:
        """Returns once the record is committed (raises if it could not be). A request
        cancelled meanwhile leaves the commit under way, so that its outcome can follow."""
        await asyncio.shield(self.begun)

    async def _committed(self) -> bool:
        """Whether the record's start was committed, once its commit has ended."""
        begin = self.begun
        with contextlib.suppress(BaseException):
            await asyncio.shield(begin)
        return begin.done() and not begin.cancelled() and begin.exception() is None

    async def complete(
        self,
        ctx: RequestContext,
        status: Status,
        *,
        usage: Usage | None,
        output: str | None,
        error: MindRouterError | None,
        queued_ms: float | None,
        ticket: Ticket | None,
    ) -> None:
        """How the request ended, with the usage charge (its commit may still be under way if
        the request failed early)."""
        s = self.s
        if s.recovery is not None:
            s.recovery.untrack(self.start.uuid, self.slot)
        if not await self._committed():
            return
        used_in = usage.input_tokens if usage else 0
        used_out = usage.output_tokens if usage else 0
        used = used_in + used_out
        now = s.clock()
        first = ctx.first_token_at
        s.audit.complete(
            self.start.uuid,
            AuditOutcome(
                status=status,
                output=output,
                input_tokens=used_in if used else None,
                output_tokens=used_out if used else None,
                error_message=error.message if error else None,
                backend=ctx.backend,
                attempts=ctx.attempts,
                queued_ms=queued_ms,
                first_token_ms=(first - ctx.received_at) * 1000 if first else None,
                total_ms=(now - ctx.received_at) * 1000,
                completed_at=datetime.now(UTC),
                period_start=datetime.fromtimestamp(ticket.period_start, UTC) if ticket else None,
            ),
        )
