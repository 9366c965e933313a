"""OpenAI wire stream chunks → canonical stream events (pure, no I/O).

Give each server-sent event's `data:` payload to `feed_data` (or an already parsed chunk to
`feed`); events collect in `out` for the caller to drain. `close` finishes the stream: it ends
open tool calls, gives every choice its `Finish` and returns the usage (the engine's, or an
estimate when it sent none).

Handles both places engines put `finish_reason` (an empty-delta chunk, or the last content
chunk as vLLM sometimes does), tool-call arguments split anywhere, and a call's name arriving
after its first fragment.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mindrouter.backends.failures import (
    error_from_stream_payload,
    load_stream_json,
    malformed_piece,
)
from mindrouter.backends.fields import text_or_none
from mindrouter.backends.openai_results import (
    arguments_text,
    estimated_usage,
    map_finish,
    mint_call_id,
    read_usage,
    usage_from_openai,
)
from mindrouter.canonical import (
    Finish,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from mindrouter.errors import UpstreamUnavailable

# The payload of the event that ends an OpenAI stream.
_DONE = b"[DONE]"


class _Call:
    """A tool call being streamed. Its start is held back until the name is known."""

    __slots__ = ("id", "name", "pending", "started")

    def __init__(self, call_id: str, name: str | None) -> None:
        self.id = call_id
        self.name = name
        self.pending: list[str] = []
        self.started = False


class ChatStreamDecoder:
    def __init__(self, backend: str, *, keep_reasoning: bool = True) -> None:
        self.backend = backend
        self.keep_reasoning = keep_reasoning
        self.out: list[StreamEvent] = []
        self.usage: Usage | None = None
        self._reported = False
        # Everything generated, kept only to estimate usage if the engine reports none.
        self._generated: list[str] = []
        self._open: dict[int, dict[int, _Call]] = {}
        self._called: set[int] = set()
        self._seen: set[int] = set()
        self._finished: set[int] = set()
        self.saw_done = False

    def feed_data(self, data: bytes) -> bool:
        """One event's payload; False at `[DONE]`, the stream's last."""
        if data == _DONE:
            self.saw_done = True
            return False
        self.feed(load_stream_json(data, self.backend))
        return True

    def feed(self, chunk: Any) -> None:
        """One parsed chunk. A chunk of an unexpected shape (a list where an object belongs,
        text that is not a string) fails the stream as the engine's fault, as one that is not
        JSON does: before the first event the request then goes to another backend."""
        if not isinstance(chunk, dict):
            return
        try:
            error = chunk.get("error")
            if error is not None:
                raise error_from_stream_payload(error, self.backend)
            usage = chunk.get("usage")
            reported = usage_from_openai(usage) if isinstance(usage, dict) else None
            if reported is not None:
                self.usage, self._reported = reported, True
            elif not self._reported and "timings" in chunk:
                # llama.cpp's timings stand in until (unless) a proper usage object arrives.
                self.usage = read_usage(chunk) or self.usage
            for c in chunk.get("choices") or ():
                self._choice(c)
        except (AttributeError, TypeError) as exc:
            raise malformed_piece(self.backend) from exc

    def _choice(self, c: dict[str, Any]) -> None:
        """One choice of a chunk (its structure is checked by `feed`)."""
        idx = c.get("index", 0)
        if type(idx) is not int:
            raise TypeError("a choice's index is not a number")
        self._seen.add(idx)
        delta = c.get("delta")
        if delta is not None:
            # The common delta holds only content: the rest is looked at when present.
            if "reasoning" in delta or "reasoning_content" in delta:
                self._reasoning(idx, delta)
            text = delta.get("content")
        else:
            text = c.get("text")  # a legacy completion's choice
        if text:
            if type(text) is not str:
                raise TypeError("the text is not a string")
            self.out.append(TextDelta(text, idx))
            self._generated.append(text)
        if delta is not None and "tool_calls" in delta:
            self._call_fragments(idx, delta["tool_calls"])
        reason = c.get("finish_reason")
        if reason:
            self._finish(idx, reason, c.get("stop_reason"))

    def _reasoning(self, idx: int, delta: dict[str, Any]) -> None:
        # During the rename period vLLM sent both names with the same text: take one.
        reasoning = text_or_none(delta.get("reasoning") or delta.get("reasoning_content"))
        if reasoning:
            self._generated.append(reasoning)
            if self.keep_reasoning:
                self.out.append(ReasoningDelta(reasoning, idx))

    def _call_fragments(self, idx: int, fragments: list[dict[str, Any]] | None) -> None:
        for fragment in fragments or ():
            self._call_fragment(idx, fragment)

    def _call_fragment(self, idx: int, fragment: dict[str, Any]) -> None:
        index = fragment.get("index", 0)
        if type(index) is not int:
            raise TypeError("a tool call's index is not a number")
        fn = fragment.get("function") or {}
        name = text_or_none(fn.get("name"))
        open_calls = self._open.setdefault(idx, {})
        call = open_calls.get(index)
        if call is None:
            # A new call begins: calls are streamed one after another, so the others are done.
            self._end_calls(idx)
            call_id = text_or_none(fragment.get("id")) or mint_call_id()
            call = open_calls[index] = _Call(call_id, name)
            self._called.add(idx)
        elif call.name is None and name:
            call.name = name
        args = arguments_text(fn.get("arguments"))
        if args:
            self._generated.append(args)
        if call.started:
            if args:
                self.out.append(ToolCallArgs(index, args, idx))
        elif call.name is not None:
            self._start(idx, index, call, args)
        elif args:
            call.pending.append(args)

    def _start(self, idx: int, index: int, call: _Call, args: str = "") -> None:
        call.started = True
        self.out.append(ToolCallStart(index, call.id, call.name or "", idx))
        for piece in call.pending:
            self.out.append(ToolCallArgs(index, piece, idx))
        call.pending.clear()
        if args:
            self.out.append(ToolCallArgs(index, args, idx))

    def _end_calls(self, idx: int) -> None:
        open_calls = self._open.get(idx)
        if not open_calls:
            return
        for index, call in open_calls.items():
            if not call.started:
                self._start(idx, index, call)
            self.out.append(ToolCallEnd(index, idx))
        open_calls.clear()

    def _finish(self, idx: int, reason: str, stop_reason: Any) -> None:
        if idx in self._finished:
            return
        self._end_calls(idx)
        self._finished.add(idx)
        mapped = map_finish(reason, stop_reason, idx in self._called)
        stop = stop_reason if isinstance(stop_reason, str) else None
        self.out.append(Finish(mapped, stop, idx))

    def close(self, *, saw_end_marker: bool, estimate_input: Callable[[], int]) -> Usage:
        """Finish the stream after `[DONE]` or the end of the body; returns the usage.

        A body that ended without `[DONE]` is accepted only if every choice had finished;
        otherwise the connection was cut and the answer is incomplete.
        """
        unfinished = sorted(self._seen - self._finished) or ([] if self._finished else [0])
        if unfinished and not saw_end_marker:
            raise UpstreamUnavailable(
                f"{self.backend}: the stream ended before the answer was finished", self.backend
            )
        for idx in unfinished:
            self._finish(idx, "stop", None)
        if self.usage is not None:
            return self.usage
        return estimated_usage(estimate_input(), "".join(self._generated))
