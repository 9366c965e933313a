"""The `system` prompt and the `messages` list of a Messages request, as canonical messages.

Anthropic and the canonical form cut a conversation differently:
- Anthropic merges consecutive turns of the same role, so they are merged here too.
- A tool's answer is a `tool_result` block inside a user turn; canonically it is a message of
  its own with role `tool`. Each result becomes one such message, in order, placed before the
  rest of that user turn, because OpenAI-style chat templates need every tool answer to follow
  the assistant's calls directly. The tool's name, which Anthropic leaves out of the result, is
  looked up from the assistant's earlier `tool_use` block with the same id.
- Replayed `thinking` blocks become the assistant message's `reasoning`.
- A `role: "system"` entry inside `messages` (current Claude Code sends environment notes and
  reminders that way) stays where it is, as a canonical system message: the API applies it from
  that point on. Each backend adapter renders it the way its engine accepts. It also ends a run
  of same-role turns, so the user turns on either side of it stay apart.

Thinking signatures are read but not enforced. A client may legitimately replay thinking that
another gateway instance (with another key) or another provider produced, and the text only goes
back to the model as context the client could have written itself, so a bad signature is no
reason to refuse the request.
"""

from __future__ import annotations

from typing import Any, Literal

from mindrouter.canonical import ImagePart, Message, Part, TextPart, ToolCall
from mindrouter.dialects.anthropic.blocks import (
    Block,
    Thinking,
    ToolResult,
    decode_block,
    decode_system_block,
)
from mindrouter.dialects.anthropic.fields import (
    Dropped,
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

TurnRole = Literal["user", "assistant", "system"]
_Turn = tuple[TurnRole, list[Block]]
_ROLES: tuple[TurnRole, ...] = ("user", "assistant", "system")

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
        check_cache_control(block, path)
        parts.append(TextPart(as_str(required(block, "text", path), child(path, "text"))))
    return Message(role="system", content=parts) if parts else None


def decode_messages(value: object, dropped: Dropped) -> list[Message]:
    return _to_canonical(_read_turns(value, dropped))


def _read_turns(value: object, dropped: Dropped) -> list[_Turn]:
    turns: list[_Turn] = []
    for i, item in enumerate(as_list(value, "messages", non_empty=True)):
        path = child("messages", i)
        message = as_object(item, path)
        role_value = as_choice(required(message, "role", path), child(path, "role"), _ROLES)
        role = next(r for r in _ROLES if r == role_value)
        content_path = child(path, "content")
        if role == "system":
            _system_extras(message, path, dropped)
            # A system message may carry only output_config; content is then absent.
            content = message.get("content")
            blocks = [] if content is None else _read_system(content, content_path, dropped)
            if blocks:
                turns.append((role, blocks))
            continue
        blocks = _read_content(required(message, "content", path), content_path, role, dropped)
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, blocks))
    return turns


def _read_content(
    content: Any, path: str, role: Literal["user", "assistant"], dropped: Dropped
) -> list[Block]:
    if isinstance(content, str):
        return [TextPart(content)]
    if not isinstance(content, list):
        raise wrong_type(path, "a string or an array of content blocks", content)
    if not content:
        raise invalid(path, "must contain at least one content block")
    blocks: list[Block] = []
    for i, item in enumerate(content):
        blocks.extend(decode_block(item, child(path, i), role, dropped))
    return blocks


def _read_system(content: Any, path: str, dropped: Dropped) -> list[Block]:
    if isinstance(content, str):
        return [TextPart(content)] if content else []
    blocks: list[Block] = []
    for i, item in enumerate(as_list(content, path)):
        part = decode_system_block(item, child(path, i), dropped)
        if part is not None and part.text:
            blocks.append(part)
    return blocks


def _system_extras(message: dict[str, Any], path: str, dropped: Dropped) -> None:
    """`clear_at` and a per-turn `output_config`: checked, then dropped (see compatibility)."""
    clear_at = message.get("clear_at")
    if clear_at is not None:
        as_choice(clear_at, child(path, "clear_at"), ("next_user_message", "never"))
        dropped.add(child(path, "clear_at"))
    config = message.get("output_config")
    if config is not None:
        as_object(config, child(path, "output_config"))
        dropped.add(child(path, "output_config"))


def _to_canonical(turns: list[_Turn]) -> list[Message]:
    tool_names: dict[str, str] = {}
    out: list[Message] = []
    for role, blocks in turns:
        if role == "system":
            texts: list[Part] = [b for b in blocks if isinstance(b, TextPart)]
            out.append(Message(role="system", content=texts))
        elif role == "assistant":
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
