"""Encode canonical stream events as the Responses API's server-sent events.

Each event is `event: <type>` plus `data: <JSON>` whose `type` repeats the name and whose
`sequence_number` counts from 0. The order clients (the openai SDK's stream helpers, Codex, the
Agents SDK) rely on:

    response.created, response.in_progress
    per output item: response.output_item.added
        message:   content_part.added, output_text.delta*, output_text.done, content_part.done
        reasoning: reasoning_text.delta* (or reasoning_summary_part.added,
                   reasoning_summary_text.delta*, .done, reasoning_summary_part.done)
        call:      function_call_arguments.delta*, function_call_arguments.done
    response.output_item.done
    response.completed | response.incomplete | response.failed (with the whole response)

An item is closed when the next kind of output starts, so items never interleave. Deltas are
written as they arrive; nothing is held back.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import orjson

from mindrouter.canonical import (
    Done,
    Finish,
    ReasoningDelta,
    StreamEvent,
    StreamFailed,
    TextDelta,
    ToolCall,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
)
from mindrouter.dialects.responses.encode import INCOMPLETE, ResponseShape, output_text

JSONObject = dict[str, Any]


class ResponsesStreamEncoder:
    content_type: ClassVar[str] = "text/event-stream"

    def __init__(self, shape: ResponseShape) -> None:
        self.shape = shape
        self.output: list[JSONObject] = []  # finished items
        self.final: JSONObject | None = None  # the response as the last event carried it
        self._seq = 0
        self._open: str | None = None  # "reasoning" | "message" | "call"
        self._text: list[str] = []
        self._call: ToolCall | None = None
        self._incomplete: str | None = None

    # -- framing ---------------------------------------------------------------------------

    def _event(self, kind: str, body: JSONObject) -> bytes:
        body["type"] = kind
        body["sequence_number"] = self._seq
        self._seq += 1
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(body) + b"\n\n"

    def _where(self) -> JSONObject:
        return {"item_id": self._item_id(), "output_index": len(self.output)}

    def _item_id(self) -> str:
        kind = {"reasoning": "rs", "message": "msg", "call": "fc"}[self._open or "message"]
        return self.shape.item_id(kind, len(self.output))

    # -- the encoder protocol ----------------------------------------------------------------

    def start(self) -> bytes:
        snapshot = self.shape.render(status="in_progress", output=[])
        return self._event("response.created", {"response": snapshot}) + self._event(
            "response.in_progress", {"response": snapshot}
        )

    def encode(self, event: StreamEvent) -> bytes:
        if isinstance(event, TextDelta):
            return self._delta("message", event.text)
        if isinstance(event, ReasoningDelta):
            return self._delta("reasoning", event.text)
        if isinstance(event, ToolCallStart):
            out = self._close()
            self._open = "call"
            self._call = ToolCall(id=event.id, name=event.name, arguments="")
            self._text = []
            item = self.shape.call_item(len(self.output), self._call, status="in_progress")
            return out + self._event(
                "response.output_item.added", {"output_index": len(self.output), "item": item}
            )
        if isinstance(event, ToolCallArgs):
            if self._open != "call" or not event.fragment:
                return b""
            self._text.append(event.fragment)
            return self._event(
                "response.function_call_arguments.delta", {**self._where(), "delta": event.fragment}
            )
        if isinstance(event, ToolCallEnd):
            return self._close()
        if isinstance(event, Finish):
            self._incomplete = INCOMPLETE.get(event.reason)
            return b""
        if isinstance(event, Done):
            out = self._close("incomplete" if self._incomplete else "completed")
            if not self.output:
                out += self._begin("message") + self._close()  # an empty answer is still a message
            status = "incomplete" if self._incomplete else "completed"
            self.final = self.shape.render(
                status=status,
                output=self.output,
                usage=event.usage,
                incomplete=self._incomplete,
                completed_at=None if self._incomplete else int(time.time()),
            )
            return out + self._event(f"response.{status}", {"response": self.final})
        if isinstance(event, StreamFailed):
            out = self._close(status="incomplete")
            # The API's error codes name OpenAI's own failures; ours are a limit or a server error.
            code = "rate_limit_exceeded" if event.error.kind == "rate_limited" else "server_error"
            self.final = self.shape.render(
                status="failed",
                output=self.output,
                error={"code": code, "message": event.error.message},
            )
            return out + self._event("response.failed", {"response": self.final})
        return b""

    # -- items -------------------------------------------------------------------------------

    def _delta(self, kind: str, text: str) -> bytes:
        if not text:
            return b""
        out = b""
        if self._open != kind:
            out = self._close() + self._begin(kind)
        self._text.append(text)
        if kind == "message":
            name, extra = "response.output_text.delta", {"content_index": 0, "logprobs": []}
        elif self.shape.options.summary:
            name, extra = "response.reasoning_summary_text.delta", {"summary_index": 0}
        else:
            name, extra = "response.reasoning_text.delta", {"content_index": 0}
        return out + self._event(name, {**self._where(), **extra, "delta": text})

    def _begin(self, kind: str) -> bytes:
        self._open = kind
        self._text = []
        index = len(self.output)
        if kind == "message":
            item = self.shape.message_item(index, None, status="in_progress")
        else:
            item = self.shape.reasoning_item(index, "", status="in_progress")
            item["summary"], item["content"] = [], []
        out = self._event("response.output_item.added", {"output_index": index, "item": item})
        if kind == "message":
            out += self._event(
                "response.content_part.added",
                {**self._where(), "content_index": 0, "part": output_text("")},
            )
        elif self.shape.options.summary:
            out += self._event(
                "response.reasoning_summary_part.added",
                {**self._where(), "summary_index": 0, "part": {"type": "summary_text", "text": ""}},
            )
        return out

    def _close(self, status: str = "completed") -> bytes:
        """Finish the open item, if any: its done events, then output_item.done."""
        kind = self._open
        if kind is None:
            return b""
        text = "".join(self._text)
        where = self._where()
        index = len(self.output)
        out = b""
        if kind == "message":
            out += self._event(
                "response.output_text.done",
                {**where, "content_index": 0, "text": text, "logprobs": []},
            )
            out += self._event(
                "response.content_part.done",
                {**where, "content_index": 0, "part": output_text(text)},
            )
            item = self.shape.message_item(index, text, status=status)
        elif kind == "reasoning":
            if self.shape.options.summary:
                part = {"type": "summary_text", "text": text}
                out += self._event(
                    "response.reasoning_summary_text.done",
                    {**where, "summary_index": 0, "text": text},
                )
                out += self._event(
                    "response.reasoning_summary_part.done",
                    {**where, "summary_index": 0, "part": part},
                )
            else:
                out += self._event(
                    "response.reasoning_text.done", {**where, "content_index": 0, "text": text}
                )
            item = self.shape.reasoning_item(index, text, status=status)
        else:
            assert self._call is not None
            out += self._event(
                "response.function_call_arguments.done",
                {**where, "arguments": text},
            )
            item = self.shape.call_item(index, self._call, arguments=text, status=status)
        self.output.append(item)
        self._open = None
        self._text = []
        return out + self._event("response.output_item.done", {"output_index": index, "item": item})
