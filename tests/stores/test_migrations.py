"""Migrations on each engine: from empty, down one step and up again, and detection."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, inspect, select

from mindrouter.stores.sql import DatabaseNotMigrated, ensure_migrated, is_migrated
from mindrouter.stores.sql.engine import create_engine
from mindrouter.stores.sql.migrate import (
    DatabaseUnavailable,
    downgrade,
    head_revision,
    schema_state,
    upgrade,
)
from mindrouter.stores.sql.schema import auth_epoch, metadata

from .conftest import ENGINES


def _differences(conn: Connection) -> list[object]:
    context = MigrationContext.configure(conn, opts={"compare_type": True})
    return list(compare_metadata(context, metadata))


def _tables(conn: Connection) -> set[str]:
    return set(inspect(conn).get_table_names())


@pytest.mark.parametrize("engine", ENGINES)
async def test_migrate_an_empty_database_to_exactly_the_schema(engine: str, fresh_url: str) -> None:
    db = create_engine(fresh_url)
    try:
        state = await schema_state(db)
        assert state.current is None and not state.migrated
        assert not await is_migrated(db)
        with pytest.raises(DatabaseNotMigrated, match=r"mindrouter migrate --config cfg\.yaml"):
            await ensure_migrated(db, "cfg.yaml")

        state = await upgrade(db)
        assert state.current == head_revision() and state.migrated
        await ensure_migrated(db)
        async with db.connect() as conn:
            assert await conn.run_sync(_differences) == []
            assert await conn.scalar(select(auth_epoch.c.epoch)) == 0
    finally:
        await db.dispose()


@pytest.mark.parametrize("engine", ENGINES)
async def test_downgrade_then_upgrade_again(engine: str, fresh_url: str) -> None:
    db = create_engine(fresh_url)
    try:
        await upgrade(db)
        # One step back is no longer the gateway's schema.
        assert not (await downgrade(db, "-1")).migrated
        with pytest.raises(DatabaseNotMigrated):
            await ensure_migrated(db)
        # All the way back leaves none of the tables.
        assert not (await downgrade(db, "base")).migrated
        async with db.connect() as conn:
            assert not (await conn.run_sync(_tables)) & set(metadata.tables)

        assert (await upgrade(db)).migrated
        async with db.connect() as conn:
            assert set(metadata.tables) <= await conn.run_sync(_tables)
            assert await conn.run_sync(_differences) == []
    finally:
        await db.dispose()


async def test_an_unreachable_database_is_reported_as_such() -> None:
    db = create_engine("postgresql+asyncpg://postgres@127.0.0.1:1/none")
    try:
        with pytest.raises(DatabaseUnavailable):
            await schema_state(db)
    finally:
        await db.dispose()
