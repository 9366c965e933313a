"""Typed reads from a parsed JSON body, each failure naming the offending field.

Paths use the dotted style Anthropic uses in its own error messages (`messages.1.content.0.type`),
so a client can find the exact spot in what it sent. Every reader raises `InvalidRequest` and
nothing else: the decoders are fuzzed on arbitrary JSON and must never leak another exception.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from mindrouter.dialects.fields import kind_of as describe
from mindrouter.errors import InvalidRequest


def child(path: str, key: str | int) -> str:
    return f"{path}.{key}" if path else str(key)


def shown(value: int | float) -> str:
    """A number for an error message; huge integers are not spelled out (int→str is capped)."""
    if isinstance(value, int) and abs(value) > 10**18:
        return "a number too large to use"
    return repr(value)


def invalid(path: str, problem: str) -> InvalidRequest:
    return InvalidRequest(f"{path}: {problem}", param=path)


def wrong_type(path: str, expected: str, value: object) -> InvalidRequest:
    return invalid(path, f"expected {expected}, got {describe(value)}")


def required(obj: dict[str, Any], key: str, path: str) -> Any:
    """The value under `key`; a missing key and an explicit null are both "required"."""
    value = obj.get(key)
    if value is None:
        raise invalid(child(path, key), "field required")
    return value


def as_object(value: object, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise wrong_type(path, "an object", value)
    return value


def as_list(value: object, path: str, *, non_empty: bool = False) -> list[Any]:
    if not isinstance(value, list):
        raise wrong_type(path, "an array", value)
    if non_empty and not value:
        raise invalid(path, "must contain at least one item")
    return value


def as_str(value: object, path: str, *, non_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise wrong_type(path, "a string", value)
    if non_empty and not value:
        raise invalid(path, "must not be empty")
    return value


def as_bool(value: object, path: str) -> bool:
    if not isinstance(value, bool):
        raise wrong_type(path, "a boolean", value)
    return value


def as_int(value: object, path: str, *, minimum: int | None = None) -> int:
    # JSON has one number type; a client may send 1024.0 for an integer field.
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise wrong_type(path, "an integer", value)
    if not -(2**63) <= value < 2**63:
        # 1e30 is integral as a float but fits no integer field of any backend.
        raise invalid(path, f"is out of range for a 64-bit integer, got {shown(value)}")
    if minimum is not None and value < minimum:
        raise invalid(path, f"must be at least {minimum}, got {shown(value)}")
    return value


def as_number(value: object, path: str, *, low: float, high: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise wrong_type(path, "a number", value)
    # Compared before converting: float() of a huge JSON integer would overflow.
    upper = math.inf if high is None else high
    if not low <= value <= upper:
        bounds = f"between {low:g} and {high:g}" if high is not None else f"at least {low:g}"
        raise invalid(path, f"must be {bounds}, got {shown(value)}")
    return float(value)


def as_choice(value: object, path: str, choices: Collection[str]) -> str:
    text = as_str(value, path)
    if text not in choices:
        listed = ", ".join(repr(c) for c in choices)
        raise invalid(path, f"must be one of {listed}, got {text!r}")
    return text


def block_type(block: dict[str, Any], path: str) -> str:
    """A content block's `type`, required on every block."""
    return as_str(required(block, "type", path), child(path, "type"))


@dataclass(slots=True)
class Dropped:
    """Where a request held something the Messages API accepts but this gateway cannot honour.

    Such fields and blocks are checked like any other (a wrong type is still an error), then left
    out of the canonical request; the caller logs the paths gathered here.
    """

    paths: list[str] = field(default_factory=list)

    def add(self, path: str) -> None:
        self.paths.append(path)


def check_cache_control(block: dict[str, Any], path: str) -> None:
    """`cache_control`, allowed on every block and tool: checked, and otherwise ignored (the
    engines cache prompt prefixes on their own)."""
    value = block.get("cache_control")
    if value is None:
        return
    cache_path = child(path, "cache_control")
    config = as_object(value, cache_path)
    as_choice(required(config, "type", cache_path), child(cache_path, "type"), ("ephemeral",))
    ttl = config.get("ttl")
    if ttl is not None:
        as_choice(ttl, child(cache_path, "ttl"), ("5m", "1h"))
