"""Encode finished results as Ollama's non-streamed /api/chat and /api/generate replies (§3.1-2).

Ollama has no tool-call finish reason (§7.1): a reply that called tools simply ends with
`"stop"`, and clients look at `message.tool_calls`. Tool-call arguments are JSON objects on this
wire, unlike the canonical JSON text, so they are parsed here; text that is not a JSON object is
kept whole under `_raw` rather than lost.
"""

from __future__ import annotations

from typing import Any

import orjson

from mindrouter.canonical import ChatResult, FinishReason, ToolCall
from mindrouter.dialects.ollama.timing import Timings, metrics

_LENGTH_REASONS = frozenset({"length", "context_exceeded"})


def done_reason(reason: FinishReason | None) -> str:
    """Ollama's `done_reason`: "length" when the output was cut off, "stop" for everything else."""
    return "length" if reason in _LENGTH_REASONS else "stop"


def tool_arguments(text: str) -> dict[str, Any]:
    """Canonical argument JSON text as the object Ollama clients expect."""
    if not text.strip():
        # Models often emit nothing at all for a call that takes no arguments.
        return {}
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return {"_raw": text}
    return value if isinstance(value, dict) else {"_raw": text}


def encode_tool_call(call: ToolCall, index: int) -> dict[str, Any]:
    return {
        "id": call.id,
        "function": {
            "index": index,
            "name": call.name,
            "arguments": tool_arguments(call.arguments),
        },
    }


def encode_chat_response(
    result: ChatResult, *, model: str, created_at: str, timings: Timings
) -> dict[str, Any]:
    """The single object Ollama returns from /api/chat with `stream: false`."""
    choice = result.first
    message: dict[str, Any] = {"role": "assistant", "content": choice.text}
    if choice.reasoning:
        message["thinking"] = choice.reasoning
    if choice.tool_calls:
        message["tool_calls"] = [encode_tool_call(c, i) for i, c in enumerate(choice.tool_calls)]
    return {
        "model": model,
        "created_at": created_at,
        "message": message,
        "done": True,
        "done_reason": done_reason(choice.finish_reason),
        **metrics(timings, result.usage),
    }


def encode_generate_response(
    result: ChatResult, *, model: str, created_at: str, timings: Timings
) -> dict[str, Any]:
    """The single object Ollama returns from /api/generate with `stream: false`.

    `context` (token ids for a follow-up call) is deprecated and the gateway has no ids to give,
    so it is always empty; clients that send it back get it ignored. Generate has no tool calls.
    """
    choice = result.first
    body: dict[str, Any] = {"model": model, "created_at": created_at, "response": choice.text}
    if choice.reasoning:
        body["thinking"] = choice.reasoning
    body.update(
        {
            "done": True,
            "done_reason": done_reason(choice.finish_reason),
            "context": [],
            **metrics(timings, result.usage),
        }
    )
    return body
