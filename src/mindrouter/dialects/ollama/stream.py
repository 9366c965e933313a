"""Encode canonical stream events as Ollama's NDJSON streams.

Every line is one compact JSON object and a newline, nothing else: the ollama SDK parses each
line as JSON and has no notion of keep-alive blank lines. Intermediate lines say `done: false`;
only the last says `done: true`, and it carries the done reason and the metrics. Ollama sends
nothing before the first token, so `start()` is empty. A failure after the stream has begun is
an `{"error": "..."}` line, which the SDK raises as a ResponseError.

Tool calls reach Ollama clients whole, in one chunk, with object arguments, whereas canonical
streams deliver them as argument fragments; the fragments are buffered until the call ends.
Only the first choice is encoded: Ollama has no `n`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

import orjson

from mindrouter.canonical import (
    Done,
    Finish,
    FinishReason,
    ReasoningDelta,
    StreamEvent,
    StreamFailed,
    TextDelta,
    ToolCall,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from mindrouter.dialects.ollama.errors import encode_error
from mindrouter.dialects.ollama.responses import done_reason, encode_tool_call
from mindrouter.dialects.ollama.timing import Timings, metrics

# Events that carry output; a reasoning signature has no place on this wire.
_DELTAS = (ReasoningDelta, TextDelta, ToolCallStart, ToolCallArgs, ToolCallEnd)


def _line(obj: dict[str, Any]) -> bytes:
    return orjson.dumps(obj) + b"\n"


class _NdjsonEncoder(ABC):
    """What both Ollama streams share: terminal events, the finish reason and the clock."""

    content_type: ClassVar[str] = "application/x-ndjson"

    def __init__(
        self,
        *,
        model: str,
        clock: Callable[[], float],
        started_at: float,
        now_iso: Callable[[], str],
    ) -> None:
        self.model = model
        self._clock = clock
        self._started_at = started_at
        self._now_iso = now_iso
        self._first_token: float | None = None
        self._finish: FinishReason | None = None
        self._closed = False

    def start(self) -> bytes:
        return b""

    def encode(self, event: StreamEvent) -> bytes:
        """The bytes to send for one event: zero or more complete NDJSON lines."""
        if self._closed:
            return b""
        if isinstance(event, Done):
            self._closed = True
            return self._flush() + self._final(event.usage)
        if isinstance(event, StreamFailed):
            self._closed = True
            return _line(encode_error(event.error))
        if isinstance(event, Finish):
            if event.choice == 0:
                self._finish = event.reason
            return b""
        if not isinstance(event, _DELTAS) or event.choice != 0:
            return b""
        if self._first_token is None:
            self._first_token = self._clock()
        return self._delta(event)

    def _head(self) -> dict[str, Any]:
        return {"model": self.model, "created_at": self._now_iso()}

    def _final(self, usage: Usage) -> bytes:
        timings = Timings.from_marks(
            start=self._started_at, first_token=self._first_token, end=self._clock()
        )
        return _line(
            {
                **self._head(),
                **self._final_body(),
                "done": True,
                "done_reason": done_reason(self._finish),
                **self._final_tail(),
                **metrics(timings, usage),
            }
        )

    @abstractmethod
    def _delta(self, event: StreamEvent) -> bytes:
        """The lines for a content event of the first choice."""

    def _flush(self) -> bytes:
        """Lines still owed when the stream ends."""
        return b""

    @abstractmethod
    def _final_body(self) -> dict[str, Any]:
        """The empty content fields of the final line."""

    def _final_tail(self) -> dict[str, Any]:
        return {}


class ChatStreamEncoder(_NdjsonEncoder):
    """/api/chat: `message.thinking` and `message.content` chunks, then whole tool calls."""

    def __init__(
        self,
        *,
        model: str,
        clock: Callable[[], float],
        started_at: float,
        now_iso: Callable[[], str],
    ) -> None:
        super().__init__(model=model, clock=clock, started_at=started_at, now_iso=now_iso)
        # Calls being received, by canonical index: id, name and argument fragments so far.
        self._calls: dict[int, tuple[str, str, list[str]]] = {}

    def _chunk(self, message: dict[str, Any]) -> bytes:
        return _line({**self._head(), "message": message, "done": False})

    def _delta(self, event: StreamEvent) -> bytes:
        if isinstance(event, ReasoningDelta) and event.text:
            return self._chunk({"role": "assistant", "content": "", "thinking": event.text})
        if isinstance(event, TextDelta) and event.text:
            return self._chunk({"role": "assistant", "content": event.text})
        if isinstance(event, ToolCallStart):
            self._calls[event.index] = (event.id, event.name, [])
        elif isinstance(event, ToolCallArgs) and event.index in self._calls:
            self._calls[event.index][2].append(event.fragment)
        elif isinstance(event, ToolCallEnd) and event.index in self._calls:
            return self._emit_call(event.index)
        return b""

    def _emit_call(self, index: int) -> bytes:
        call_id, name, fragments = self._calls.pop(index)
        call = ToolCall(id=call_id, name=name, arguments="".join(fragments))
        return self._chunk(
            {"role": "assistant", "content": "", "tool_calls": [encode_tool_call(call, index)]}
        )

    def _flush(self) -> bytes:
        # A backend that never closed a call still made it; send what arrived rather than drop it.
        return b"".join(self._emit_call(index) for index in sorted(self._calls))

    def _final_body(self) -> dict[str, Any]:
        return {"message": {"role": "assistant", "content": ""}}


class GenerateStreamEncoder(_NdjsonEncoder):
    """/api/generate: `response` fragments, `thinking` at the top level, `context` at the end."""

    def _delta(self, event: StreamEvent) -> bytes:
        if isinstance(event, ReasoningDelta) and event.text:
            body = {**self._head(), "response": "", "thinking": event.text, "done": False}
            return _line(body)
        if isinstance(event, TextDelta) and event.text:
            return _line({**self._head(), "response": event.text, "done": False})
        return b""

    def _final_body(self) -> dict[str, Any]:
        return {"response": ""}

    def _final_tail(self) -> dict[str, Any]:
        return {"context": []}
