"""Canonical stream events as Anthropic server-sent events.

The SDK's accumulator is unforgiving: `message_start` first, every event with an `event:` line,
content blocks numbered 0, 1, 2… and never interleaved, and `output_tokens` in `message_delta`
cumulative. Canonical streams are looser: an OpenAI-style backend may start a second tool call
(or send more text) before the first call's arguments are complete. So while a tool_use block is
open, everything that belongs to other blocks is held back in arrival order and replayed when
that block ends; no fragment is ever dropped or reordered within its own block.

Thinking blocks get the gateway's signature (`thinking.sign_thinking`) in one `signature_delta`
just before they close. Signatures a backend may send (`ReasoningSignature`) mean nothing to an
Anthropic client talking to this gateway and are not forwarded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from mindrouter.canonical import (
    Done,
    Finish,
    ReasoningDelta,
    StreamEvent,
    StreamFailed,
    TextDelta,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from mindrouter.dialects.anthropic.errors import error_object
from mindrouter.dialects.anthropic.response import stop_fields, usage_fields
from mindrouter.dialects.anthropic.thinking import sign_thinking

_TextKind = Literal["text", "thinking"]


def sse(name: str, payload: dict[str, Any]) -> bytes:
    """One event; its `event:` line is required, since the SDK drops events without one."""
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


@dataclass(slots=True)
class _HeldText:
    kind: _TextKind
    parts: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _HeldCall:
    index: int
    id: str
    name: str
    fragments: list[str] = field(default_factory=list)
    ended: bool = False


class MessagesStreamEncoder:
    """Encodes one response stream; feed it every canonical event in order."""

    content_type = "text/event-stream"

    def __init__(
        self,
        *,
        message_id: str,
        model: str,
        input_tokens_hint: Callable[[], int],
        signing_key: bytes,
        return_reasoning: bool = True,
    ) -> None:
        self._message_id = message_id
        self._model = model
        self._input_hint = input_tokens_hint  # asked when the stream starts
        self._key = signing_key
        self._return_reasoning = return_reasoning
        self._started = False
        self._ended = False
        self._next_index = 0
        # The open block: its kind and, for tool_use, the canonical tool-call index.
        self._open: Literal["text", "thinking", "tool"] | None = None
        self._open_tool: int | None = None
        self._thinking: list[str] = []
        # Non-empty only while a tool_use block is open.
        self._held: list[_HeldText | _HeldCall] = []
        self._seen_tools: set[int] = set()
        self._finish: Finish | None = None

    def start(self) -> bytes:
        """`message_start`; sent by `encode` itself if the caller has not sent it first."""
        if self._started:
            return b""
        self._started = True
        message: dict[str, Any] = {
            "id": self._message_id,
            "type": "message",
            "role": "assistant",
            "model": self._model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": max(0, self._input_hint()),
                "output_tokens": 1,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
        }
        return sse("message_start", {"type": "message_start", "message": message})

    def ping(self) -> bytes:
        return sse("ping", {"type": "ping"})

    def encode(self, event: StreamEvent) -> bytes:
        """The bytes to send for one event; b"" when it produces nothing (yet)."""
        if self._ended:
            return b""
        out: list[bytes] = [self.start()]
        if isinstance(event, Done):
            self._end(event.usage, out)
        elif isinstance(event, StreamFailed):
            # The client learns of the failure in-band; no block is closed and no message_stop
            # follows, so the SDK raises instead of returning a message that looks complete.
            out.append(sse("error", {"type": "error", "error": error_object(event.error)}))
            self._ended = True
        elif event.choice != 0:
            pass  # Anthropic has no `n`; only the first choice is ever requested.
        elif isinstance(event, TextDelta):
            self._text(event.text, "text", out)
        elif isinstance(event, ReasoningDelta):
            if self._return_reasoning:
                self._text(event.text, "thinking", out)
        elif isinstance(event, ToolCallStart):
            self._tool_start(event, out)
        elif isinstance(event, ToolCallArgs):
            self._tool_args(event, out)
        elif isinstance(event, ToolCallEnd):
            self._tool_end(event.index, out)
        elif isinstance(event, Finish):
            self._finish = event
        return b"".join(out)

    # Text and thinking.

    def _text(self, text: str, kind: _TextKind, out: list[bytes]) -> None:
        if not text:
            return
        if self._open == "tool":
            last = self._held[-1] if self._held else None
            if isinstance(last, _HeldText) and last.kind == kind:
                last.parts.append(text)
            else:
                self._held.append(_HeldText(kind, [text]))
            return
        if self._open != kind:
            self._close(out)
            block: dict[str, Any] = {"type": "text", "text": ""}
            if kind == "thinking":
                block = {"type": "thinking", "thinking": "", "signature": ""}
            self._open_block(kind, block, out)
        if kind == "thinking":
            self._thinking.append(text)
            self._delta({"type": "thinking_delta", "thinking": text}, out)
        else:
            self._delta({"type": "text_delta", "text": text}, out)

    # Tool calls.

    def _tool_start(self, event: ToolCallStart, out: list[bytes]) -> None:
        if event.index in self._seen_tools:
            return
        self._seen_tools.add(event.index)
        if self._open == "tool":
            self._held.append(_HeldCall(event.index, event.id, event.name))
            return
        self._open_call(event.index, event.id, event.name, out)

    def _tool_args(self, event: ToolCallArgs, out: list[bytes]) -> None:
        if not event.fragment:
            return
        if self._open == "tool" and self._open_tool == event.index:
            self._delta({"type": "input_json_delta", "partial_json": event.fragment}, out)
            return
        call = self._held_call(event.index)
        if call is not None:
            call.fragments.append(event.fragment)

    def _tool_end(self, index: int, out: list[bytes]) -> None:
        if self._open == "tool" and self._open_tool == index:
            self._close(out)
            self._release(out, final=False)
            return
        call = self._held_call(index)
        if call is not None:
            call.ended = True

    def _held_call(self, index: int) -> _HeldCall | None:
        for item in self._held:
            if isinstance(item, _HeldCall) and item.index == index:
                return item
        return None

    def _open_call(self, index: int, call_id: str, name: str, out: list[bytes]) -> None:
        self._close(out)
        # Ids pass through unchanged: the client quotes them back in its tool_result blocks.
        block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
        self._open_block("tool", block, out)
        self._open_tool = index

    def _release(self, out: list[bytes], *, final: bool) -> None:
        """Replays held events in order; stops at a tool call that has not ended (unless final)."""
        while self._held:
            item = self._held.pop(0)
            if isinstance(item, _HeldText):
                self._text("".join(item.parts), item.kind, out)
                continue
            self._open_call(item.index, item.id, item.name, out)
            if item.fragments:
                fragment = "".join(item.fragments)
                self._delta({"type": "input_json_delta", "partial_json": fragment}, out)
            if not (item.ended or final):
                return
            self._close(out)

    # Blocks and the end of the message.

    def _open_block(
        self, kind: Literal["text", "thinking", "tool"], block: dict[str, Any], out: list[bytes]
    ) -> None:
        payload = {"type": "content_block_start", "index": self._next_index, "content_block": block}
        out.append(sse("content_block_start", payload))
        self._open = kind

    def _delta(self, delta: dict[str, str], out: list[bytes]) -> None:
        payload = {"type": "content_block_delta", "index": self._next_index, "delta": delta}
        out.append(sse("content_block_delta", payload))

    def _close(self, out: list[bytes]) -> None:
        if self._open is None:
            return
        if self._open == "thinking":
            signature = sign_thinking("".join(self._thinking), self._key)
            self._delta({"type": "signature_delta", "signature": signature}, out)
            self._thinking = []
        payload = {"type": "content_block_stop", "index": self._next_index}
        out.append(sse("content_block_stop", payload))
        self._open = None
        self._open_tool = None
        self._next_index += 1

    def _end(self, usage: Usage, out: list[bytes]) -> None:
        self._close(out)
        self._release(out, final=True)
        self._close(out)
        if self._finish is not None:
            stop = stop_fields(self._finish.reason, self._finish.stop_sequence)
        else:
            stop = stop_fields("tool_calls" if self._seen_tools else "stop", None)
        totals: dict[str, int] = usage_fields(usage)
        if usage.input_tokens <= 0:
            # No real count came back; the SDK keeps message_start's figure when this is absent.
            del totals["input_tokens"]
        out.append(sse("message_delta", {"type": "message_delta", "delta": stop, "usage": totals}))
        out.append(sse("message_stop", {"type": "message_stop"}))
        self._ended = True
