"""Plain data that crosses the store ports: groups, users, keys, backends, models, usage.

Frozen dataclasses, so the admin API can use them directly as response models (a backend's row,
which holds its `BackendConfig`, it shows flat) and the request path can share them between
tasks without copying. Times are timezone-aware UTC datetimes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TypedDict

from mindrouter.routing.backend_config import BackendConfig

# Limit fields a user may override; None in an override means "inherit the group's value".
LIMIT_FIELDS = ("scheduler_weight", "token_budget", "rpm", "max_concurrent", "budget_period_days")


@dataclass(frozen=True, slots=True)
class GroupLimits:
    """A group's limits, applied to each of its users. 0 means unlimited for the counters."""

    scheduler_weight: float = 1.0
    token_budget: int = 0
    rpm: int = 0
    max_concurrent: int = 0
    budget_period_days: int = 30


@dataclass(frozen=True, slots=True)
class LimitOverrides:
    scheduler_weight: float | None = None
    token_budget: int | None = None
    rpm: int | None = None
    max_concurrent: int | None = None
    budget_period_days: int | None = None


@dataclass(frozen=True, slots=True)
class Group:
    id: int
    name: str
    limits: GroupLimits
    created_at: datetime
    updated_at: datetime
    # The models its users may use: fnmatch patterns; None means every model.
    models: list[str] | None = None


@dataclass(frozen=True, slots=True)
class User:
    id: int
    name: str
    group: str
    active: bool
    overrides: LimitOverrides
    created_at: datetime
    updated_at: datetime


class GroupChanges(TypedDict, total=False):
    name: str
    models: list[str] | None
    scheduler_weight: float
    token_budget: int
    rpm: int
    max_concurrent: int
    budget_period_days: int


class UserChanges(TypedDict, total=False):
    """Only the keys present change; an override set to None goes back to the group's value."""

    name: str
    group: str
    active: bool
    scheduler_weight: float | None
    token_budget: int | None
    rpm: int | None
    max_concurrent: int | None
    budget_period_days: int | None


@dataclass(frozen=True, slots=True)
class ApiKeyInfo:
    """Everything about a key except its secret, which is never stored in the clear."""

    id: int
    prefix: str  # "mr2_" + the first 8 characters of the secret: enough to name it, not to use it
    user: str
    is_admin: bool
    name: str | None
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None


@dataclass(frozen=True, slots=True)
class CreatedKey:
    info: ApiKeyInfo
    key: str  # the full key: shown to its owner once, never stored or logged


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """One key row joined with its user and group: what authentication needs, in one read."""

    key_id: int
    digest: str  # SHA-256 of the full key, hex
    secret_hash: str  # Argon2 hash of the full key
    is_admin: bool
    expires_at: datetime | None
    revoked_at: datetime | None
    user_id: int
    user_name: str
    user_active: bool
    group_name: str
    limits: GroupLimits
    overrides: LimitOverrides
    group_models: list[str] | None = None


@dataclass(frozen=True, slots=True)
class Backend:
    """A backend's row: its configuration (the file-only fields at their defaults, see
    `routing/backend_config.py`), the row's own id and time of the last change, and whether an
    admin drains it (operational state, not configuration: the file never sets it)."""

    id: int
    config: BackendConfig
    updated_at: datetime
    draining: bool = False


@dataclass(frozen=True, slots=True)
class Model:
    id: int
    name: str
    context_length: int
    capabilities: list[str]
    aliases: list[str]
    enabled: bool
    updated_at: datetime


class ModelChanges(TypedDict, total=False):
    context_length: int
    capabilities: list[str]
    aliases: list[str]
    enabled: bool


@dataclass(frozen=True, slots=True)
class UsageCounters:
    """A user's token usage: the current period's, and the lifetime total that never resets."""

    user_id: int
    period_start: datetime | None  # None until the first tokens are charged
    period_tokens: int = 0
    lifetime_tokens: int = 0
    period_days: int = 30


# -- gateway processes: the checkpoints of their requests, and what the sweeper closed ---------


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """What a request in flight has used so far, written into its pending record."""

    uuid: str
    input_tokens: int
    output_tokens: int


@dataclass(slots=True)
class SweepResult:
    instances: list[str]  # the dead processes swept
    closed: int  # records closed as interrupted
    charges: list[Charge]


@dataclass(frozen=True, slots=True)
class Charge:
    """Tokens charged to a user's durable usage while closing records."""

    user_id: int
    tokens: int
    at: datetime
    period_start: datetime | None
    period_days: int  # filled in by the sweeper only, which passes the charge on to the limits
