"""Decode a Responses `input` (a string, or a list of items) into canonical messages.

The Responses API speaks in items rather than messages: a message item per turn (roles `user`,
`system`, `developer` and `assistant`), and separate `function_call`, `function_call_output`
and `reasoning` items. Canonical messages group them back into turns: an assistant's text, the
reasoning that preceded it and the calls that followed it are one assistant message, and each
call's output is a tool message answering that call's `call_id`.

`normalize_items` turns what a client sent into the full item form (ids, typed parts, status),
which is what a stored response lists as its input and replays to a follow-up.
"""

from __future__ import annotations

import os

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
from mindrouter.dialects.openai.messages import image_part

_MESSAGE_ROLES: dict[str, Role] = {
    "user": "user",
    "system": "system",
    "developer": "system",
    "assistant": "assistant",
}
# Item types the API defines that only OpenAI's own hosted tools produce or consume.
_HOSTED_ITEMS = frozenset(
    {
        "file_search_call",
        "computer_call",
        "computer_call_output",
        "web_search_call",
        "image_generation_call",
        "code_interpreter_call",
        "local_shell_call",
        "local_shell_call_output",
        "shell_call",
        "shell_call_output",
        "apply_patch_call",
        "apply_patch_call_output",
        "mcp_list_tools",
        "mcp_approval_request",
        "mcp_approval_response",
        "mcp_call",
        "custom_tool_call",
        "custom_tool_call_output",
        "tool_search_call",
        "tool_search_output",
        "compaction",
        "compaction_trigger",
        "additional_tools",
        "item_reference",
    }
)


def decode_input(value: object, at: str = "input") -> list[Message]:
    """The conversation an `input` stands for."""
    if isinstance(value, str):
        return [Message(role="user", content=[TextPart(value)])]
    items = as_list(value, at)
    builder = _Turns()
    for i, item in enumerate(items):
        builder.add(as_object(item, path(at, i)), path(at, i))
    return builder.finish()


def normalize_items(value: object) -> list[JSONObject]:
    """`input` in the full item form, each with an id; call it once `decode_input` accepted it."""
    if isinstance(value, str):
        value = [{"role": "user", "content": value}]
    out: list[JSONObject] = []
    for item in value if isinstance(value, list) else []:
        obj = dict(item)
        kind = obj.get("type") or "message"
        obj["type"] = kind
        if kind == "message":
            content = obj.get("content")
            if isinstance(content, str):
                part: JSONObject = {"type": "input_text", "text": content}
                if obj.get("role") == "assistant":
                    part = {"type": "output_text", "text": content, "annotations": []}
                obj["content"] = [part]
            obj.setdefault("status", "completed")
        obj.setdefault("id", f"{_PREFIX.get(kind, 'item')}_{os.urandom(12).hex()}")
        out.append(obj)
    return out


_PREFIX = {
    "message": "msg",
    "function_call": "fc",
    "function_call_output": "fco",
    "reasoning": "rs",
}


class _Turns:
    """Groups items into canonical messages as they come."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.reasoning: list[str] = []  # reasoning items waiting for their assistant turn

    def add(self, item: JSONObject, at: str) -> None:
        kind = item.get("type")
        if kind is None or kind == "message":
            self._message(item, at)
        elif kind == "function_call":
            call = ToolCall(
                id=req_str(item, "call_id", at, non_empty=True),
                name=req_str(item, "name", at, non_empty=True),
                arguments=_arguments(item, at),
            )
            self._assistant().tool_calls.append(call)
        elif kind == "function_call_output":
            self.messages.append(
                Message(
                    role="tool",
                    content=_output(item.get("output"), path(at, "output")),
                    tool_call_id=req_str(item, "call_id", at, non_empty=True),
                )
            )
        elif kind == "reasoning":
            text = _reasoning_text(item, at)
            if text:
                self.reasoning.append(text)
        elif isinstance(kind, str) and kind in _HOSTED_ITEMS:
            raise invalid(
                path(at, "type"), f"{kind!r} items belong to hosted tools, not served here"
            )
        else:
            shown = repr(kind) if isinstance(kind, str) else kind_of(kind)
            raise invalid(path(at, "type"), f"unknown input item type {shown}")

    def finish(self) -> list[Message]:
        if self.reasoning:
            self._assistant()  # reasoning last in the input still belongs to an assistant turn
        return self.messages

    def _message(self, item: JSONObject, at: str) -> None:
        role = item.get("role")
        if not isinstance(role, str) or role not in _MESSAGE_ROLES:
            shown = repr(role) if isinstance(role, str) else kind_of(role)
            raise invalid(
                path(at, "role"), f"must be one of user, assistant, system, developer; got {shown}"
            )
        content = _content(item.get("content"), path(at, "content"), assistant=role == "assistant")
        if role == "assistant":
            turn = self._assistant(fresh=True)
            turn.content.extend(content)
            return
        self.messages.append(Message(role=_MESSAGE_ROLES[role], content=content))

    def _assistant(self, *, fresh: bool = False) -> Message:
        """The assistant turn items are being added to: the last message when it is an
        assistant's (text after text stays one turn), a new one after any other message or
        when text follows the turn's tool calls. Waiting reasoning joins it."""
        last = self.messages[-1] if self.messages else None
        if last is None or last.role != "assistant" or (fresh and last.tool_calls):
            last = Message(role="assistant")
            self.messages.append(last)
        if self.reasoning:
            joined = "\n\n".join(self.reasoning)
            last.reasoning = joined if last.reasoning is None else last.reasoning + "\n\n" + joined
            self.reasoning = []
        return last


def _arguments(item: JSONObject, at: str) -> str:
    value = item.get("arguments")
    if not isinstance(value, str):
        raise invalid(path(at, "arguments"), f"must be a JSON-encoded string, got {kind_of(value)}")
    return value


def _reasoning_text(item: JSONObject, at: str) -> str:
    texts: list[str] = []
    for key, part_type in (("content", "reasoning_text"), ("summary", "summary_text")):
        value = item.get(key)
        if value is None:
            continue
        for j, part in enumerate(as_list(value, path(at, key))):
            part_at = path(path(at, key), j)
            obj = as_object(part, part_at)
            if obj.get("type") != part_type:
                raise invalid(path(part_at, "type"), f"must be {part_type!r}")
            texts.append(req_str(obj, "text", part_at))
        if texts:
            break  # the full reasoning text, when given, already holds what the summary says
    return "\n".join(texts)


def _content(value: object, at: str, *, assistant: bool) -> list[Part]:
    if isinstance(value, str):
        return [TextPart(value)]
    parts: list[Part] = []
    for j, item in enumerate(as_list(value, at)):
        part_at = path(at, j)
        part = as_object(item, part_at)
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text"):
            parts.append(TextPart(req_str(part, "text", part_at)))
        elif kind == "refusal" and assistant:
            parts.append(TextPart(req_str(part, "refusal", part_at)))
        elif kind == "input_image" and not assistant:
            parts.append(_image(part, part_at))
        elif kind in ("input_file", "input_audio"):
            raise invalid(part_at, f"{kind!r} parts are not supported; send text or images")
        else:
            shown = repr(kind) if isinstance(kind, str) else kind_of(kind)
            raise invalid(path(part_at, "type"), f"unknown content part type {shown}")
    return parts


def _output(value: object, at: str) -> list[Part]:
    """A function call's output: a string, or a list of text and image parts."""
    if value is None:
        raise invalid(at, "is required")
    return _content(value, at, assistant=False)


def _image(part: JSONObject, at: str) -> ImagePart:
    if part.get("file_id") is not None:
        raise invalid(path(at, "file_id"), "uploaded files are not supported; send image_url")
    url = req_str(part, "image_url", at, non_empty=True)
    return image_part(url, opt_str(part, "detail", at), path(at, "image_url"), at)
