"""Stores standing for several gateway processes over one Redis prefix, cleaned up after a test."""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar
from uuid import uuid4

from redis.asyncio import Redis

from .fairshare.conftest import new_client


class Stoppable(Protocol):
    async def stop(self) -> None: ...


S = TypeVar("S", bound=Stoppable)


class Deployment(Generic[S]):
    """Each store made for it has its own client, as each process has its own connections."""

    def __init__(self) -> None:
        self.prefix = f"mrtest:{uuid4().hex}:"
        self.made: list[tuple[S, Redis]] = []
        self.admin = new_client()

    def track(self, store: S, client: Redis) -> S:
        self.made.append((store, client))
        return store

    async def close(self) -> None:
        for store, client in self.made:
            await store.stop()
            await client.aclose()
        keys = [k async for k in self.admin.scan_iter(match=f"{self.prefix}*")]
        if keys:
            await self.admin.delete(*keys)
        await self.admin.aclose()
