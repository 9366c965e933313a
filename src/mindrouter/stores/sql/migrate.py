"""Alembic, run from code: the migrations ship inside the package, so an installed gateway can
migrate its database with `mindrouter migrate` and no alembic.ini.

The async engine lends Alembic a synchronous connection (`run_sync`); `migrations/env.py`
picks it up from the Config's attributes.
"""

from __future__ import annotations

from dataclasses import dataclass

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from mindrouter.stores.sql.transactions import DATABASE_ERRORS

SCRIPT_LOCATION = "mindrouter.stores.sql:migrations"


class DatabaseNotMigrated(Exception):
    """The database schema is missing or not at this gateway's revision."""


class DatabaseUnavailable(Exception):
    """The database could not be reached or queried."""


class MigrationFailed(Exception):
    """A migration step failed; the message carries the database's error."""


@dataclass(frozen=True, slots=True)
class SchemaState:
    current: str | None  # None: never migrated
    head: str

    @property
    def migrated(self) -> bool:
        return self.current == self.head


def migration_config(connection: Connection | None = None) -> Config:
    """A Config for the packaged migrations; also what `alembic.command.revision` needs when a
    developer writes a new migration."""
    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(migration_config()).get_current_head()
    assert head is not None, "the packaged migrations have no head"
    return head


def _current(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


async def schema_state(engine: AsyncEngine) -> SchemaState:
    try:
        async with engine.connect() as conn:
            current = await conn.run_sync(_current)
    except DATABASE_ERRORS as exc:
        raise DatabaseUnavailable(f"cannot read the database schema version: {exc}") from exc
    return SchemaState(current=current, head=head_revision())


async def is_migrated(engine: AsyncEngine) -> bool:
    return (await schema_state(engine)).migrated


async def ensure_migrated(engine: AsyncEngine, config_hint: str = "FILE") -> None:
    """Raises DatabaseNotMigrated, naming the command to run, unless the schema is at head."""
    state = await schema_state(engine)
    if state.migrated:
        return
    run = f"run `mindrouter migrate --config {config_hint}`"
    if state.current is None:
        raise DatabaseNotMigrated(f"the database is not migrated: {run}")
    raise DatabaseNotMigrated(
        f"the database schema is at revision {state.current}, this gateway needs {state.head}: "
        f"{run} (or run the gateway version that matches the database)"
    )


async def upgrade(engine: AsyncEngine, revision: str = "head") -> SchemaState:
    await _run(engine, "upgrade", revision)
    return await schema_state(engine)


async def downgrade(engine: AsyncEngine, revision: str) -> SchemaState:
    await _run(engine, "downgrade", revision)
    return await schema_state(engine)


async def _run(engine: AsyncEngine, verb: str, revision: str) -> None:
    def run(connection: Connection) -> None:
        config = migration_config(connection)
        if verb == "upgrade":
            command.upgrade(config, revision)
        else:
            command.downgrade(config, revision)

    try:
        async with engine.begin() as conn:
            await conn.run_sync(run)
    except DATABASE_ERRORS as exc:
        raise MigrationFailed(f"{verb} to {revision} failed: {exc}") from exc
