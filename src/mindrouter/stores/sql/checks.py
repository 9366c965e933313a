"""Checks on values before they reach a row, with messages that name the field.

The admin API's pydantic models check the same at its edge; these also guard the CLI and any
other caller, and turn what the database would report as a constraint violation (a null in a
required column) into a clear InvalidRequest.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from mindrouter.errors import InvalidRequest
from mindrouter.routing.backend_config import ENGINES
from mindrouter.settings import CAPABILITIES
from mindrouter.stores.records import LIMIT_FIELDS


def refuse_nulls(values: Mapping[str, Any], nullable: Collection[str] = ()) -> None:
    for field, value in values.items():
        if value is None and field not in nullable:
            raise InvalidRequest(f"{field} cannot be null", param=field)


def check_limits(values: Mapping[str, Any]) -> None:
    """Rejects impossible limits; None (inherit) passes."""
    for field in LIMIT_FIELDS:
        value = values.get(field)
        if value is None:
            continue
        if field == "scheduler_weight" and not value > 0:
            raise InvalidRequest("scheduler_weight must be positive", param=field)
        if field == "budget_period_days" and value < 1:
            raise InvalidRequest("budget_period_days must be at least 1", param=field)
        if value < 0:
            raise InvalidRequest(f"{field} must not be negative (0 means unlimited)", param=field)


def check_backend(values: Mapping[str, Any]) -> None:
    refuse_nulls(values, nullable=("gpu", "models"))
    if "engine" in values and values["engine"] not in ENGINES:
        raise InvalidRequest(f"engine must be one of {', '.join(ENGINES)}", param="engine")
    if "url" in values and not str(values["url"]).startswith(("http://", "https://")):
        raise InvalidRequest("url must be an http(s) URL", param="url")
    if "max_concurrent" in values and values["max_concurrent"] < 1:
        raise InvalidRequest("max_concurrent must be at least 1", param="max_concurrent")


def check_model(values: Mapping[str, Any]) -> None:
    refuse_nulls(values)
    unknown = [c for c in values.get("capabilities", ()) if c not in CAPABILITIES]
    if unknown:
        raise InvalidRequest(
            f"unknown capabilities {unknown}; use {', '.join(CAPABILITIES)}", param="capabilities"
        )
    if "context_length" in values and values["context_length"] < 1:
        raise InvalidRequest("context_length must be positive", param="context_length")
