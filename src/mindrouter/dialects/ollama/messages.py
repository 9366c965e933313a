"""Decode Ollama chat messages and their images into canonical messages.

Ollama attaches images to a message as a whole, not at a position in its text, so the canonical
message gets its text first and the images after it. An assistant's `thinking` becomes the
canonical `reasoning` so it can be replayed to the backend; on other roles it has no meaning.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from mindrouter.canonical import ImagePart, Message, Part, Role, TextPart, sniff_image_type
from mindrouter.dialects.ollama.fields import (
    as_object,
    as_str,
    field,
    invalid,
    kind_of,
    opt_list,
    opt_str,
)
from mindrouter.dialects.ollama.tools import CallLedger, client_ids, decode_tool_calls

_ROLES: dict[str, Role] = {
    "system": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}


def decode_messages(items: list[Any]) -> list[Message]:
    """The `messages` array; an empty one is valid (it is a load call, see lifecycle)."""
    ledger = CallLedger(client_ids(items))
    messages: list[Message] = []
    for i, item in enumerate(items):
        where = field("messages", i)
        obj = as_object(item, where)
        role = _role(obj.get("role"), field(where, "role"))
        content = opt_str(obj, "content", where) or ""
        parts: list[Part] = [TextPart(content)] if content else []
        parts.extend(decode_images(obj.get("images"), field(where, "images")))
        thinking = opt_str(obj, "thinking", where)
        tool_name = opt_str(obj, "tool_name", where) or None
        tool_call_id = opt_str(obj, "tool_call_id", where) or None
        message = Message(role=role, content=parts)
        if role == "assistant":
            message.reasoning = thinking
            message.tool_calls = decode_tool_calls(obj, where, ledger)
        elif opt_list(obj, "tool_calls", where):
            raise invalid(
                field(where, "tool_calls"), "only assistant messages can carry tool calls"
            )
        if role == "tool":
            message.tool_call_id, message.name = ledger.answer(tool_call_id, tool_name)
        messages.append(message)
    return messages


def _role(value: object, param: str) -> Role:
    if isinstance(value, str) and value in _ROLES:
        return _ROLES[value]
    if value is None:
        raise invalid(param, "is required")
    shown = repr(value) if isinstance(value, str) else kind_of(value)
    raise invalid(param, f"must be one of system, user, assistant, tool; got {shown}")


def decode_images(value: object, param: str) -> list[ImagePart]:
    """An `images` array of bare base64 strings, decoded into bytes with a sniffed media type."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise invalid(param, f"must be an array of base64 strings, got {kind_of(value)}")
    return [decode_image(item, field(param, i)) for i, item in enumerate(value)]


def decode_image(value: object, param: str) -> ImagePart:
    text = as_str(value, param)
    media_type: str | None = None
    # Ollama wants bare base64, but a data: URL is an easy mistake whose meaning is unambiguous.
    if text.startswith("data:"):
        header, comma, payload = text.partition(",")
        if not comma or not header.endswith(";base64"):
            raise invalid(param, "a data: URL image must be base64-encoded")
        media_type = header[5:].split(";", 1)[0] or None
        text = payload
    data = _b64decode(text)
    if data is None:
        raise invalid(param, "is not valid base64 image data")
    if not data:
        raise invalid(param, "must not be empty")
    return ImagePart(data=data, media_type=media_type or sniff_image_type(data))


def _b64decode(text: str) -> bytes | None:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        pass
    # Line-wrapped output (as from the `base64` tool) and missing padding are still unambiguous.
    compact = "".join(text.split())
    compact += "=" * (-len(compact) % 4)
    try:
        return base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError):
        return None
