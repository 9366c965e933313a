"""All SQL stores over one engine, built from a database URL: what the app and the CLI hold.

stores = open_stores(settings.database_url)
await stores.ensure_migrated()        # serve refuses an un-migrated database
...
await stores.aclose()                 # drains the audit writer, closes the pool
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from mindrouter.identity.keys import KeyHasher
from mindrouter.stores.sql.audit_log import SqlAuditLog
from mindrouter.stores.sql.audit_writer import AuditWriter
from mindrouter.stores.sql.catalog import SqlCatalog
from mindrouter.stores.sql.directory import SqlDirectory
from mindrouter.stores.sql.engine import PoolSettings, create_engine
from mindrouter.stores.sql.keys import SqlKeyStore
from mindrouter.stores.sql.migrate import ensure_migrated
from mindrouter.stores.sql.usage import SqlUsageStore


@dataclass(slots=True)
class SqlStores:
    engine: AsyncEngine
    directory: SqlDirectory  # groups and users
    keys: SqlKeyStore  # API keys; also the Authenticator's KeyLookup
    catalog: SqlCatalog  # backends and models
    audit: AuditWriter  # the AuditSink: begin / complete
    audit_log: SqlAuditLog  # audit queries and retention
    usage: SqlUsageStore  # the UsageLedger

    @classmethod
    def over(cls, engine: AsyncEngine, *, hasher: KeyHasher | None = None) -> SqlStores:
        return cls(
            engine=engine,
            directory=SqlDirectory(engine),
            keys=SqlKeyStore(engine, hasher),
            catalog=SqlCatalog(engine),
            audit=AuditWriter(engine),
            audit_log=SqlAuditLog(engine),
            usage=SqlUsageStore(engine),
        )

    async def ensure_migrated(self, config_hint: str = "FILE") -> None:
        await ensure_migrated(self.engine, config_hint)

    async def aclose(self) -> None:
        try:
            await self.audit.close()
        finally:
            await self.engine.dispose()


def open_stores(
    url: str,
    *,
    hasher: KeyHasher | None = None,
    pool: PoolSettings | None = None,
    echo: bool = False,
) -> SqlStores:
    """Stores over a new engine for `url`; nothing connects until first use."""
    return SqlStores.over(create_engine(url, pool=pool, echo=echo), hasher=hasher)
