"""Typed readers for fields of an OpenAI request body, failing with OpenAI-style parameter paths.

Every reader takes the enclosing JSON object, the key and the path of that object (`""` for the
body itself), so an error names the exact spot: `messages[2].content[0].image_url.url`. JSON
`null` counts as "absent" everywhere, as OpenAI treats it. Booleans are never numbers, even though
Python's `bool` is an `int`.
"""

from __future__ import annotations

import math
from typing import Any, cast

from mindrouter.dialects.fields import invalid as invalid
from mindrouter.dialects.fields import kind_of as kind_of

JSONObject = dict[str, Any]


def path(prefix: str, key: str | int) -> str:
    """`prefix.key`, or `prefix[key]` for array positions."""
    if isinstance(key, int):
        return f"{prefix}[{key}]"
    return f"{prefix}.{key}" if prefix else key


def as_object(value: object, param: str) -> JSONObject:
    if not isinstance(value, dict):
        raise invalid(param, f"must be an object, got {kind_of(value)}")
    return cast(JSONObject, value)


def as_list(value: object, param: str, *, non_empty: bool = False) -> list[Any]:
    if not isinstance(value, list):
        raise invalid(param, f"must be an array, got {kind_of(value)}")
    if non_empty and not value:
        raise invalid(param, "must be a non-empty array")
    return value


def opt_str(obj: JSONObject, key: str, prefix: str = "") -> str | None:
    value = obj.get(key)
    if value is None or isinstance(value, str):
        return value
    raise invalid(path(prefix, key), f"must be a string, got {kind_of(value)}")


def req_str(obj: JSONObject, key: str, prefix: str = "", *, non_empty: bool = False) -> str:
    value = opt_str(obj, key, prefix)
    if value is None:
        raise invalid(path(prefix, key), "is required")
    if non_empty and not value:
        raise invalid(path(prefix, key), "must not be empty")
    return value


def opt_bool(obj: JSONObject, key: str, prefix: str = "") -> bool | None:
    value = obj.get(key)
    if value is None or isinstance(value, bool):
        return value
    raise invalid(path(prefix, key), f"must be a boolean, got {kind_of(value)}")


def opt_object(obj: JSONObject, key: str, prefix: str = "") -> JSONObject | None:
    value = obj.get(key)
    return None if value is None else as_object(value, path(prefix, key))


def opt_int(
    obj: JSONObject,
    key: str,
    prefix: str = "",
    *,
    minimum: int | None = None,
    maximum: int | None = None,
) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise invalid(path(prefix, key), f"must be an integer, got {kind_of(value)}")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise invalid(path(prefix, key), f"must be {_bounds(minimum, maximum)}, got {value}")
    return value


def opt_number(
    obj: JSONObject,
    key: str,
    prefix: str = "",
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    above: float | None = None,
) -> float | None:
    """A number within [minimum, maximum]; `above` is an exclusive lower bound."""
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise invalid(path(prefix, key), f"must be a number, got {kind_of(value)}")
    number = float(value)
    if (
        not math.isfinite(number)
        or (minimum is not None and number < minimum)
        or (maximum is not None and number > maximum)
        or (above is not None and number <= above)
    ):
        bounds = f"greater than {above:g}" if above is not None else _bounds(minimum, maximum)
        raise invalid(path(prefix, key), f"must be {bounds}, got {value!r}")
    return number


def _bounds(minimum: float | None, maximum: float | None) -> str:
    if minimum is not None and maximum is not None:
        return f"between {minimum:g} and {maximum:g}"
    if minimum is not None:
        return f"at least {minimum:g}"
    if maximum is not None:
        return f"at most {maximum:g}"
    return "a finite number"
