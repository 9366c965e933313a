"""Ollama JSON / NDJSON answers → canonical events and results (pure, no I/O).

A non-streamed answer is the same object as the last stream line, with the whole message in it,
so one decoder serves both: feed lines (or the single object), then read `usage`.
Tool calls arrive whole, so each becomes start + one arguments fragment + end; Ollama often
sends no id, and one is minted. Ollama has no tool-call finish reason: it is inferred from the
calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mindrouter.backends.failures import error_from_stream_payload, malformed_piece
from mindrouter.backends.fields import text_or_none, token_count
from mindrouter.backends.openai_results import arguments_text, mint_call_id
from mindrouter.canonical import (
    EmbeddingResult,
    Finish,
    FinishReason,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from mindrouter.tokens import count_text


class OllamaDecoder:
    """Decodes /api/chat lines, or with `generate` /api/generate lines, into `out`."""

    def __init__(
        self, backend: str, *, choice: int = 0, generate: bool = False, keep_reasoning: bool = True
    ) -> None:
        self.backend = backend
        self.choice = choice
        self.generate = generate
        self.keep_reasoning = keep_reasoning
        self.out: list[StreamEvent] = []
        self.done = False
        self._calls = 0
        self._generated: list[str] = []
        self._input: int | None = None
        self._output: int | None = None

    def feed(self, obj: Any) -> bool:
        """Decode one object; True when it was the last one (`done: true`). An object of an
        unexpected shape (a field of the wrong type) fails the stream as the engine's fault."""
        if not isinstance(obj, dict):
            return False
        error = obj.get("error")
        if error is not None:
            raise error_from_stream_payload(error, self.backend)
        try:
            if self.generate:
                thinking, text, calls = obj.get("thinking"), obj.get("response"), None
            else:
                msg = obj.get("message") or {}
                thinking, text = msg.get("thinking"), msg.get("content")
                calls = msg.get("tool_calls")
            thinking, text = text_or_none(thinking), text_or_none(text)
            if thinking:
                self._generated.append(thinking)
                if self.keep_reasoning:
                    self.out.append(ReasoningDelta(thinking, self.choice))
            if text:
                self.out.append(TextDelta(text, self.choice))
                self._generated.append(text)
            if calls:
                for call in calls:
                    self._call(call)
        except (AttributeError, TypeError) as exc:
            raise malformed_piece(self.backend) from exc
        if obj.get("done"):
            self._finish(obj)
            return True
        return False

    def _call(self, call: dict[str, Any]) -> None:
        fn = call.get("function") or {}
        index = self._calls
        self._calls += 1
        args = arguments_text(fn.get("arguments")) or "{}"
        self._generated.append(args)
        choice = self.choice
        call_id = text_or_none(call.get("id")) or mint_call_id()
        self.out.append(ToolCallStart(index, call_id, text_or_none(fn.get("name")) or "", choice))
        self.out.append(ToolCallArgs(index, args, choice))
        self.out.append(ToolCallEnd(index, choice))

    def _finish(self, obj: dict[str, Any]) -> None:
        self.done = True
        reason: FinishReason
        if self._calls:
            reason = "tool_calls"
        elif obj.get("done_reason") == "length":
            reason = "length"
        else:
            reason = "stop"
        self.out.append(Finish(reason, None, self.choice))
        self._input = token_count(obj.get("prompt_eval_count"))
        self._output = token_count(obj.get("eval_count"))

    def usage(self, estimate_input: Callable[[], int]) -> Usage:
        """The engine's counts; missing ones (a prompt-cache hit can omit the input count) are
        estimated and the usage marked so."""
        estimated = False
        input_tokens, output_tokens = self._input, self._output
        if input_tokens is None:
            input_tokens, estimated = estimate_input(), True
        if output_tokens is None:
            output_tokens, estimated = count_text("".join(self._generated)), True
        return Usage(input_tokens=input_tokens, output_tokens=output_tokens, estimated=estimated)


def add_usage(a: Usage, b: Usage) -> Usage:
    return Usage(
        input_tokens=a.input_tokens + b.input_tokens,
        output_tokens=a.output_tokens + b.output_tokens,
        cached_input_tokens=a.cached_input_tokens + b.cached_input_tokens,
        reasoning_tokens=a.reasoning_tokens + b.reasoning_tokens,
        estimated=a.estimated or b.estimated,
    )


def decode_embed(
    data: dict[str, Any], model: str, estimate_input: Callable[[], int]
) -> EmbeddingResult:
    count = token_count(data.get("prompt_eval_count"))
    usage = (
        Usage(input_tokens=count)
        if count is not None
        else Usage(input_tokens=estimate_input(), estimated=True)
    )
    return EmbeddingResult(model=model, vectors=data.get("embeddings") or [], usage=usage)
