from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from mindrouter.stores.sql import open_stores
from mindrouter.stores.sql.migrate import upgrade
from tests.pipeline.harness import InProcess, in_process


async def _migrate(url: str) -> None:
    stores = open_stores(url)
    try:
        await upgrade(stores.engine)
    finally:
        await stores.aclose()


@pytest.fixture(scope="session")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite database, copied for each in-process gateway (migrating costs more
    than the tests that use it)."""
    path = tmp_path_factory.mktemp("template") / "mindrouter.db"
    asyncio.run(_migrate(f"sqlite+aiosqlite:///{path}"))
    return path


Factory = Callable[..., Awaitable[InProcess]]


@pytest.fixture
async def gateway_factory(migrated: Path, tmp_path: Path) -> AsyncIterator[Factory]:
    """`in_process(backends, models, **top)`, each gateway it made stopped after the test."""
    async with contextlib.AsyncExitStack() as stack:
        made = 0

        async def make(*args: Any, **kwargs: Any) -> InProcess:
            nonlocal made
            made += 1
            directory = tmp_path / f"gateway-{made}"
            directory.mkdir()
            return await stack.enter_async_context(in_process(migrated, directory, *args, **kwargs))

        yield make
