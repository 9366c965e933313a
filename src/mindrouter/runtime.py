"""What a running app holds for its lifetime: readiness over it, and the ordered shutdown."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import redis.asyncio as redis_asyncio
from sqlalchemy import text as sql_text

from mindrouter.backends.base import EngineAdapter
from mindrouter.backends.monitor import BackendMonitor
from mindrouter.catalog_sync import CatalogSync
from mindrouter.identity.authenticate import Authenticator
from mindrouter.observability.logging import log
from mindrouter.pipeline.drain import Drain
from mindrouter.pipeline.flight import wait_for_closing
from mindrouter.pipeline.housekeeping import Housekeeping
from mindrouter.pipeline.leases import LeaseKeeper
from mindrouter.pipeline.recovery import Recovery
from mindrouter.pipeline.usage_sync import UsageSync
from mindrouter.settings import Settings
from mindrouter.stores.limits import LimitStore
from mindrouter.stores.shared import Sharing
from mindrouter.stores.sql import SqlStores
from mindrouter.stores.sql.retention import AuditRetention


@dataclass(slots=True)
class Runtime:
    """What the app holds for its lifetime and closes at shutdown."""

    stores: SqlStores
    authenticator: Authenticator
    limits: LimitStore
    usage: UsageSync
    adapters: dict[str, EngineAdapter]
    monitor: BackendMonitor
    catalog_sync: CatalogSync
    leases: LeaseKeeper
    drain: Drain
    housekeeping: Housekeeping
    retention: AuditRetention
    recovery: Recovery
    sharing: Sharing


async def readiness(rt: Runtime, settings: Settings) -> dict[str, str]:
    """The gateway can serve when its database (and Redis, when configured) answer."""
    checks: dict[str, str] = {}
    try:
        async with asyncio.timeout(2):
            async with rt.stores.engine.connect() as conn:
                await conn.execute(sql_text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"unavailable: {type(exc).__name__}"
    if settings.redis_url:
        client = redis_asyncio.from_url(settings.redis_url, socket_timeout=2)
        try:
            await client.ping()
            checks["redis"] = "ok"
        except Exception as exc:
            checks["redis"] = f"unavailable: {type(exc).__name__}"
        finally:
            await client.aclose()
    healthy = sum(1 for b in rt.monitor.catalog.backends if b.healthy)
    checks["backends"] = "ok" if healthy else "none healthy"
    return checks


async def shutdown(rt: Runtime) -> None:
    """Stop taking work, write what is pending, then close connections; each step regardless."""
    steps = [
        rt.catalog_sync.stop,
        rt.monitor.stop,
        rt.housekeeping.stop,
        rt.authenticator.stop,
        wait_for_closing,
        rt.leases.stop,
        # Every outcome written before the heartbeat is given up: what is still pending then
        # is swept at once by another process. A database out of reach is not waited for.
        rt.stores.audit.flush_final,
        rt.recovery.stop,
        *[store.stop for store in rt.sharing.exchanges],
        rt.limits.close,
        *[a.aclose for a in rt.adapters.values()],
        rt.stores.aclose,
    ]
    for step in steps:
        try:
            await step()
        except Exception as exc:
            log.error(
                "shutdown step failed", step=getattr(step, "__qualname__", "?"), error=str(exc)
            )
