"""Decode the `messages` array of a chat request into canonical messages.

`developer` is the newer name for `system`. Legacy `function` messages become tool results; the
legacy assistant `function_call` they answer becomes a tool call. Neither carries an id on the
wire, so both get the same id derived from the assistant message's position, which keeps decoding
deterministic and lets backends that need ids pair them up.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from mindrouter.canonical import ImagePart, Message, Part, Role, TextPart, ToolCall
from mindrouter.dialects.openai.fields import (
    JSONObject,
    as_list,
    as_object,
    invalid,
    kind_of,
    opt_str,
    path,
    req_str,
)

_ROLES: dict[str, Role] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
    "function": "tool",
}
_IMAGE_DETAILS = frozenset({"auto", "low", "high", "original"})
_UNSUPPORTED_PARTS = {"input_audio": "audio input", "file": "file input"}


def decode_messages(value: object) -> list[Message]:
    items = as_list(value, "messages", non_empty=True)
    messages: list[Message] = []
    # The id minted for the latest legacy function_call, which the next `function` result answers.
    pending_function_id: str | None = None
    for i, item in enumerate(items):
        where = path("messages", i)
        obj = as_object(item, where)
        role = obj.get("role")
        if not isinstance(role, str) or role not in _ROLES:
            shown = repr(role) if isinstance(role, str) else kind_of(role)
            raise invalid(
                path(where, "role"),
                f"must be one of system, developer, user, assistant, tool, function; got {shown}",
            )
        if role == "assistant":
            message = _assistant(obj, where, i)
            if obj.get("function_call") is not None:
                pending_function_id = _legacy_id(i)
        elif role == "tool":
            message = Message(
                role="tool",
                content=_text_parts(obj, where),
                tool_call_id=req_str(obj, "tool_call_id", where, non_empty=True),
                name=opt_str(obj, "name", where),
            )
        elif role == "function":
            message = Message(
                role="tool",
                content=_text_parts(obj, where, nullable=True),
                tool_call_id=pending_function_id or _legacy_id(i),
                name=req_str(obj, "name", where, non_empty=True),
            )
            pending_function_id = None
        elif role == "user":
            opt_str(obj, "name", where)
            message = Message(role="user", content=_user_parts(obj, where))
        else:
            opt_str(obj, "name", where)
            message = Message(role="system", content=_text_parts(obj, where))
        messages.append(message)
    return messages


def _legacy_id(position: int) -> str:
    return f"call_fn_{position}"


def _assistant(obj: JSONObject, where: str, position: int) -> Message:
    calls = _tool_calls(obj, where)
    legacy = obj.get("function_call")
    if legacy is not None:
        fn = as_object(legacy, path(where, "function_call"))
        calls.append(_call(fn, path(where, "function_call"), _legacy_id(position)))
    reasoning = opt_str(obj, "reasoning_content", where)
    if reasoning is None:
        reasoning = opt_str(obj, "reasoning", where)
    refusal = opt_str(obj, "refusal", where)
    content: list[Part] = []
    if obj.get("content") is not None:
        content = _text_parts(obj, where, assistant=True)
    elif refusal is not None:
        # A refusal is what the assistant said; the canonical form keeps it as its text.
        content = [TextPart(refusal)]
    elif not calls and reasoning is None:
        raise invalid(path(where, "content"), "is required unless the message has tool_calls")
    return Message(role="assistant", content=content, reasoning=reasoning, tool_calls=calls)


def _tool_calls(obj: JSONObject, where: str) -> list[ToolCall]:
    value = obj.get("tool_calls")
    if value is None:
        return []
    calls = []
    for j, item in enumerate(as_list(value, path(where, "tool_calls"))):
        at = path(path(where, "tool_calls"), j)
        call = as_object(item, at)
        kind = call.get("type", "function")
        if kind != "function":
            raise invalid(path(at, "type"), f"unsupported tool call type {kind!r}")
        fn = call.get("function")
        if fn is None:
            raise invalid(path(at, "function"), "is required")
        call_id = req_str(call, "id", at, non_empty=True)
        calls.append(_call(as_object(fn, path(at, "function")), path(at, "function"), call_id))
    return calls


def _call(fn: JSONObject, at: str, call_id: str) -> ToolCall:
    name = req_str(fn, "name", at, non_empty=True)
    arguments = fn.get("arguments")
    if not isinstance(arguments, str):
        raise invalid(
            path(at, "arguments"), f"must be a JSON-encoded string, got {kind_of(arguments)}"
        )
    return ToolCall(id=call_id, name=name, arguments=arguments)


def _text_parts(
    obj: JSONObject, where: str, *, nullable: bool = False, assistant: bool = False
) -> list[Part]:
    """Content that may only hold text: a string or an array of text parts, plus refusal parts
    in assistant turns. Only an assistant turn may have an empty array (it may be all calls)."""
    content = obj.get("content")
    at = path(where, "content")
    if content is None and nullable:
        return []
    if isinstance(content, str):
        return [TextPart(content)]
    parts: list[Part] = []
    for j, item in enumerate(_part_list(content, at, allow_empty=assistant)):
        part_at = path(at, j)
        part = as_object(item, part_at)
        kind = part.get("type")
        if kind == "text":
            parts.append(TextPart(req_str(part, "text", part_at)))
        elif kind == "refusal" and assistant:
            parts.append(TextPart(req_str(part, "refusal", part_at)))
        else:
            raise invalid(part_at, f"{_describe_part(kind)} is not allowed in this message")
    return parts


def _user_parts(obj: JSONObject, where: str) -> list[Part]:
    content = obj.get("content")
    at = path(where, "content")
    if isinstance(content, str):
        return [TextPart(content)]
    parts: list[Part] = []
    for j, item in enumerate(_part_list(content, at)):
        part_at = path(at, j)
        part = as_object(item, part_at)
        kind = part.get("type")
        if kind == "text":
            parts.append(TextPart(req_str(part, "text", part_at)))
        elif kind == "image_url":
            parts.append(_image(part, part_at))
        elif isinstance(kind, str) and kind in _UNSUPPORTED_PARTS:
            raise invalid(part_at, f"{_UNSUPPORTED_PARTS[kind]} ({kind!r} parts) is not supported")
        else:
            raise invalid(part_at, _describe_part(kind))
    return parts


def _part_list(content: object, at: str, *, allow_empty: bool = False) -> list[Any]:
    if content is None:
        raise invalid(at, "is required")
    if not isinstance(content, list):
        raise invalid(at, f"must be a string or an array of content parts, got {kind_of(content)}")
    if not content and not allow_empty:
        raise invalid(at, "must be a string or a non-empty array of content parts")
    return content


def _describe_part(kind: object) -> str:
    if kind is None:
        return "content part has no 'type'"
    if isinstance(kind, str):
        return f"unknown content part type {kind!r}"
    return f"content part 'type' must be a string, got {kind_of(kind)}"


def _image(part: JSONObject, at: str) -> ImagePart:
    spec_at = path(at, "image_url")
    value = part.get("image_url")
    if value is None:
        raise invalid(spec_at, "is required")
    spec = as_object(value, spec_at)
    url = req_str(spec, "url", spec_at, non_empty=True)
    return image_part(url, opt_str(spec, "detail", spec_at), path(spec_at, "url"), spec_at)


def image_part(url: str, detail: str | None, url_at: str, at: str) -> ImagePart:
    """An image given by URL (http(s), or a base64 data: URL), checked; shared by the chat and
    Responses endpoints, whose parts name the URL and the detail differently."""
    if detail is not None and detail not in _IMAGE_DETAILS:
        raise invalid(path(at, "detail"), f"must be auto, low, high or original; got {detail!r}")
    media_type: str | None = None
    lowered = url[:8].lower()
    if lowered.startswith("data:"):
        header, comma, payload = url.partition(",")
        media_type = header[5:].split(";", 1)[0].lower()
        if not comma or not header.endswith(";base64") or not media_type.startswith("image/"):
            raise invalid(url_at, "a data URL must look like data:image/<type>;base64,<data>")
        if not _is_base64(payload):
            raise invalid(url_at, "the data URL's image is empty or not valid base64")
    elif not lowered.startswith(("http://", "https://")):
        raise invalid(url_at, "must be an http(s) URL or a data: URL")
    return ImagePart(url=url, media_type=media_type, detail=detail)


def _is_base64(payload: str) -> bool:
    try:
        return bool(base64.b64decode(payload, validate=True))
    except (binascii.Error, ValueError):
        return False
