"""Content blocks of a Messages request, one at a time, into canonical parts.

A block decodes to a canonical `TextPart`, `ImagePart` or `ToolCall`, or to one of the two small
records below for what needs its whole turn to place (tool results, replayed thinking). Which
blocks may appear in which role follows the Messages API: tool results and images come from the
user, tool calls and thinking from the assistant.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from mindrouter.canonical import ImagePart, Part, TextPart, ToolCall
from mindrouter.dialects.anthropic.fields import (
    as_bool,
    as_choice,
    as_list,
    as_object,
    as_str,
    block_type,
    child,
    invalid,
    required,
    wrong_type,
)

IMAGE_MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")

_USER_BLOCKS = frozenset({"text", "image", "tool_result"})
_ASSISTANT_BLOCKS = frozenset({"text", "tool_use", "thinking", "redacted_thinking"})


@dataclass(slots=True)
class ToolResult:
    tool_use_id: str
    content: list[Part] = field(default_factory=list)
    is_error: bool = False
    # Where the block was, so a result for an unknown call can be reported precisely.
    path: str = ""


@dataclass(slots=True)
class Thinking:
    text: str
    signature: str | None


Block = TextPart | ImagePart | ToolCall | ToolResult | Thinking


def decode_block(value: object, path: str, role: Literal["user", "assistant"]) -> Block | None:
    """One content block; None for blocks that carry nothing a backend can use."""
    block = as_object(value, path)
    kind = block_type(block, path)
    type_path = child(path, "type")
    if kind == "document":
        raise invalid(type_path, "document blocks are not supported by this gateway")
    allowed = _USER_BLOCKS if role == "user" else _ASSISTANT_BLOCKS
    if kind not in allowed:
        if kind in _USER_BLOCKS or kind in _ASSISTANT_BLOCKS:
            other = "assistant" if role == "user" else "user"
            raise invalid(type_path, f"{kind} blocks are only allowed in {other} messages")
        raise invalid(type_path, f"unknown content block type {kind!r}")
    if kind == "text":
        return decode_text(block, path)
    if kind == "image":
        return decode_image(block, path)
    if kind == "tool_result":
        return _decode_tool_result(block, path)
    if kind == "tool_use":
        return _decode_tool_use(block, path)
    if kind == "thinking":
        text = as_str(required(block, "thinking", path), child(path, "thinking"))
        signature = block.get("signature")
        if signature is not None:
            as_str(signature, child(path, "signature"))
        return Thinking(text, signature)
    # redacted_thinking: opaque data only its issuer can read; there is nothing to replay.
    return None


def decode_text(block: dict[str, Any], path: str) -> TextPart:
    return TextPart(as_str(required(block, "text", path), child(path, "text")))


def decode_image(block: dict[str, Any], path: str) -> ImagePart:
    source_path = child(path, "source")
    source = as_object(required(block, "source", path), source_path)
    kind = as_choice(
        required(source, "type", source_path), child(source_path, "type"), ("base64", "url")
    )
    if kind == "url":
        return ImagePart(
            url=as_str(required(source, "url", source_path), child(source_path, "url"))
        )
    media_type = as_choice(
        required(source, "media_type", source_path),
        child(source_path, "media_type"),
        IMAGE_MEDIA_TYPES,
    )
    data_path = child(source_path, "data")
    encoded = as_str(required(source, "data", source_path), data_path, non_empty=True)
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise invalid(
            data_path, "is not valid base64 (send the bare data, no data: prefix)"
        ) from None
    return ImagePart(data=data, media_type=media_type)


def _decode_tool_result(block: dict[str, Any], path: str) -> ToolResult:
    tool_use_id = as_str(required(block, "tool_use_id", path), child(path, "tool_use_id"))
    is_error = block.get("is_error")
    result = ToolResult(
        tool_use_id=tool_use_id,
        is_error=False if is_error is None else as_bool(is_error, child(path, "is_error")),
        path=path,
    )
    content = block.get("content")
    content_path = child(path, "content")
    if content is None:
        return result
    if isinstance(content, str):
        result.content.append(TextPart(content))
        return result
    for i, item in enumerate(as_list(content, content_path)):
        item_path = child(content_path, i)
        inner = as_object(item, item_path)
        kind = block_type(inner, item_path)
        if kind == "text":
            result.content.append(decode_text(inner, item_path))
        elif kind == "image":
            result.content.append(decode_image(inner, item_path))
        else:
            raise invalid(
                child(item_path, "type"),
                f"tool_result content may hold only text and image blocks, got {kind!r}",
            )
    return result


def _decode_tool_use(block: dict[str, Any], path: str) -> ToolCall:
    call_id = as_str(required(block, "id", path), child(path, "id"), non_empty=True)
    name = as_str(required(block, "name", path), child(path, "name"), non_empty=True)
    input_path = child(path, "input")
    arguments = as_object(required(block, "input", path), input_path)
    return ToolCall(id=call_id, name=name, arguments=compact_json(arguments, input_path))


def compact_json(value: dict[str, Any], path: str) -> str:
    """The tool input as JSON text, as an OpenAI-style backend expects the arguments."""
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        pass
    # orjson refuses integers beyond 64 bits, lone surrogates and very deep nesting; the
    # standard library copes with the first two, which a JSON parser may well have let through
    # (escaping keeps a lone surrogate from breaking the UTF-8 encoding further on).
    try:
        return json.dumps(value, separators=(",", ":"))
    except (ValueError, RecursionError):
        raise wrong_type(path, "a JSON object that can be serialised", value) from None
