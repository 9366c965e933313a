"""Real databases and a Redis namespace for gateway tests, each private to one test or module.

The servers are shared with other test runs and with other engineers' suites, so every database
gets a random name (created and dropped here, the way the store tests do it) and every Redis key
lives under a random prefix that is deleted afterwards. An unreachable server fails the test that
needs it: these tests never skip.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
from bench.harness import stores_at as stores_at  # shared with the benchmarks

from mindrouter.stores.sql.engine import create_engine
from mindrouter.stores.sql.migrate import upgrade
from tests.stores.conftest import create_database, drop_database, run_in_thread

REDIS_URL = os.environ.get("MINDROUTER_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


async def _migrate(url: str) -> None:
    engine = create_engine(url)
    try:
        await upgrade(engine)
    finally:
        await engine.dispose()


@contextmanager
def fresh_database(engine: str, tmp: Path, *, migrated: bool = True) -> Iterator[str]:
    """A new database of `engine` (sqlite, postgresql, mariadb); its URL; dropped afterwards."""
    url = run_in_thread(create_database(engine, tmp))
    try:
        if migrated:
            run_in_thread(_migrate(url))
        yield url
    finally:
        run_in_thread(drop_database(url))


class RedisNamespace:
    """A random key prefix on the test Redis; `clear()` deletes every key under it."""

    def __init__(self) -> None:
        self.url = REDIS_URL
        self.prefix = f"mrtest:{secrets.token_hex(8)}:"
        self._client = redis.Redis.from_url(REDIS_URL, socket_timeout=5)
        try:
            self._client.ping()
        except redis.exceptions.ConnectionError as exc:
            pytest.fail(
                f"these tests need a running Redis at {REDIS_URL} (or point "
                f"MINDROUTER_TEST_REDIS_URL at one): {exc}",
                pytrace=False,
            )

    def keys(self) -> list[bytes]:
        return list(self._client.scan_iter(match=f"{self.prefix}*"))

    def clear(self) -> None:
        try:
            keys = self.keys()
            if keys:
                self._client.delete(*keys)
        finally:
            self._client.close()


@contextmanager
def redis_namespace() -> Iterator[RedisNamespace]:
    namespace = RedisNamespace()
    try:
        yield namespace
    finally:
        namespace.clear()
