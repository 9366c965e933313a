"""Build a deterministic JSON value that satisfies (the common part of) a JSON Schema.

Used for tool-call arguments and for structured output. Covers what tool and response schemas
use in practice: objects (every declared property is filled, required or not), arrays (one item,
or `minItems`), strings (a word; a few well-known formats), integers, numbers, booleans, null,
`enum`, `const`, `anyOf`/`oneOf` (the first branch that is not null), `allOf` (merged) and local
`$ref`s (`#/$defs/...`, `#/definitions/...`, as pydantic emits them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

_MAX_DEPTH = 8

_STRING_FORMATS = {
    "date": "2026-01-01",
    "date-time": "2026-01-01T00:00:00Z",
    "time": "00:00:00",
    "email": "sim@example.com",
    "uri": "https://example.com/",
    "url": "https://example.com/",
    "uuid": "00000000-0000-4000-8000-000000000000",
}


def instance_for_schema(schema: Any, next_word: Callable[[], str]) -> Any:
    """A value valid for `schema`; strings are drawn from `next_word` so replies stay varied."""
    root = schema if isinstance(schema, Mapping) else {}
    return _build(root, root, next_word, 0)


def _resolve(ref: str, root: Mapping[str, Any]) -> Mapping[str, Any]:
    if not ref.startswith("#/"):
        return {}
    node: Any = root
    for key in ref[2:].split("/"):
        if not isinstance(node, Mapping) or key not in node:
            return {}
        node = node[key]
    return node if isinstance(node, Mapping) else {}


def _first_type(schema: Mapping[str, Any]) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list):
        concrete = [k for k in kind if k != "null"]
        return str(concrete[0]) if concrete else "null"
    if isinstance(kind, str):
        return kind
    if "properties" in schema:
        return "object"
    if "items" in schema:
        return "array"
    return None


def _build(
    schema: Mapping[str, Any], root: Mapping[str, Any], next_word: Callable[[], str], depth: int
) -> Any:
    if depth > _MAX_DEPTH:
        return None
    if "$ref" in schema:
        return _build(_resolve(str(schema["$ref"]), root), root, next_word, depth + 1)
    if "const" in schema:
        return schema["const"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    branch = _first_branch(schema)
    if branch is not None:
        return _build(branch, root, next_word, depth + 1)
    all_of = schema.get("allOf")
    if isinstance(all_of, list) and all_of:
        return _build(_merge_all_of(schema, all_of, root), root, next_word, depth + 1)
    return _build_typed(schema, root, next_word, depth)


def _first_branch(schema: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """Of `anyOf` (or else `oneOf`), the first branch that is not null; None without either."""
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if isinstance(branches, list) and branches:
            usable = [b for b in branches if isinstance(b, Mapping) and b.get("type") != "null"]
            chosen = usable[0] if usable else branches[0]
            return chosen if isinstance(chosen, Mapping) else {}
    return None


def _merge_all_of(
    schema: Mapping[str, Any], all_of: list[Any], root: Mapping[str, Any]
) -> dict[str, Any]:
    merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
    for branch in all_of:
        if not isinstance(branch, Mapping):
            continue
        part = _resolve(str(branch["$ref"]), root) if "$ref" in branch else branch
        for key, value in part.items():
            if key == "properties" and isinstance(value, Mapping):
                merged["properties"] = {**merged.get("properties", {}), **value}
            else:
                merged.setdefault(key, value)
    return merged


def _build_typed(
    schema: Mapping[str, Any], root: Mapping[str, Any], next_word: Callable[[], str], depth: int
) -> Any:
    kind = _first_type(schema)
    if kind == "object":
        return _build_object(schema, root, next_word, depth)
    if kind == "array":
        items = schema.get("items")
        count = max(1, int(schema.get("minItems", 1) or 1))
        item_schema = items if isinstance(items, Mapping) else {}
        return [_build(item_schema, root, next_word, depth + 1) for _ in range(count)]
    if kind == "string":
        return _build_string(schema, next_word)
    if kind == "integer":
        return max(1, int(schema.get("minimum", 1)))
    if kind == "number":
        return max(1.5, float(schema.get("minimum", 1.5)))
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    # No usable type information: any JSON value is valid, a word is the friendliest.
    return next_word()


def _build_string(schema: Mapping[str, Any], next_word: Callable[[], str]) -> str:
    fmt = schema.get("format")
    if isinstance(fmt, str) and fmt in _STRING_FORMATS:
        return _STRING_FORMATS[fmt]
    word = next_word()
    min_length = int(schema.get("minLength", 0) or 0)
    while len(word) < min_length:
        word += " " + next_word()
    return word


def _build_object(
    schema: Mapping[str, Any], root: Mapping[str, Any], next_word: Callable[[], str], depth: int
) -> dict[str, Any]:
    properties = schema.get("properties")
    result: dict[str, Any] = {}
    names: list[str] = []
    if isinstance(properties, Mapping):
        names.extend(str(name) for name in properties)
    required = schema.get("required")
    if isinstance(required, list):
        names.extend(str(name) for name in required if name not in names)
    for name in names:
        sub = properties.get(name, {}) if isinstance(properties, Mapping) else {}
        result[name] = _build(sub if isinstance(sub, Mapping) else {}, root, next_word, depth + 1)
    return result
