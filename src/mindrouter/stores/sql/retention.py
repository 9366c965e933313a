"""Audit retention, run by the gateway itself: prompts and outputs older than the configured
number of days are blanked, one pass at start and then hourly (a housekeeping chore).

Every replica runs it; that is harmless, since a purge only touches records not purged yet and
each batch is its own short transaction. Token counts, timings and the usage table stay, so the
accounting of old periods still adds up.
"""

from __future__ import annotations

from mindrouter.errors import MindRouterError
from mindrouter.observability.logging import log
from mindrouter.stores.sql.audit_log import SqlAuditLog

RETENTION_INTERVAL_S = 3600.0


class AuditRetention:
    def __init__(self, audit_log: SqlAuditLog, days: int) -> None:
        self._audit_log = audit_log
        self.days = days
        self.purged = 0  # records blanked by this process, for tests and the log

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
