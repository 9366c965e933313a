"""Admin views of routing and scheduling: backend states (health, breaker, load, models), drain
and undrain, the fair queue per model and per user, and the scores of recent routing decisions."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from mindrouter.errors import Forbidden
from mindrouter.http.common import json_response
from mindrouter.http.entry import Entry
from mindrouter.pipeline.context import RequestContext
from mindrouter.pipeline.gateway import Gateway
from mindrouter.routing.catalog import STRUCTURED_OUTPUT, BackendState


def backend_view(b: BackendState, now: float) -> dict[str, Any]:
    return {
        "name": b.name,
        "engine": b.config.engine,
        "gpu": b.config.gpu,
        "status": b.status,
        "in_flight": b.in_flight,
        # The other gateway processes' open requests, as last exchanged (with Redis).
        "others_in_flight": b.others_in_flight,
        "max_concurrent": b.config.max_concurrent,
        "engine_waiting": b.waiting,
        "priority": b.config.priority,
        "models": dict(b.serves),
        "loaded": sorted(b.loaded),
        "ttft_ema_s": b.ttft_ema,
        "tpot_ema_s": b.tpot_ema,
        "structured_output": STRUCTURED_OUTPUT in b.features,
        "breaker": {
            "state": b.breaker.state(now),
            "consecutive_failures": b.breaker.failures,
            "reopens_in_s": max(0.0, b.breaker.open_until - now) or None,
            "opened_total": b.breaker.opened_total,
            # Shared: the state is kept in step with every other gateway process through Redis.
            "shared": b.breaker.unsent is not None,
        },
        "last_error": b.last_error,
    }


# Drains a backend (True) or takes it back (False) in every process; NotFound for no such one.
SetDraining = Callable[[str, bool], Awaitable[BackendState]]


def routing_admin_routes(gateway: Gateway, set_draining: SetDraining) -> list[BaseRoute]:
    entry = Entry(gateway, "openai")

    def admin(ctx: RequestContext) -> None:
        assert ctx.principal is not None
        if not ctx.principal.is_admin:
            raise Forbidden("this endpoint needs an admin API key")

    @entry.with_request
    async def backends(ctx: RequestContext, request: Request) -> Response:
        admin(ctx)
        now = gateway.views.now()
        return json_response(
            {"data": [backend_view(b, now) for b in gateway.catalog.backends]}, ctx
        )

    async def drained(ctx: RequestContext, request: Request, draining: bool) -> Response:
        admin(ctx)
        b = await set_draining(request.path_params["name"], draining)
        return json_response(backend_view(b, gateway.views.now()), ctx)

    @entry.with_request
    async def drain(ctx: RequestContext, request: Request) -> Response:
        return await drained(ctx, request, True)

    @entry.with_request
    async def undrain(ctx: RequestContext, request: Request) -> Response:
        return await drained(ctx, request, False)

    @entry.with_request
    async def queue(ctx: RequestContext, request: Request) -> Response:
        admin(ctx)
        views = gateway.views
        snap = dataclasses.asdict(views.queue())
        snap["recent_decisions"] = views.recent_decisions()
        elsewhere = views.elsewhere()
        if elsewhere is not None:
            snap["elsewhere"] = {
                "best_waiting": {m: s._asdict() for m, s in elsewhere.best_waiting.items()},
                "slots_left_for_others": elsewhere.slots_left_for_others,
            }
        return json_response(snap, ctx)

    return [
        Route("/admin/routing/backends", backends, methods=["GET"]),
        Route("/admin/routing/backends/{name}/drain", drain, methods=["POST"]),
        Route("/admin/routing/backends/{name}/undrain", undrain, methods=["POST"]),
        Route("/admin/queue", queue, methods=["GET"]),
    ]
