"""Models as a caller sees them: only those their rules of access allow.

A model the caller may not use is answered exactly as one that does not exist (the dialect's
model-not-found error, with the same message), so a caller learns nothing about models beyond
their reach; the refusal itself is written to the audit trail, where an administrator sees it.
"""

from __future__ import annotations

from datetime import UTC, datetime

from mindrouter.errors import ModelNotFound
from mindrouter.identity.access import may_use
from mindrouter.observability.logging import log
from mindrouter.pipeline.audit import audit_start
from mindrouter.pipeline.context import RequestContext
from mindrouter.pipeline.services import Services
from mindrouter.routing.catalog import ModelSpec
from mindrouter.stores.audit_records import AuditOutcome


def visible_models(services: Services, ctx: RequestContext) -> list[ModelSpec]:
    """The served models the caller may use, in catalog order."""
    assert ctx.principal is not None
    rules = ctx.principal.access
    return [spec for spec in services.catalog.models() if may_use(rules, spec)]


async def resolve_allowed(services: Services, ctx: RequestContext, name: str) -> ModelSpec:
    """The model `name` names, when the caller may use it; ModelNotFound otherwise."""
    spec = services.catalog.resolve(name)
    p = ctx.principal
    assert p is not None
    if may_use(p.access, spec):
        return spec
    start = audit_start(services, ctx, name)
    try:
        await services.audit.begin(start)
    except Exception as exc:
        # The answer stays the not-found one: an audit failure must not tell the caller more.
        log.error("audit record of a refused model not written", error=str(exc), model=name)
    else:
        services.audit.complete(
            start.uuid,
            AuditOutcome(
                status="error",
                error_message=f"model {spec.name!r} is not available to group {p.group_name!r}",
                completed_at=datetime.now(UTC),
            ),
        )
    raise ModelNotFound(name)
