"""Audit retention, run by the gateway itself: prompts and outputs older than the configured
number of days are blanked, at start and then every `interval` seconds.

Every replica runs it; that is harmless, since a purge only touches records not purged yet and
each batch is its own short transaction. Token counts, timings and the usage table stay, so the
accounting of old periods still adds up.
"""

from __future__ import annotations

import asyncio
import contextlib

from mindrouter.errors import MindRouterError
from mindrouter.observability.logging import log
from mindrouter.stores.sql.audit_log import SqlAuditLog

RETENTION_INTERVAL_S = 3600.0


class AuditRetention:
    def __init__(
        self, audit_log: SqlAuditLog, days: int, interval: float = RETENTION_INTERVAL_S
    ) -> None:
        self._audit_log = audit_log
        self.days = days
        self._interval = interval
        self._task: asyncio.Task[None] | None = None
        self.purged = 0  # records blanked by this process, for tests and the log

    async def start(self) -> None:
        if self.days > 0 and self._task is None:
            self._task = asyncio.create_task(self._run(), name="audit-retention")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def purge_once(self) -> int:
        """One pass; a database failure is logged and the next pass tries again."""
        try:
            count = await self._audit_log.purge_audit(self.days)
        except MindRouterError as exc:
            log.warning("audit retention pass failed", error=exc.message)
            return 0
        self.purged += count
        if count:
            log.info("audit content purged", records=count, older_than_days=self.days)
        return count

    async def _run(self) -> None:
        while True:
            await self.purge_once()
            await asyncio.sleep(self._interval)
