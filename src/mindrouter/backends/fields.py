"""Fields of an engine's answer read as the gateway keeps them: a token count as a whole number
it can charge and store, a text field as text. Engines differ in how strictly they write both
(`10.0` for a count; a number where a string belongs), and a value of the wrong kind passed on
would fail later, where the audit record is written or the limits are settled."""

from __future__ import annotations

from typing import Any

# The most tokens one count may say: the audit columns are 32-bit integers, and no generation
# comes near (a count past it is an engine's bug, and would fail the outcome's write).
MAX_TOKEN_COUNT = 2**31 - 1


def token_count(value: Any) -> int | None:
    """A token count (or a context length) as an engine reported it: a whole number from 0 to
    MAX_TOKEN_COUNT (some engines write `10.0`); None for anything else (missing, negative,
    fractional, too large, a boolean, text)."""
    if type(value) is float and value.is_integer():
        value = int(value)
    if type(value) is int and 0 <= value <= MAX_TOKEN_COUNT:
        return value
    return None


def text_or_none(value: Any) -> str | None:
    """A text field; TypeError (the answer is malformed) when it is neither text nor absent."""
    if value is None or type(value) is str:
        return value
    raise TypeError("a text field is not a string")
