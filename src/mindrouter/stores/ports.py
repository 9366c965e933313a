"""The ports the request path talks to. Implementations: `stores.sql` (and fakes in tests).

Each is as small as the caller's need, so a stage can be tested against an in-memory fake:

    KeyLookup    authenticate: keys by prefix, the auth epoch, last-used times
    AuditSink    audit: begin (durable before the request runs), complete (queued)
    UsageLedger  account: a user's period and lifetime token counters, and their last minute of
                 admissions and requests in flight, loaded into the limit store
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol

from mindrouter.stores.audit_records import AuditOutcome, AuditStart
from mindrouter.stores.records import KeyRecord, UsageCounters


class KeyLookup(Protocol):
    async def find_keys(self, prefix: str) -> Sequence[KeyRecord]:
        """Every key whose stored prefix is `prefix` (normally one), joined with user and group."""
        ...

    async def auth_epoch(self) -> int:
        """A counter bumped with every change that can invalidate a verified key."""
        ...

    async def record_key_use(self, uses: Mapping[int, datetime]) -> None:
        """Sets last-used times, key id -> time; written in batches, off the request path."""
        ...


class AuditSink(Protocol):
    async def begin(self, record: AuditStart) -> None:
        """Returns once the record is committed; raises if it could not be."""
        ...

    def complete(self, uuid: str, outcome: AuditOutcome) -> None:
        """Queues the outcome of a begun record; written soon after, never lost on shutdown."""
        ...


class UsageLedger(Protocol):
    async def get_usage(self, user_id: int, now: datetime | None = None) -> UsageCounters:
        """The counters as of `now` (a period that has ended reads as empty)."""
        ...

    async def recent_activity(self, user_id: int, now: datetime) -> tuple[list[datetime], int]:
        """The admission times of the user's last minute before `now`, and how many of their
        requests are still in flight."""
        ...
