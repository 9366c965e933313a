"""Content blocks of a Messages request, one at a time, into canonical parts.

A block decodes to canonical `TextPart`s, `ImagePart`s or a `ToolCall`, or to one of the two
small records below for what needs its whole turn to place (tool results, replayed thinking).
Which blocks may appear in which role follows the Messages API: tool results, images and
documents come from the user, tool calls and thinking from the assistant. Blocks the API accepts
but no backend here can use are dropped (see `DROPPED_BLOCKS`); a block type the API does not
know is an error.
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
    Dropped,
    as_bool,
    as_choice,
    as_list,
    as_object,
    as_str,
    block_type,
    check_cache_control,
    child,
    invalid,
    required,
    wrong_type,
)

IMAGE_MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")

_USER_BLOCKS = frozenset({"text", "image", "tool_result", "document", "search_result"})
_ASSISTANT_BLOCKS = frozenset({"text", "tool_use", "thinking", "redacted_thinking", "compaction"})
# Blocks the Messages API accepts that carry nothing an engine behind this gateway can use: the
# traces of Anthropic's server tools (web search, code execution, MCP, …), opaque records only
# Anthropic can read, and mid-conversation tool changes (every tool stays offered throughout).
# They are left out, in either role, and reported as dropped.
DROPPED_BLOCKS = frozenset(
    {
        "server_tool_use",
        "web_search_tool_result",
        "web_fetch_tool_result",
        "advisor_tool_result",
        "code_execution_tool_result",
        "bash_code_execution_tool_result",
        "text_editor_code_execution_tool_result",
        "tool_search_tool_result",
        "mcp_tool_use",
        "mcp_tool_result",
        "mcp_tool_listing",
        "container_upload",
        "fallback",
        "tool_addition",
        "tool_removal",
    }
)


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


def decode_block(
    value: object, path: str, role: Literal["user", "assistant"], dropped: Dropped
) -> list[Block]:
    """One content block, as the blocks it becomes (none for what no backend can use)."""
    block = as_object(value, path)
    kind = block_type(block, path)
    type_path = child(path, "type")
    check_cache_control(block, path)
    if kind in DROPPED_BLOCKS:
        dropped.add(path)
        return []
    _check_role(kind, role, type_path)
    return _decode_kind(kind, block, path, dropped)


def _check_role(kind: str, role: Literal["user", "assistant"], type_path: str) -> None:
    allowed = _USER_BLOCKS if role == "user" else _ASSISTANT_BLOCKS
    if kind not in allowed:
        if kind in _USER_BLOCKS or kind in _ASSISTANT_BLOCKS:
            other = "assistant" if role == "user" else "user"
            raise invalid(type_path, f"{kind} blocks are only allowed in {other} messages")
        raise invalid(type_path, f"unknown content block type {kind!r}")


def _decode_kind(kind: str, block: dict[str, Any], path: str, dropped: Dropped) -> list[Block]:
    if kind == "text":
        return [decode_text(block, path)]
    if kind == "image":
        return [decode_image(block, path)]
    if kind == "document":
        return list(decode_document(block, path, dropped))
    if kind == "search_result":
        return list(decode_search_result(block, path))
    if kind == "tool_result":
        return [_decode_tool_result(block, path, dropped)]
    if kind == "tool_use":
        return [_decode_tool_use(block, path)]
    if kind == "thinking":
        return [_decode_thinking(block, path)]
    if kind == "compaction":
        return _decode_compaction(block, path, dropped)
    # redacted_thinking: opaque data only its issuer can read; there is nothing to replay.
    dropped.add(path)
    return []


def _decode_thinking(block: dict[str, Any], path: str) -> Thinking:
    text = as_str(required(block, "thinking", path), child(path, "thinking"))
    signature = block.get("signature")
    if signature is not None:
        as_str(signature, child(path, "signature"))
    return Thinking(text, signature)


def _decode_compaction(block: dict[str, Any], path: str, dropped: Dropped) -> list[Block]:
    # The summary of the turns a client compacted away: plain context for the model.
    content = block.get("content")
    if content is None:
        dropped.add(path)
        return []
    return [TextPart(as_str(content, child(path, "content")))]


def decode_system_block(value: object, path: str, dropped: Dropped) -> TextPart | None:
    """A block of a `role: "system"` message: text, or a tool change (dropped)."""
    block = as_object(value, path)
    kind = block_type(block, path)
    check_cache_control(block, path)
    if kind in ("tool_addition", "tool_removal"):
        dropped.add(path)
        return None
    if kind != "text":
        raise invalid(
            child(path, "type"), f"system messages may hold only text blocks, got {kind!r}"
        )
    return decode_text(block, path)


def decode_document(block: dict[str, Any], path: str, dropped: Dropped) -> list[Part]:
    """A document whose text can be read is that text; a PDF or a file reference is dropped
    (no backend here reads PDFs)."""
    source_path = child(path, "source")
    source = as_object(required(block, "source", path), source_path)
    kind = as_str(required(source, "type", source_path), child(source_path, "type"))
    if kind == "text":
        text = as_str(required(source, "data", source_path), child(source_path, "data"))
        title = block.get("title")
        if title is not None:
            text = f"{as_str(title, child(path, 'title'))}\n\n{text}"
        return [TextPart(text)]
    if kind == "content":
        content = required(source, "content", source_path)
        content_path = child(source_path, "content")
        if isinstance(content, str):
            return [TextPart(content)]
        parts: list[Part] = []
        for i, item in enumerate(as_list(content, content_path)):
            parts.extend(_inner_part(item, child(content_path, i), dropped))
        return parts
    as_choice(kind, child(source_path, "type"), ("text", "content", "base64", "url", "file"))
    dropped.add(path)
    return []


def decode_search_result(block: dict[str, Any], path: str) -> list[Part]:
    """A search result the client supplies: its title, source and text, as text."""
    title = as_str(required(block, "title", path), child(path, "title"))
    source = as_str(required(block, "source", path), child(path, "source"))
    content_path = child(path, "content")
    texts = [
        decode_text(as_object(item, child(content_path, i)), child(content_path, i)).text
        for i, item in enumerate(as_list(required(block, "content", path), content_path))
    ]
    return [TextPart("\n".join([f"{title} ({source})", *texts]))]


def _inner_part(value: object, path: str, dropped: Dropped) -> list[Part]:
    """A block inside a tool result or a content document."""
    inner = as_object(value, path)
    kind = block_type(inner, path)
    check_cache_control(inner, path)
    if kind == "text":
        return [decode_text(inner, path)]
    if kind == "image":
        return [decode_image(inner, path)]
    if kind == "document":
        return decode_document(inner, path, dropped)
    if kind == "search_result":
        return decode_search_result(inner, path)
    if kind in ("tool_reference", "browser_state"):
        dropped.add(path)
        return []
    raise invalid(
        child(path, "type"),
        f"expected a text, image, document or search_result block, got {kind!r}",
    )


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


def _decode_tool_result(block: dict[str, Any], path: str, dropped: Dropped) -> ToolResult:
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
        result.content.extend(_inner_part(item, child(content_path, i), dropped))
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
