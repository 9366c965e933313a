"""SIGHUP: read the configuration file again and apply what changed, or keep the one running.

A file with problems is refused whole: each problem is logged and the gateway goes on serving on
what it had. A valid one has its groups, users, backends and models applied to the database the
way `migrate` applies them (`stores/sql/config_sync.py`), which bumps the catalog epoch, so every
process and replica of the deployment routes by the new state within a second, not only the one
that got the signal. Other keys (ports, the database, timeouts, ...) are read at start only; a
change to them is logged as needing a restart.
"""

from __future__ import annotations

import asyncio
from dataclasses import fields
from pathlib import Path

from mindrouter.catalog_sync import CatalogSync
from mindrouter.observability.logging import log
from mindrouter.settings import ConfigError, Settings, load_settings
from mindrouter.stores.sql import SqlStores, apply_config
from mindrouter.stores.sql.config_sync import SyncReport

APPLIED_LIVE = frozenset({"groups", "users", "backends", "models"})


def log_sync_report(report: SyncReport) -> None:
    if report.created or report.updated:
        log.info("configuration applied", created=report.created, updated=report.updated)
    for line in report.differences:
        log.warning(f"configuration overrides the database: {line}")
    if report.only_in_database:
        log.info("kept rows the configuration does not list", rows=report.only_in_database)


def needs_restart(old: Settings, new: Settings) -> list[str]:
    return [
        f.name
        for f in fields(Settings)
        if f.name not in APPLIED_LIVE and getattr(old, f.name) != getattr(new, f.name)
    ]


class ConfigReload:
    def __init__(self, stores: SqlStores, catalog_sync: CatalogSync, settings: Settings) -> None:
        self.stores = stores
        self.catalog_sync = catalog_sync
        self.settings = settings
        self._lock = asyncio.Lock()

    async def reload(self, path: str | Path) -> bool:
        """True when the file was valid and applied."""
        async with self._lock:
            return await self._reload(path)

    async def _reload(self, path: str | Path) -> bool:
        try:
            new = load_settings(path)
        except ConfigError as exc:
            for problem in exc.problems:
                log.error("configuration not reloaded", problem=problem, config=str(path))
            log.error("still serving on the previous configuration", config=str(path))
            return False
        log_sync_report(await apply_config(self.stores, new))
        later = needs_restart(self.settings, new)
        if later:
            log.warning("changed keys take effect at the next start", keys=later)
        self.catalog_sync.settings = new
        await self.catalog_sync.refresh(force=True)
        log.info("configuration reloaded", config=str(path))
        return True
