"""The `system` prompt and the `messages` list of a Messages request, as canonical messages.

Anthropic and the canonical form cut a conversation differently:
- Anthropic merges consecutive turns of the same role, so they are merged here too.
- A tool's answer is a `tool_result` block inside a user turn; canonically it is a message of
  its own with role `tool`. Each result becomes one such message, in order, placed before the
  rest of that user turn, because OpenAI-style chat templates need every tool answer to follow
  the assistant's calls directly. The tool's name, which Anthropic leaves out of the result, is
  looked up from the assistant's earlier `tool_use` block with the same id.
- Replayed `thinking` blocks become the assistant message's `reasoning`.

Thinking signatures are read but not enforced. A client may legitimately replay thinking that
another gateway instance (with another key) or another provider produced, and the text only goes
back to the model as context the client could have written itself, so a bad signature is no
reason to refuse the request.
"""

from __future__ import annotations

from typing import Any, Literal

from mindrouter.canonical import ImagePart, Message, Part, TextPart, ToolCall
from mindrouter.dialects.anthropic.blocks import Block, Thinking, ToolResult, decode_block
from mindrouter.dialects.anthropic.fields import (
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

_Turn = tuple[Literal["user", "assistant"], list[Block]]

# Thinking blocks of one turn are separate spans of thought (a tool call may sit between them);
# a blank line keeps them apart when replayed as one text.
_THINKING_JOINER = "\n\n"


def decode_system(value: object) -> Message | None:
    """The system prompt: a string or a list of text blocks (cache_control is ignored)."""
    if value is None:
        return None
    if isinstance(value, str):
        return Message(role="system", content=[TextPart(value)]) if value else None
    parts: list[Part] = []
    for i, item in enumerate(as_list(value, "system")):
        path = child("system", i)
        block = as_object(item, path)
        kind = block_type(block, path)
        if kind != "text":
            raise invalid(child(path, "type"), f"system blocks must be text blocks, got {kind!r}")
        parts.append(TextPart(as_str(required(block, "text", path), child(path, "text"))))
    return Message(role="system", content=parts) if parts else None


def decode_messages(value: object) -> list[Message]:
    return _to_canonical(_read_turns(value))


def _read_turns(value: object) -> list[_Turn]:
    turns: list[_Turn] = []
    for i, item in enumerate(as_list(value, "messages", non_empty=True)):
        path = child("messages", i)
        message = as_object(item, path)
        role_value = as_choice(
            required(message, "role", path), child(path, "role"), ("user", "assistant")
        )
        role: Literal["user", "assistant"] = "user" if role_value == "user" else "assistant"
        blocks = _read_content(required(message, "content", path), child(path, "content"), role)
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, blocks))
    return turns


def _read_content(content: Any, path: str, role: Literal["user", "assistant"]) -> list[Block]:
    if isinstance(content, str):
        return [TextPart(content)]
    if not isinstance(content, list):
        raise wrong_type(path, "a string or an array of content blocks", content)
    if not content:
        raise invalid(path, "must contain at least one content block")
    blocks: list[Block] = []
    for i, item in enumerate(content):
        block = decode_block(item, child(path, i), role)
        if block is not None:
            blocks.append(block)
    return blocks


def _to_canonical(turns: list[_Turn]) -> list[Message]:
    tool_names: dict[str, str] = {}
    out: list[Message] = []
    for role, blocks in turns:
        if role == "assistant":
            message = _assistant_message(blocks)
            tool_names.update((call.id, call.name) for call in message.tool_calls)
            out.append(message)
        else:
            out.extend(_user_messages(blocks, tool_names))
    return out


def _assistant_message(blocks: list[Block]) -> Message:
    content: list[Part] = []
    thoughts: list[str] = []
    calls: list[ToolCall] = []
    for block in blocks:
        if isinstance(block, ToolCall):
            calls.append(block)
        elif isinstance(block, Thinking):
            thoughts.append(block.text)
        elif isinstance(block, TextPart | ImagePart):
            content.append(block)
    reasoning = _THINKING_JOINER.join(thoughts) if thoughts else None
    return Message(role="assistant", content=content, reasoning=reasoning, tool_calls=calls)


def _user_messages(blocks: list[Block], tool_names: dict[str, str]) -> list[Message]:
    results: list[Message] = []
    rest: list[Part] = []
    for block in blocks:
        if isinstance(block, ToolResult):
            name = tool_names.get(block.tool_use_id)
            if name is None:
                raise invalid(
                    child(block.path, "tool_use_id"),
                    f"no earlier tool_use block has the id {block.tool_use_id!r}",
                )
            results.append(
                Message(
                    role="tool",
                    content=block.content,
                    tool_call_id=block.tool_use_id,
                    name=name,
                    is_error=block.is_error,
                )
            )
        elif isinstance(block, TextPart | ImagePart):
            rest.append(block)
    if rest:
        results.append(Message(role="user", content=rest))
    return results
