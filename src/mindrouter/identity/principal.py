"""Who a request is from, with the limits that apply to them, resolved once per key."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from mindrouter.identity.access import EVERY_MODEL, ModelAccess, access_from
from mindrouter.stores.records import GroupLimits, KeyRecord, LimitOverrides

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Principal:
    user_id: int
    user_name: str
    group_name: str
    key_id: int
    key_prefix: str  # "mr2_" + 8 characters: names the key in logs and audit, not a secret
    is_admin: bool
    scheduler_weight: float
    # Effective limits: the group's, with the user's overrides applied. 0 means unlimited.
    token_budget: int
    rpm: int
    max_concurrent: int
    budget_period_days: int
    expires_at: datetime | None
    # The rules of model access that apply (the group's); a model must pass each.
    access: tuple[ModelAccess, ...] = (EVERY_MODEL,)


def pick(own: T | None, inherited: T) -> T:
    return inherited if own is None else own


def effective_limits(group: GroupLimits, overrides: LimitOverrides) -> GroupLimits:
    return GroupLimits(
        scheduler_weight=pick(overrides.scheduler_weight, group.scheduler_weight),
        token_budget=pick(overrides.token_budget, group.token_budget),
        rpm=pick(overrides.rpm, group.rpm),
        max_concurrent=pick(overrides.max_concurrent, group.max_concurrent),
        budget_period_days=pick(overrides.budget_period_days, group.budget_period_days),
    )


def principal_for(record: KeyRecord, key_prefix: str) -> Principal:
    limits = effective_limits(record.limits, record.overrides)
    return Principal(
        user_id=record.user_id,
        user_name=record.user_name,
        group_name=record.group_name,
        key_id=record.key_id,
        key_prefix=key_prefix,
        is_admin=record.is_admin,
        scheduler_weight=limits.scheduler_weight,
        token_budget=limits.token_budget,
        rpm=limits.rpm,
        max_concurrent=limits.max_concurrent,
        budget_period_days=limits.budget_period_days,
        expires_at=record.expires_at,
        access=(access_from(record.group_models),),
    )
