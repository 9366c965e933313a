"""SQL implementations of the store ports (SQLAlchemy 2 async; SQLite, PostgreSQL, MariaDB).

bundle        SqlStores / open_stores(url): every store over one engine
engine        the async engine per URL (SQLite pragmas, pool settings)
migrate       Alembic run from code; is_migrated / ensure_migrated / upgrade / downgrade
schema        the tables; columns: portable column types
directory     groups and users           keys       API keys and the auth lookups
catalog       backends and models         usage      period and lifetime token counters
audit_writer  group-committed audit       audit_log  audit queries and retention
audit_close   closing records + charging  instances  heartbeats, checkpoints, the sweeper
config_sync   apply_config: the YAML's groups/users/backends/models, upserted at start
epoch         the auth epoch counter      transactions  error translation, utcnow
"""

from mindrouter.stores.sql.bundle import SqlStores, open_stores
from mindrouter.stores.sql.config_sync import SyncReport, apply_config
from mindrouter.stores.sql.migrate import (
    DatabaseNotMigrated,
    DatabaseUnavailable,
    MigrationFailed,
    ensure_migrated,
    is_migrated,
)

__all__ = [
    "DatabaseNotMigrated",
    "DatabaseUnavailable",
    "MigrationFailed",
    "SqlStores",
    "SyncReport",
    "apply_config",
    "ensure_migrated",
    "is_migrated",
    "open_stores",
]
