"""Encode canonical stream events as OpenAI server-sent events.

Each event becomes its own `data: <compact JSON>` chunk at once, never held back to be merged
with the next, so the client sees tokens as soon as the backend produces them. This is the hot
path: the part of every chunk that never changes (id, object, created, model) is serialised once
per stream, and only the choice is built per event.

A stream ends with the finish chunk of every choice that did not get one, the usage chunk
(`choices: []`) when the client asked for it, then `data: [DONE]`. A failure after the stream
started ends it with OpenAI's in-band `data: {"error": ...}` line, then `[DONE]`.
"""

from __future__ import annotations

from typing import ClassVar

import orjson

from mindrouter.canonical import (
    Done,
    Finish,
    FinishReason,
    ReasoningDelta,
    StreamEvent,
    StreamFailed,
    TextDelta,
    ToolCallArgs,
    ToolCallStart,
    Usage,
)
from mindrouter.dialects.openai.encode import (
    CHAT_FINISH,
    COMPLETION_FINISH,
    ReasoningField,
    encode_usage,
    reasoning_keys,
)
from mindrouter.dialects.openai.errors import encode_error_event

DONE = b"data: [DONE]\n\n"
_NOT_FINISHED = b',"logprobs":null,"finish_reason":null}'
_ROLE_DELTA = b'"delta":{"role":"assistant","content":""}' + _NOT_FINISHED


class _SSEStream:
    """Framing shared by both endpoints: the constant chunk head, finishing and the endings."""

    content_type: ClassVar[str] = "text/event-stream"
    _finish_map: ClassVar[dict[FinishReason, str]]

    def __init__(
        self, *, object_name: str, request_id: str, model: str, created: int, include_usage: bool
    ) -> None:
        fixed = {
            "id": request_id,
            "object": object_name,
            "created": created,
            "model": model,
            "system_fingerprint": None,
        }
        head = b"data: " + orjson.dumps(fixed)[:-1]
        self._open = head + b',"choices":['
        self._close = b'],"usage":null}\n\n' if include_usage else b"]}\n\n"
        self._usage_open = head + b',"choices":[],"usage":' if include_usage else None
        self._choices: set[int] = set()  # choices the client has seen
        self._finished: set[int] = set()  # ... and those it has seen the finish reason of
        self._called: set[int] = set()  # choices that called tools, for an implied finish
        self._closed = False

    def _chunk(self, choice: int, body: bytes) -> bytes:
        """One chunk holding one choice; `body` is the choice object after its index."""
        return b'%s{"index":%d,%s%s' % (self._open, choice, body, self._close)

    def _finish_chunk(self, choice: int, reason: str) -> bytes:
        raise NotImplementedError

    def _finish(self, choice: int, reason: FinishReason) -> bytes:
        self._finished.add(choice)
        return self._finish_chunk(choice, self._finish_map[reason])

    def _end(self, usage: Usage) -> bytes:
        self._closed = True
        parts = [
            # A choice the backend never finished ends the normal way for what it produced.
            self._finish_chunk(choice, "tool_calls" if choice in self._called else "stop")
            for choice in sorted(self._choices - self._finished)
        ]
        if self._usage_open is not None:
            parts.append(self._usage_open + orjson.dumps(encode_usage(usage)) + b"}\n\n")
        parts.append(DONE)
        return b"".join(parts)

    def _fail(self, event: StreamFailed) -> bytes:
        self._closed = True
        return encode_error_event(event.error) + DONE


class ChatStreamEncoder(_SSEStream):
    """Chunks for `/v1/chat/completions` (`object: chat.completion.chunk`).

    Every choice opens with a role chunk: `start()` opens choices 0..n-1, and a choice first seen
    later (or before `start()` was called) is opened just ahead of its first chunk. A failure
    needs no opening.
    """

    _finish_map = CHAT_FINISH

    def __init__(
        self,
        *,
        request_id: str,
        model: str,
        created: int,
        include_usage: bool,
        reasoning_field: ReasoningField = "reasoning_content",
        n: int = 1,
    ) -> None:
        super().__init__(
            object_name="chat.completion.chunk",
            request_id=request_id,
            model=model,
            created=created,
            include_usage=include_usage,
        )
        self._n = n
        self._reasoning_keys = [b'"%s":' % key.encode() for key in reasoning_keys(reasoning_field)]
        self._started = False

    def start(self) -> bytes:
        """The opening chunk of every choice: `delta: {"role": "assistant", "content": ""}`."""
        if self._started:
            return b""
        self._started = True
        return b"".join(self._opening(choice) for choice in range(self._n))

    def _opening(self, choice: int) -> bytes:
        self._choices.add(choice)
        return self._chunk(choice, _ROLE_DELTA)

    def encode(self, event: StreamEvent) -> bytes:
        """The SSE bytes for one event; b"" when it has nothing to tell an OpenAI client."""
        if self._closed:
            return b""
        # Most frequent events first: this runs once per generated token.
        if isinstance(event, TextDelta):
            delta = b'{"content":' + orjson.dumps(event.text) + b"}"
        elif isinstance(event, ReasoningDelta):
            text = orjson.dumps(event.text)
            delta = b"{" + b",".join(key + text for key in self._reasoning_keys) + b"}"
        elif isinstance(event, ToolCallArgs):
            delta = b'{"tool_calls":[{"index":%d,"function":{"arguments":%s}}]}' % (
                event.index,
                orjson.dumps(event.fragment),
            )
        elif isinstance(event, ToolCallStart):
            self._called.add(event.choice)
            call = {
                "index": event.index,
                "id": event.id,
                "type": "function",
                "function": {"name": event.name, "arguments": ""},
            }
            delta = orjson.dumps({"tool_calls": [call]})
        elif isinstance(event, Finish):
            return self._opened(event.choice, self._finish(event.choice, event.reason))
        elif isinstance(event, Done):
            return self.start() + self._end(event.usage)
        elif isinstance(event, StreamFailed):
            return self._fail(event)
        else:
            # Tool-call ends and reasoning signatures have no OpenAI form.
            return self.start()
        return self._opened(
            event.choice, self._chunk(event.choice, b'"delta":' + delta + _NOT_FINISHED)
        )

    def _opened(self, choice: int, chunk: bytes) -> bytes:
        """`chunk`, preceded by the opening of its choice when the client has not seen it yet."""
        if self._started and choice in self._choices:
            return chunk
        opening = self.start()
        if choice not in self._choices:
            opening += self._opening(choice)
        return opening + chunk

    def _finish_chunk(self, choice: int, reason: str) -> bytes:
        return self._chunk(
            choice, b'"delta":{},"logprobs":null,"finish_reason":"%s"}' % reason.encode()
        )


class CompletionStreamEncoder(_SSEStream):
    """Chunks for the legacy `/v1/completions` (`object: text_completion`).

    Only text reaches the client: legacy completions have no place for reasoning or tool calls.
    """

    _finish_map = COMPLETION_FINISH

    def __init__(
        self, *, request_id: str, model: str, created: int, include_usage: bool, n: int = 1
    ) -> None:
        super().__init__(
            object_name="text_completion",
            request_id=request_id,
            model=model,
            created=created,
            include_usage=include_usage,
        )
        self._choices.update(range(n))

    def start(self) -> bytes:
        """Nothing: unlike chat, a text completion stream has no opening chunk."""
        return b""

    def encode(self, event: StreamEvent) -> bytes:
        """The SSE bytes for one event; b"" when it has nothing to tell an OpenAI client."""
        if self._closed:
            return b""
        if isinstance(event, TextDelta):
            self._choices.add(event.choice)
            return self._chunk(event.choice, b'"text":' + orjson.dumps(event.text) + _NOT_FINISHED)
        if isinstance(event, Finish):
            return self._finish(event.choice, event.reason)
        if isinstance(event, Done):
            return self._end(event.usage)
        if isinstance(event, StreamFailed):
            return self._fail(event)
        return b""

    def _finish_chunk(self, choice: int, reason: str) -> bytes:
        return self._chunk(
            choice, b'"text":"","logprobs":null,"finish_reason":"%s"}' % reason.encode()
        )
