"""Encode canonical results as OpenAI JSON bodies: chat completions, legacy text completions,
embeddings and model objects.

The caller supplies the response id, the creation time and the model name the client asked for,
so this module stays free of clocks and randomness.
"""

from __future__ import annotations

import base64
import sys
from array import array
from collections.abc import Iterable
from typing import Any, Literal

from mindrouter.canonical import ChatResult, Choice, EmbeddingResult, FinishReason, Usage

ReasoningField = Literal["reasoning_content", "reasoning", "both"]

# Chat finish reasons; a broken-off generation still ends "stop" as OpenAI has no error reason.
CHAT_FINISH: dict[FinishReason, str] = {
    "stop": "stop",
    "stop_sequence": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "content_filter": "content_filter",
    "context_exceeded": "length",
    "error": "stop",
}
# Legacy completions know only stop, length and content_filter.
COMPLETION_FINISH: dict[FinishReason, str] = {
    **CHAT_FINISH,
    "tool_calls": "stop",
}


def reasoning_keys(field: ReasoningField) -> tuple[str, ...]:
    """The message/delta keys that carry reasoning text for the configured field."""
    if field == "both":
        return ("reasoning_content", "reasoning")
    return (field,)


def encode_usage(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_input_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


def encode_chat_response(
    result: ChatResult,
    *,
    request_id: str,
    created: int,
    model: str,
    reasoning_field: ReasoningField = "reasoning_content",
) -> dict[str, Any]:
    keys = reasoning_keys(reasoning_field)
    return {
        "id": request_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "choices": [
            {
                "index": choice.index,
                "message": _message(choice, keys),
                "logprobs": None,
                "finish_reason": CHAT_FINISH[choice.finish_reason],
            }
            for choice in result.choices
        ],
        "usage": encode_usage(result.usage),
    }


def _message(choice: Choice, reasoning_keys: tuple[str, ...]) -> dict[str, Any]:
    # OpenAI sends null content for a turn that only calls tools; SDK helpers rely on it.
    content = None if choice.tool_calls and not choice.text else choice.text
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    if choice.reasoning is not None:
        for key in reasoning_keys:
            message[key] = choice.reasoning
    if choice.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in choice.tool_calls
        ]
    return message


def encode_completion_response(
    result: ChatResult, *, request_id: str, created: int, model: str
) -> dict[str, Any]:
    return {
        "id": request_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "choices": [
            {
                "index": choice.index,
                "text": choice.text,
                "logprobs": None,
                "finish_reason": COMPLETION_FINISH[choice.finish_reason],
            }
            for choice in result.choices
        ],
        "usage": encode_usage(result.usage),
    }


def encode_embedding_response(
    result: EmbeddingResult, *, model: str, encoding_format: Literal["float", "base64"]
) -> dict[str, Any]:
    as_base64 = encoding_format == "base64"
    return {
        "object": "list",
        "data": [
            {
                "object": "embedding",
                "index": i,
                "embedding": _base64_float32(vector) if as_base64 else vector,
            }
            for i, vector in enumerate(result.vectors)
        ],
        "model": model,
        "usage": {
            "prompt_tokens": result.usage.input_tokens,
            "total_tokens": result.usage.input_tokens,
        },
    }


def _base64_float32(vector: list[float]) -> str:
    """The vector as little-endian float32 bytes, base64-encoded, as OpenAI sends it."""
    packed = array("f", vector)
    if sys.byteorder == "big":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


def encode_model(model_id: str, *, created: int, owned_by: str = "mindrouter") -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": created, "owned_by": owned_by}


def encode_model_list(
    model_ids: Iterable[str], *, created: int, owned_by: str = "mindrouter"
) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [encode_model(m, created=created, owned_by=owned_by) for m in model_ids],
    }
