"""Typed readers for one mapping of the YAML configuration, failing with the key's full path.

Each takes the mapping, the key and where the mapping sits (`backends[1]`), so a message names the
exact spot: `backends[1].max_concurrent: must be at least 1`. Strings are checked free of what the
database cannot store, integers against the column that will hold them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mindrouter.bounds import int_problem, text_problem
from mindrouter.settings_sources import read_secret_file


class ConfigError(Exception):
    """The configuration is invalid; the message says where and why."""


def read_value(
    d: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str, default: Any
) -> Any:
    if key not in d or d[key] is None:
        return default
    value = d[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds:
        raise ConfigError(f"{where}.{key}: expected {kinds[0].__name__}, got a boolean")
    if float in kinds and isinstance(value, int):
        return float(value)
    if not isinstance(value, kinds):
        raise ConfigError(
            f"{where}.{key}: expected {kinds[0].__name__}, got {type(value).__name__}"
        )
    if isinstance(value, str) and (problem := text_problem(value)) is not None:
        raise ConfigError(f"{where}.{key}: {problem}")
    return value


def read_int(d: dict[str, Any], key: str, where: str, default: int, span: tuple[int, int]) -> int:
    """An integer the database can hold in its column for the range `span`."""
    value: int = read_value(d, key, int, where, default)
    low, high = span
    problem = int_problem(value, low, high)
    if problem is not None:
        raise ConfigError(f"{where}.{key}: {problem}")
    return value


def read_mappings(raw: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = raw.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ConfigError(f"{key}: expected a list of mappings")
    return value


def read_name(d: dict[str, Any], where: str) -> str:
    name = d.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}.name: required, a non-empty string")
    if (problem := text_problem(name)) is not None:
        raise ConfigError(f"{where}.name: {problem}")
    return name


def read_secret(d: dict[str, Any], key: str, where: str, base: Path | None) -> str | None:
    """`key` itself, or the contents of the file `key_file` names (one trailing newline
    dropped, as `echo` leaves it)."""
    inline: str | None = read_value(d, key, str, where, None)
    path: str | None = read_value(d, f"{key}_file", str, where, None)
    if path is None:
        return inline
    if inline is not None:
        raise ConfigError(f"{where}.{key} and {where}.{key}_file: give one of them")
    try:
        return read_secret_file(path, base)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{where}.{key}_file: {exc}") from None
