"""Usage and limits: `GET /v1/usage` (own) and `GET /admin/usage/{user}` (anyone's)."""

from __future__ import annotations

import datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from mindrouter.errors import Forbidden
from mindrouter.http.common import json_response
from mindrouter.http.entry import Entry
from mindrouter.identity.principal import effective_limits
from mindrouter.pipeline.context import RequestContext
from mindrouter.pipeline.gateway import Gateway
from mindrouter.stores.limits import Limits, UsageSnapshot
from mindrouter.stores.sql import SqlStores


def _iso(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).isoformat()


def usage_body(user: str, group: str, weight: float, limits: Limits, snap: UsageSnapshot) -> Any:
    period_end = snap.period_start + limits.budget_period_days * 86400
    remaining = (
        None
        if limits.token_budget == 0
        else max(0, limits.token_budget - snap.period_tokens - snap.reserved_tokens)
    )
    return {
        "object": "usage",
        "user": user,
        "group": group,
        "limits": {
            "token_budget": limits.token_budget,
            "rpm": limits.rpm,
            "max_concurrent": limits.max_concurrent,
            "budget_period_days": limits.budget_period_days,
            "scheduler_weight": weight,
        },
        "period_start": _iso(snap.period_start),
        "period_end": _iso(period_end),
        "period_tokens": snap.period_tokens,
        "reserved_tokens": snap.reserved_tokens,
        "remaining_tokens": remaining,
        "lifetime_tokens": snap.lifetime_tokens,
        "in_flight": snap.in_flight,
        "requests_last_minute": snap.requests_last_minute,
    }


def usage_routes(gateway: Gateway, stores: SqlStores) -> list[BaseRoute]:
    entry = Entry(gateway, "openai")

    @entry.with_request
    async def own(ctx: RequestContext, request: Request) -> Response:
        p = ctx.principal
        assert p is not None
        limits = Limits(p.token_budget, p.rpm, p.max_concurrent, p.budget_period_days)
        snap = await gateway.usage_of(p.user_id, limits)
        return json_response(
            usage_body(p.user_name, p.group_name, p.scheduler_weight, limits, snap), ctx
        )

    @entry.with_request
    async def anyone(ctx: RequestContext, request: Request) -> Response:
        assert ctx.principal is not None
        if not ctx.principal.is_admin:
            raise Forbidden("this endpoint needs an admin API key")
        user = await stores.directory.get_user(request.path_params["user"])
        group = await stores.directory.get_group(user.group)
        eff = effective_limits(group.limits, user.overrides)
        limits = Limits(eff.token_budget, eff.rpm, eff.max_concurrent, eff.budget_period_days)
        snap = await gateway.usage_of(user.id, limits)
        return json_response(
            usage_body(user.name, user.group, eff.scheduler_weight, limits, snap), ctx
        )

    return [
        Route("/v1/usage", own, methods=["GET"]),
        Route("/admin/usage/{user}", anyone, methods=["GET"]),
    ]
