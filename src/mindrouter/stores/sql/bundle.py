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
from mindrouter.stores.sql.accounts import SqlAccounts
from mindrouter.stores.sql.audit_log import SqlAuditLog
from mindrouter.stores.sql.audit_pg import PgAuditConnection
from mindrouter.stores.sql.audit_writer import AuditWriter
from mindrouter.stores.sql.catalog import SqlCatalog
from mindrouter.stores.sql.directory import SqlDirectory
from mindrouter.stores.sql.engine import PoolSettings, create_engine
from mindrouter.stores.sql.instances import SqlInstances
from mindrouter.stores.sql.keys import SqlKeyStore
from mindrouter.stores.sql.migrate import ensure_migrated
from mindrouter.stores.sql.reports import SqlReports
from mindrouter.stores.sql.usage import SqlUsageStore

# The audit writer runs one transaction at a time (the begins' group commit, then completions).
AUDIT_POOL = PoolSettings(size=2, max_overflow=2)
# The catalog and auth epoch polls: one at a time, mostly.
POLL_POOL = PoolSettings(size=1, max_overflow=1)


@dataclass(slots=True)
class SqlStores:
    engine: AsyncEngine
    directory: SqlDirectory  # groups and users
    keys: SqlKeyStore  # API keys; also the Authenticator's KeyLookup
    catalog: SqlCatalog  # backends and models
    audit: AuditWriter  # the AuditSink: begin / complete
    audit_log: SqlAuditLog  # audit queries and retention
    usage: SqlUsageStore  # the UsageLedger
    accounts: SqlAccounts  # console sign-in: passwords, OIDC subjects, the console's admins
    reports: SqlReports  # usage summaries for the console and the CSV export
    instances: SqlInstances  # heartbeats, checkpoints and the sweeper

    audit_engine: AsyncEngine | None = None  # the audit writer's own pool, when it has one
    poll_engine: AsyncEngine | None = None  # the epoch polls' own pool, when they have one

    @classmethod
    def over(
        cls,
        engine: AsyncEngine,
        *,
        hasher: KeyHasher | None = None,
        audit_engine: AsyncEngine | None = None,
        audit_pg: PgAuditConnection | None = None,
        outcomes_pg: PgAuditConnection | None = None,
        poll_engine: AsyncEngine | None = None,
    ) -> SqlStores:
        return cls(
            engine=engine,
            directory=SqlDirectory(engine),
            keys=SqlKeyStore(engine, hasher, polls=poll_engine),
            catalog=SqlCatalog(engine, polls=poll_engine),
            audit=AuditWriter(audit_engine or engine, pg=audit_pg, outcomes_pg=outcomes_pg),
            audit_log=SqlAuditLog(engine),
            usage=SqlUsageStore(engine),
            accounts=SqlAccounts(engine),
            reports=SqlReports(engine),
            instances=SqlInstances(engine),
            audit_engine=audit_engine,
            poll_engine=poll_engine,
        )

    async def ensure_migrated(self, config_hint: str = "FILE") -> None:
        await ensure_migrated(self.engine, config_hint)

    async def aclose(self) -> None:
        try:
            await self.audit.close()
        finally:
            await self.engine.dispose()
            for extra in (self.audit_engine, self.poll_engine):
                if extra is not None:
                    await extra.dispose()


def open_stores(
    url: str,
    *,
    hasher: KeyHasher | None = None,
    pool: PoolSettings | None = None,
    echo: bool = False,
    audit_commit: str = "durable",
) -> SqlStores:
    """Stores over a new engine for `url`; nothing connects until first use.

    The audit writer is the one store on every request's path. On PostgreSQL it writes through
    two connections of its own (begins, outcomes) straight on asyncpg (`audit_pg.py`); on
    MariaDB through a small pool of its own without the ping before each checkout (it retries a
    batch on a dropped connection instead); SQLite has a single writer anyway, so there
    everything shares one engine.

    `audit_commit="fast"`: the audit commits are not flushed to disk before they return
    (PostgreSQL: `synchronous_commit = off` on the audit connection; SQLite: `synchronous =
    NORMAL`, for the one shared engine). MariaDB has no such setting per session: there the
    server's `innodb_flush_log_at_trx_commit` decides, and both modes are alike.

    The catalog and auth epoch polls get a pool of their own too on PostgreSQL and MariaDB,
    without the ping and in autocommit (`epoch.py`): each is then one round trip."""
    fast = audit_commit == "fast"
    engine = create_engine(url, pool=pool, echo=echo, fast_commit=fast)
    parsed = engine.url
    if parsed.get_backend_name() == "sqlite":
        return SqlStores.over(engine, hasher=hasher)
    polls = create_engine(url, pool=POLL_POOL, echo=echo, pre_ping=False, autocommit=True)
    if parsed.get_backend_name() == "postgresql" and parsed.get_driver_name() == "asyncpg":
        audit_pg = PgAuditConnection(url, fast_commit=fast)
        # The outcomes on a connection of their own, with the server's durability (they carry
        # the usage charges): a begin never waits behind an outcome batch (audit_writer.py).
        outcomes_pg = PgAuditConnection(url)
        return SqlStores.over(
            engine, hasher=hasher, audit_pg=audit_pg, outcomes_pg=outcomes_pg, poll_engine=polls
        )
    audit_engine = create_engine(url, pool=AUDIT_POOL, echo=echo, pre_ping=False)
    return SqlStores.over(engine, hasher=hasher, audit_engine=audit_engine, poll_engine=polls)
