"""An in-memory KeyLookup, with counters for what the Authenticator asked of it."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from mindrouter.identity.keys import KeyHasher, generate_key
from mindrouter.stores.records import GroupLimits, KeyRecord, LimitOverrides

FAST_HASHER = KeyHasher(time_cost=1, memory_cost=8, parallelism=1)


class CountingHasher(KeyHasher):
    def __init__(self) -> None:
        super().__init__(time_cost=1, memory_cost=8, parallelism=1)
        self.verifications = 0

    def verify(self, secret_hash: str, key: str) -> bool:
        self.verifications += 1
        return super().verify(secret_hash, key)


class FakeKeys:
    def __init__(self) -> None:
        self.records: dict[str, KeyRecord] = {}  # prefix -> record
        self.epoch = 0
        self.lookups = 0
        self.polls = 0
        self.used: dict[int, datetime] = {}
        self.lookup_gate: asyncio.Event | None = None  # when set, lookups wait for it
        self.failing = False

    def add(self, *, user: str = "alice", admin: bool = False, **changes: object) -> str:
        new = generate_key()
        record = KeyRecord(
            key_id=len(self.records) + 1,
            digest=new.digest,
            secret_hash=FAST_HASHER.hash(new.key),
            is_admin=admin,
            expires_at=None,
            revoked_at=None,
            user_id=100 + len(self.records),
            user_name=user,
            user_active=True,
            group_name="staff",
            limits=GroupLimits(2.0, 1000, 60, 4, 30),
            overrides=LimitOverrides(rpm=10),
        )
        self.records[new.prefix] = replace(record, **changes)  # type: ignore[arg-type]
        return new.key

    def change(self, key: str, **changes: object) -> None:
        prefix = key[4:12]
        self.records[prefix] = replace(self.records[prefix], **changes)  # type: ignore[arg-type]
        self.epoch += 1

    async def find_keys(self, prefix: str) -> Sequence[KeyRecord]:
        self.lookups += 1
        if self.failing:
            raise ConnectionError("database down")
        if self.lookup_gate is not None:
            await self.lookup_gate.wait()
        found = self.records.get(prefix)
        return [found] if found else []

    async def auth_epoch(self) -> int:
        self.polls += 1
        if self.failing:
            raise ConnectionError("database down")
        return self.epoch

    async def record_key_use(self, uses: Mapping[int, datetime]) -> None:
        self.used.update(uses)
