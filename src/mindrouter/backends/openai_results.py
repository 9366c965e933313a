"""OpenAI wire answers → canonical results: finish reasons, usage, chat and completion choices,
embeddings (pure, no I/O). Reasoning is read from `reasoning` or `reasoning_content`, whichever
the engine version sends."""

from __future__ import annotations

import base64
import secrets
import sys
from array import array
from collections.abc import Callable
from typing import Any

import orjson

from mindrouter.backends.fields import token_count
from mindrouter.canonical import ChatResult, Choice, EmbeddingResult, FinishReason, ToolCall, Usage
from mindrouter.tokens import count_text

_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
}


def map_finish(reason: str | None, stop_reason: Any, called_tools: bool) -> FinishReason:
    """vLLM's `stop_reason` is the matched stop string (a str), a stop token id or None.

    A choice that called tools but says "stop" (OpenAI does this for a forced tool choice) is
    reported as "tool_calls", which is what clients looping over tool calls test for.
    """
    mapped = _FINISH.get(reason or "stop", "stop")
    if mapped == "stop":
        if isinstance(stop_reason, str):
            return "stop_sequence"
        if called_tools:
            return "tool_calls"
    return mapped


def mint_call_id() -> str:
    return "call_" + secrets.token_hex(12)


def arguments_text(arguments: Any) -> str:
    """Arguments as JSON text; a few servers send an object instead of a string."""
    if isinstance(arguments, str):
        return arguments
    if arguments is None:
        return ""
    return orjson.dumps(arguments).decode()


def _details(u: dict[str, Any], key: str) -> dict[str, Any]:
    found = u.get(key)
    return found if isinstance(found, dict) else {}


def usage_from_openai(u: dict[str, Any]) -> Usage | None:
    """An OpenAI `usage` object; None (no usage: the gateway estimates it) when its input count
    is missing, or either count is not one (an embedding's usage has no output count)."""
    input_tokens = token_count(u.get("prompt_tokens"))
    completion = u.get("completion_tokens")
    output_tokens = 0 if completion is None else token_count(completion)
    if input_tokens is None or output_tokens is None:
        return None
    cached = token_count(_details(u, "prompt_tokens_details").get("cached_tokens"))
    reasoning = token_count(_details(u, "completion_tokens_details").get("reasoning_tokens"))
    return Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cached_input_tokens=cached or 0,
        reasoning_tokens=reasoning or 0,
    )


def usage_from_timings(t: dict[str, Any]) -> Usage | None:
    """llama.cpp `timings`: prompt_n counts only the tokens not served from its prompt cache."""
    prompt, predicted = token_count(t.get("prompt_n")), token_count(t.get("predicted_n"))
    if prompt is None or predicted is None:
        return None
    cached = token_count(t.get("cache_n")) or 0
    return Usage(input_tokens=prompt + cached, output_tokens=predicted, cached_input_tokens=cached)


def read_usage(data: dict[str, Any]) -> Usage | None:
    """The engine's usage object, else llama.cpp's timings; None when neither holds counts."""
    u, t = data.get("usage"), data.get("timings")
    usage = usage_from_openai(u) if isinstance(u, dict) else None
    if usage is None and isinstance(t, dict):
        usage = usage_from_timings(t)
    return usage


def estimated_usage(input_tokens: int, generated: str) -> Usage:
    return Usage(input_tokens=input_tokens, output_tokens=count_text(generated), estimated=True)


def _message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def decode_chat_choice(c: dict[str, Any], keep_reasoning: bool) -> Choice:
    msg = c.get("message") or {}
    reasoning = msg.get("reasoning") or msg.get("reasoning_content") or None
    calls = [
        ToolCall(
            id=tc.get("id") or mint_call_id(),
            name=(tc.get("function") or {}).get("name") or "",
            arguments=arguments_text((tc.get("function") or {}).get("arguments")),
        )
        for tc in msg.get("tool_calls") or ()
    ]
    stop_reason = c.get("stop_reason")
    return Choice(
        index=c.get("index", 0),
        text=_message_text(msg.get("content")),
        reasoning=reasoning if keep_reasoning else None,
        tool_calls=calls,
        finish_reason=map_finish(c.get("finish_reason"), stop_reason, bool(calls)),
        stop_sequence=stop_reason if isinstance(stop_reason, str) else None,
    )


def decode_completion_choice(c: dict[str, Any]) -> Choice:
    stop_reason = c.get("stop_reason")
    return Choice(
        index=c.get("index", 0),
        text=c.get("text") or "",
        finish_reason=map_finish(c.get("finish_reason"), stop_reason, False),
        stop_sequence=stop_reason if isinstance(stop_reason, str) else None,
    )


def decode_result(
    data: dict[str, Any],
    model: str,
    estimate_input: Callable[[], int],
    *,
    completion: bool = False,
    keep_reasoning: bool = True,
) -> ChatResult:
    """A chat (or, with `completion`, a legacy text) completion; usage estimated when absent."""
    raw_choices = data.get("choices") or []
    if completion:
        choices = [decode_completion_choice(c) for c in raw_choices]
    else:
        choices = [decode_chat_choice(c, keep_reasoning) for c in raw_choices]
    choices.sort(key=lambda c: c.index)
    usage = read_usage(data)
    if usage is None:
        generated = "".join(
            c.text + (c.reasoning or "") + "".join(t.arguments for t in c.tool_calls)
            for c in choices
        )
        usage = estimated_usage(estimate_input(), generated)
    # The requested name, not the engine's (llama.cpp answers with its model path or alias).
    return ChatResult(model=model, choices=choices or [Choice()], usage=usage)


def _vector(embedding: Any) -> list[float]:
    if isinstance(embedding, str):
        # base64 of little-endian float32, for servers that ignore encoding_format.
        floats = array("f")
        floats.frombytes(base64.b64decode(embedding))
        if sys.byteorder == "big":
            floats.byteswap()
        return floats.tolist()
    return embedding if isinstance(embedding, list) else list(embedding)


def decode_embeddings(
    data: dict[str, Any], model: str, estimate_input: Callable[[], int]
) -> EmbeddingResult:
    items = sorted(data.get("data") or [], key=lambda d: d.get("index", 0))
    usage = read_usage(data)
    if usage is None:
        usage = Usage(input_tokens=estimate_input(), estimated=True)
    else:
        usage.output_tokens = 0
    return EmbeddingResult(
        model=model,
        vectors=[_vector(d.get("embedding") or []) for d in items],
        usage=usage,
    )
