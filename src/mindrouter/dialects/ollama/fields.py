"""Typed readers for fields of an Ollama request body; every failure names the field it is about.

Ollama's server is written in Go and decodes bodies into typed structs, so a wrong type is a 400
there too. These readers reproduce that strictness with messages a client can act on:
`messages[1].images[0]: not valid base64`. JSON `null` counts as absent, as it does for Go's
decoder. Booleans are never numbers, although Python's `bool` is an `int`.
"""

from __future__ import annotations

import math
from typing import Any, cast

from mindrouter.dialects.fields import invalid as invalid
from mindrouter.dialects.fields import kind_of as kind_of
from mindrouter.errors import InvalidRequest

JSONObject = dict[str, Any]

# Ollama stores integer options in Go's 64-bit ints; larger values cannot mean anything useful.
_INT_MIN = -(2**63)
_INT_MAX = 2**63 - 1


def field(prefix: str, key: str | int) -> str:
    """The path of `key` inside `prefix`: `prefix.key`, or `prefix[key]` for array positions."""
    if isinstance(key, int):
        return f"{prefix}[{key}]"
    return f"{prefix}.{key}" if prefix else key


def as_object(value: object, param: str) -> JSONObject:
    if not isinstance(value, dict):
        where = param or "the request body"
        raise InvalidRequest(f"{where}: must be a JSON object, got {kind_of(value)}", param=param)
    return cast(JSONObject, value)


def opt_object(obj: JSONObject, key: str, prefix: str) -> JSONObject | None:
    value = obj.get(key)
    return None if value is None else as_object(value, field(prefix, key))


def opt_list(obj: JSONObject, key: str, prefix: str) -> list[Any] | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, list):
        raise invalid(field(prefix, key), f"must be an array, got {kind_of(value)}")
    return value


def as_str(value: object, param: str) -> str:
    if not isinstance(value, str):
        raise invalid(param, f"must be a string, got {kind_of(value)}")
    return value


def opt_str(obj: JSONObject, key: str, prefix: str) -> str | None:
    value = obj.get(key)
    return None if value is None else as_str(value, field(prefix, key))


def req_str(obj: JSONObject, key: str, prefix: str) -> str:
    """A string that must be present and non-empty (model names, tool names)."""
    param = field(prefix, key)
    value = obj.get(key)
    if value is None:
        raise invalid(param, "is required")
    text = as_str(value, param)
    if not text.strip():
        raise invalid(param, "must not be empty")
    return text


def opt_bool(obj: JSONObject, key: str, prefix: str) -> bool | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, bool):
        raise invalid(field(prefix, key), f"must be true or false, got {kind_of(value)}")
    return value


def as_int(value: object, param: str) -> int:
    """An integer; integral floats such as `100.0` are accepted, as Ollama's option decoder does."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(param, f"must be an integer, got {kind_of(value)}")
    if not _INT_MIN <= value <= _INT_MAX:
        raise invalid(param, "is out of range for a 64-bit integer")
    return value


def opt_int(
    obj: JSONObject, key: str, prefix: str, *, lo: int | None = None, hi: int | None = None
) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    param = field(prefix, key)
    number = as_int(value, param)
    if (lo is not None and number < lo) or (hi is not None and number > hi):
        raise invalid(param, f"must be {_range(lo, hi)}, got {number}")
    return number


def opt_float(
    obj: JSONObject, key: str, prefix: str, *, lo: float | None = None, hi: float | None = None
) -> float | None:
    value = obj.get(key)
    if value is None:
        return None
    param = field(prefix, key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise invalid(param, f"must be a number, got {kind_of(value)}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise invalid(param, "must be a finite number")
    if (lo is not None and number < lo) or (hi is not None and number > hi):
        raise invalid(param, f"must be {_range(lo, hi)}, got {number:g}")
    return number


def _range(lo: float | None, hi: float | None) -> str:
    if lo is not None and hi is not None:
        return f"between {lo:g} and {hi:g}"
    if lo is not None:
        return f"at least {lo:g}"
    return f"at most {hi:g}"
