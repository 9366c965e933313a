"""Plain data for the audit trail: what is written before a request runs, what completes it,
and what an audit query returns."""

from __future__ import annotations

import uuid as uuid_module
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

# `interrupted`: closed by a sweeper after the gateway process serving the request died.
AuditStatus = Literal["pending", "ok", "error", "cancelled", "interrupted"]
Outcome = Literal["ok", "error", "cancelled"]


def _now() -> datetime:
    return datetime.now(UTC)


def new_audit_uuid() -> str:
    return str(uuid_module.uuid4())


@dataclass(slots=True)
class AuditStart:
    """Written, and committed, before the request is scheduled."""

    user_id: int | None
    user_name: str | None
    key_id: int | None
    key_prefix: str | None
    model: str
    endpoint: str
    messages: Any  # the full message history, JSON-serialisable
    stream: bool = False
    client_ip: str | None = None
    user_agent: str | None = None
    request_id: str | None = None
    instance_id: str | None = None  # the gateway process serving it (for the sweeper)
    uuid: str = field(default_factory=new_audit_uuid)
    created_at: datetime = field(default_factory=_now)


@dataclass(slots=True)
class AuditOutcome:
    """Written after the request ends, however it ends."""

    status: Outcome
    output: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    error_message: str | None = None
    backend: str | None = None
    attempts: int = 0
    queued_ms: float | None = None
    first_token_ms: float | None = None
    total_ms: float | None = None
    completed_at: datetime = field(default_factory=_now)
    # Where the user's first budget period starts if this is their first charge (admission time).
    period_start: datetime | None = None


@dataclass(frozen=True, slots=True)
class AuditEntry:
    id: int
    uuid: str
    request_id: str | None
    created_at: datetime
    user_id: int | None
    user_name: str | None
    key_id: int | None
    key_prefix: str | None
    model: str
    endpoint: str
    messages: Any  # None once purged
    stream: bool
    client_ip: str | None
    user_agent: str | None
    status: AuditStatus
    output: str | None
    error_message: str | None
    input_tokens: int | None
    output_tokens: int | None
    backend: str | None
    attempts: int
    queued_ms: float | None
    first_token_ms: float | None
    total_ms: float | None
    completed_at: datetime | None
    purged: bool


@dataclass(frozen=True, slots=True)
class AuditFilter:
    user: str | None = None  # user name
    key: str | None = None  # key id, or its prefix ("mr2_" + 8 characters)
    model: str | None = None
    status: AuditStatus | None = None
    since: datetime | None = None
    until: datetime | None = None
    limit: int = 100
