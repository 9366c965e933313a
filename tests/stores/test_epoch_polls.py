"""The catalog and auth epoch polls: a pool of their own on PostgreSQL and MariaDB, without the
ping before each checkout and outside any transaction; a connection the server dropped is read
again at once, on a new one, instead of failing the poll."""

from __future__ import annotations

import pytest

from mindrouter.stores.sql import SqlStores, open_stores
from mindrouter.stores.sql.epoch import bump_catalog_epoch, bump_epoch

from .conftest import FAST_HASHER, SessionDatabases, drop_other_connections


async def _drop_the_other_connections(url: str, stores: SqlStores) -> None:
    async with stores.engine.connect() as conn:
        await drop_other_connections(url, conn)


@pytest.mark.parametrize("engine", ["postgresql", "mariadb"])
async def test_a_poll_survives_a_dropped_connection(
    engine: str, session_databases: SessionDatabases
) -> None:
    url = session_databases.url(engine)
    stores = open_stores(url, hasher=FAST_HASHER)
    try:
        assert stores.poll_engine is not None
        catalog, auth = await stores.catalog.catalog_epoch(), await stores.keys.auth_epoch()
        await _drop_the_other_connections(url, stores)
        assert await stores.catalog.catalog_epoch() == catalog
        assert await stores.keys.auth_epoch() == auth
    finally:
        await stores.aclose()


@pytest.mark.parametrize("engine", ["sqlite", "postgresql", "mariadb"])
async def test_a_poll_sees_a_bump_committed_just_before(
    engine: str, session_databases: SessionDatabases
) -> None:
    stores = open_stores(session_databases.url(engine), hasher=FAST_HASHER)
    try:
        catalog, auth = await stores.catalog.catalog_epoch(), await stores.keys.auth_epoch()
        async with stores.engine.begin() as conn:
            await bump_catalog_epoch(conn)
        assert await stores.catalog.catalog_epoch() == catalog + 1
        async with stores.engine.begin() as conn:
            await bump_epoch(conn)
        assert await stores.keys.auth_epoch() == auth + 1
    finally:
        await stores.aclose()
