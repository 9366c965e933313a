"""Composition root: stores, counters, scheduler, adapters and pipeline; mounts the routes.

The app is a Starlette app: the inference routes of every dialect, the probes, the usage and
routing views and the console, under the gateway's own middlewares (`CancelOnDisconnect`
outside, then `Edge`, then `ExactRoutes`, which hands a request for a fixed path to its endpoint
without Starlette's router and exception layers) and its error handlers. A request no route of
it matches goes to the routes of the admin REST API, built with FastAPI (pydantic bodies, the
OpenAPI document), which answer unknown paths too. FastAPI's app would add middleware of its
own to every request (a body-size limit, exception telemetry, an exit stack for uploaded
files); the inference routes use none of it, and it cost about 6 % of a request's CPU when they
went through it.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable

from fastapi import FastAPI
from fastapi.middleware.asyncexitstack import AsyncExitStackMiddleware
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route

from mindrouter.backends.monitor import BackendMonitor
from mindrouter.catalog_sync import CatalogSync
from mindrouter.components import build_adapters, build_catalog, build_limits, build_sharing
from mindrouter.config_reload import ConfigReload, log_sync_report
from mindrouter.console import build_console
from mindrouter.errors import InternalError, InvalidRequest, MindRouterError, NotFound
from mindrouter.http.admin_routes import admin_router
from mindrouter.http.anthropic_routes import anthropic_routes
from mindrouter.http.common import TrustedProxies, json_response, new_context
from mindrouter.http.connections import ConnectionPolicy
from mindrouter.http.disconnect import CancelOnDisconnect
from mindrouter.http.dispatch import ExactRoutes
from mindrouter.http.edge import Edge, MetricsPortEdge
from mindrouter.http.errors import dialect_for_path, error_response, request_id_of
from mindrouter.http.ollama_routes import ollama_routes
from mindrouter.http.openai_routes import openai_routes
from mindrouter.http.relevance_routes import relevance_routes
from mindrouter.http.responses_routes import responses_routes
from mindrouter.http.routing_admin_routes import routing_admin_routes
from mindrouter.http.usage_routes import usage_routes
from mindrouter.identity.authenticate import Authenticator, AuthTuning
from mindrouter.observability.logging import log
from mindrouter.observability.metrics import Metrics
from mindrouter.pipeline.drain import Drain
from mindrouter.pipeline.gateway import Gateway
from mindrouter.pipeline.housekeeping import Chore, Housekeeping
from mindrouter.pipeline.journal import journal_dir
from mindrouter.pipeline.leases import LeaseKeeper
from mindrouter.pipeline.recovery import Recovery
from mindrouter.pipeline.services import Services
from mindrouter.pipeline.usage_sync import UsageSync
from mindrouter.runtime import Runtime, readiness, shutdown
from mindrouter.scheduling import CapacityGate, FairQueue
from mindrouter.settings import Settings
from mindrouter.stores.sql import SqlStores, apply_config, open_stores
from mindrouter.stores.sql.responses import SqlResponseStore
from mindrouter.stores.sql.retention import RETENTION_INTERVAL_S, AuditRetention


def _error_handlers(app: Starlette, metrics: Metrics) -> None:
    async def on_gateway_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, MindRouterError)
        ctx = getattr(request.state, "ctx", None)
        # The route knows its dialect best: `GET /v1/models` answers Anthropic clients too.
        dialect = ctx.dialect if ctx is not None else dialect_for_path(request.url.path)
        if ctx is not None and ctx.outcome is None:
            # Refused before the pipeline ran (bad key, bad body, unknown model ...).
            metrics.requests.labels(dialect, "unknown", "none", "rejected").inc()
            metrics.errors.labels(dialect, "unknown", exc.kind).inc()
            log.info("request refused", endpoint=ctx.endpoint, kind=exc.kind, error=exc.message)
        return error_response(exc, dialect, request_id_of(request))

    async def on_http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        path = request.url.path
        err: MindRouterError
        if exc.status_code == 404:
            err = NotFound(f"no such endpoint: {request.method} {path}")
        elif exc.status_code == 405:
            err = InvalidRequest(f"method {request.method} is not allowed on {path}")
        else:
            err = InvalidRequest(str(exc.detail))
        response = error_response(err, dialect_for_path(path), request_id_of(request))
        if exc.status_code == 405:
            response.status_code = 405
        return response

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        log.error("unhandled error", path=request.url.path, exc_info=exc)
        err = InternalError("the gateway failed to handle this request; it has been logged")
        response = error_response(err, dialect_for_path(request.url.path), request_id_of(request))
        # The server drops the connection after an unhandled error; say so, so that the client
        # does not send its next request on it.
        response.headers["connection"] = "close"
        return response

    app.add_exception_handler(MindRouterError, on_gateway_error)
    app.add_exception_handler(HTTPException, on_http_error)
    app.add_exception_handler(Exception, on_unexpected)


def build_app(
    settings: Settings,
    stores: SqlStores | None = None,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> Starlette:
    """The ASGI app. The database must already be migrated (`serve` checks before calling).

    `clock` is what the request path measures time on (breaker cooldowns, the queue, the
    drain's grace): monotonic seconds; tests move it forward instead of waiting. It is for a
    single process: the stores shared through Redis keep their links' own clock."""
    stores = stores or open_stores(settings.database_url, audit_commit=settings.audit_commit)
    catalog = build_catalog(settings)
    adapters = build_adapters(settings, catalog)
    authenticator = Authenticator(
        stores.keys, tuning=AuthTuning(failures_per_minute=settings.auth_failures_per_minute)
    )
    metrics = Metrics()
    limits = build_limits(settings, metrics)
    usage = UsageSync(stores.usage, limits, stores.audit.written)
    leases = LeaseKeeper(limits, settings.lease_renew_s)
    recovery = Recovery(
        stores.instances,
        limits,
        stale_s=settings.instance_stale_s,
        journal_dir=journal_dir(settings.database_url, settings.journal_dir),
    )
    drain = Drain(settings.shutdown_grace_s, clock)
    sharing = build_sharing(settings, catalog)
    gate = CapacityGate(FairQueue(sharing.fairshare), clock=clock, arbiter=sharing.slots)
    sharing.slots.attach(gate)
    services = Services(
        catalog=catalog,
        adapters=adapters,
        authenticator=authenticator,
        limits=limits,
        audit=stores.audit,
        gate=gate,
        usage=usage,
        metrics=metrics,
        max_attempts=settings.max_attempts,
        capacity_wait=settings.capacity_wait_s,
        score_weights=settings.routing_weights,
        breakers=sharing.breakers,
        slots=sharing.slots,
        leases=leases,
        recovery=recovery,
        draining=drain.expired,
        clock=clock,
    )
    gateway = Gateway(services)
    metrics.watch(catalog, gateway.views.queue_depths, services.clock)
    monitor = BackendMonitor(catalog, interval=settings.health_interval_s)
    catalog_sync = CatalogSync(
        stores.catalog,
        settings,
        catalog,
        adapters,
        monitor,
        gate=gate,
        slots=sharing.slots,
        breakers=sharing.breakers,
    )
    config_reload = ConfigReload(stores, catalog_sync, settings)
    responses = SqlResponseStore(stores.engine, settings.responses_retention_days)
    retention = AuditRetention(stores.audit_log, settings.audit_retention_days)
    housekeeping = _housekeeping(settings, recovery, responses, retention)
    runtime = Runtime(
        stores,
        authenticator,
        limits,
        usage,
        adapters,
        monitor,
        catalog_sync,
        leases,
        drain,
        housekeeping,
        retention,
        recovery,
        sharing,
    )

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        log_sync_report(await apply_config(stores, settings))
        await authenticator.start()
        await recovery.start()
        await catalog_sync.start()
        await leases.start()
        await monitor.start()
        await housekeeping.start()
        await sharing.start()
        try:
            yield
        finally:
            await shutdown(runtime)

    app = Starlette(lifespan=lifespan)
    app.state.gateway = gateway
    app.state.settings = settings
    app.state.runtime = runtime
    app.state.drain = drain
    app.state.config_reload = config_reload
    trusted = _edge(app, settings, authenticator, drain, metrics)
    _probe_routes(app, settings, runtime, drain, metrics)
    _api_routes(app, settings, gateway, stores, responses, catalog_sync, authenticator, trusted)
    app.state.admin_api = _admin_api(settings, stores, authenticator)
    # The admin API's routes answer what no route above matches (unknown paths get their 404
    # there), under this app's middleware and error handlers alone: FastAPI's own stack would
    # handle errors a second time inside the edge. Its routes need only the exit stack.
    app.router.default = AsyncExitStackMiddleware(app.state.admin_api.router)
    return app


def _admin_api(settings: Settings, stores: SqlStores, authenticator: Authenticator) -> FastAPI:
    """The admin REST API: its routes and its OpenAPI document."""
    # FastAPI's OpenTelemetry bridge would look up the global providers on every request; the
    # gateway reports through its own metrics and logs.
    # No HTML docs page: it would load its scripts from a CDN, and a browser cannot send the
    # admin key it needs. The OpenAPI document is for admin keys (or off).
    api = FastAPI(
        title="MindRouter",
        version="0.1.0",
        telemetry={"tracing": False, "metrics": False, "logs": False},
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json" if settings.api_docs == "admin" else None,
    )
    api.include_router(admin_router(stores, authenticator))
    return api


def _api_routes(
    app: Starlette,
    settings: Settings,
    gateway: Gateway,
    stores: SqlStores,
    responses: SqlResponseStore,
    catalog_sync: CatalogSync,
    authenticator: Authenticator,
    trusted: TrustedProxies,
) -> None:
    # The inference routes first: routes are matched in order, and these are the hot ones.
    app.router.routes.extend(openai_routes(gateway, settings))
    app.router.routes.extend(responses_routes(gateway, settings, responses))
    app.router.routes.extend(relevance_routes(gateway))
    app.router.routes.extend(anthropic_routes(gateway, settings))
    app.router.routes.extend(ollama_routes(gateway))
    app.router.routes.extend(usage_routes(gateway, stores))
    app.router.routes.extend(routing_admin_routes(gateway, catalog_sync.set_draining))
    if settings.console.enabled:
        # Last: the console's pages never stand before an API route in the matching order.
        console = build_console(
            settings,
            stores=stores,
            gateway=gateway,
            authenticator=authenticator,
            trusted=trusted,
            set_draining=catalog_sync.set_draining,
        )
        app.router.routes.append(Mount("/console", console))


def _housekeeping(
    settings: Settings,
    recovery: Recovery,
    responses: SqlResponseStore,
    retention: AuditRetention,
) -> Housekeeping:
    return Housekeeping(
        [
            Chore("heartbeat and sweep", settings.heartbeat_s, recovery.tick),
            Chore("expired responses", 3600.0, responses.purge),
            *(
                [Chore("audit retention", RETENTION_INTERVAL_S, retention.purge_once)]
                if retention.days > 0
                else []
            ),
        ]
    )


def _edge(
    app: Starlette, settings: Settings, authenticator: Authenticator, drain: Drain, metrics: Metrics
) -> TrustedProxies:
    """The connection policy, the edge middleware and the error handlers; returns the trusted
    proxies."""
    trusted = TrustedProxies(settings.trusted_proxies)
    app.state.trusted_proxies = trusted
    app.state.connection_policy = ConnectionPolicy(
        header_timeout_s=settings.header_timeout_s,
        max_per_address=settings.max_connections_per_client,
        exempt=trusted.__contains__,
    )
    # Innermost of the gateway's layers: the edge's checks come first.
    app.add_middleware(ExactRoutes, routes=app.router.routes, handlers=app.exception_handlers)
    app.add_middleware(
        Edge,
        authenticator=authenticator,
        max_body_bytes=settings.max_body_bytes,
        body_timeout_s=settings.body_timeout_s,
        trusted_proxies=trusted,
        drain=drain,
        metrics_token=settings.metrics_token,
    )
    _error_handlers(app, metrics)
    app.add_middleware(CancelOnDisconnect)
    return trusted


def _probe_routes(
    app: Starlette, settings: Settings, runtime: Runtime, drain: Drain, metrics: Metrics
) -> None:
    """/healthz, /readyz and /metrics (on the metrics port too, with `metrics_port`)."""

    async def healthz(request: Request) -> Response:
        # The pid tells apart the workers of `serve --workers` behind one port.
        return json_response({"status": "ok", "pid": os.getpid()}, new_context(request, "openai"))

    async def readyz(request: Request) -> Response:
        ctx = new_context(request, "openai")
        if drain.started:
            # Shutting down: out of the load balancer at once, while streams finish.
            return json_response({"status": "draining"}, ctx, 503)
        checks = await readiness(runtime, settings)
        # Backends are reported but do not decide readiness: every replica shares them, so
        # pulling replicas out of a load balancer would not help when all backends are down.
        # With fail_open the gateway serves without Redis, so Redis does not decide either.
        optional = {"backends"} | (
            {"redis"} if settings.redis_unavailable == "fail_open" else set()
        )
        ready = all(v == "ok" for k, v in checks.items() if k not in optional)
        return json_response(
            {"status": "ok" if ready else "unavailable", "checks": checks},
            ctx,
            200 if ready else 503,
        )

    async def prometheus(request: Request) -> Response:
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    # With `metrics_port`, a second listener serves only /metrics; `serve` starts it.
    app.state.metrics_app = MetricsPortEdge(
        Starlette(routes=[Route("/metrics", prometheus, methods=["GET"])]), settings.metrics_token
    )
    app.add_route("/metrics", prometheus, methods=["GET"], include_in_schema=False)
    app.add_route("/healthz", healthz, methods=["GET"], include_in_schema=False)
    app.add_route("/readyz", readyz, methods=["GET"], include_in_schema=False)
