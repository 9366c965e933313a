"""Whole (non-streamed) replies in the Anthropic shape: a message, a token count, the model list.

The stop-reason and usage mappings here are shared with the stream encoder, so both paths tell
a client the same thing about the same generation.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from mindrouter.canonical import ChatResult, FinishReason, Usage
from mindrouter.dialects.anthropic.thinking import sign_thinking

# A generation that broke off still ended the turn as far as the client can
# tell; the failure itself is reported by the caller (an error body or an `error` event).
STOP_REASONS: dict[FinishReason, str] = {
    "stop": "end_turn",
    "stop_sequence": "stop_sequence",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
    "context_exceeded": "model_context_window_exceeded",
    "error": "end_turn",
}


def stop_fields(reason: FinishReason, stop_sequence: str | None) -> dict[str, Any]:
    """`stop_reason` and `stop_sequence`; the latter only for a matched stop sequence."""
    return {
        "stop_reason": STOP_REASONS.get(reason, "end_turn"),
        "stop_sequence": stop_sequence if reason == "stop_sequence" else None,
    }


def usage_fields(usage: Usage) -> dict[str, int]:
    """Anthropic counts cache reads apart from `input_tokens`; canonical input includes them."""
    cached = max(0, usage.cached_input_tokens)
    return {
        "input_tokens": max(0, usage.input_tokens - cached),
        "output_tokens": max(0, usage.output_tokens),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
    }


def tool_input(arguments: str) -> dict[str, Any]:
    """A tool call's argument text as the object Anthropic's `input` must be.

    Backends sometimes send no arguments at all for a call without parameters, and a model can
    produce broken JSON; the reply must still be delivered, so the raw text is kept under
    `_raw` for the client to see rather than failing the whole response.
    """
    if not arguments.strip():
        return {}
    parsed: object
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        # orjson refuses some valid JSON (integers beyond 64 bits); the standard parser does not.
        try:
            parsed = json.loads(arguments)
        except (ValueError, RecursionError):
            return {"_raw": arguments}
    return parsed if isinstance(parsed, dict) else {"_raw": arguments}


def encode_messages_response(
    result: ChatResult,
    *,
    message_id: str,
    model: str,
    signing_key: bytes,
    return_reasoning: bool = True,
) -> dict[str, Any]:
    """The `POST /v1/messages` reply. Only the first choice is used (Anthropic has no `n`).

    `return_reasoning` is the request's `Reasoning.return_reasoning` (False for
    `display: "omitted"`): the model still thought, but the thinking block is left out.
    """
    choice = result.first
    content: list[dict[str, Any]] = []
    if choice.reasoning and return_reasoning:
        content.append(
            {
                "type": "thinking",
                "thinking": choice.reasoning,
                "signature": sign_thinking(choice.reasoning, signing_key),
            }
        )
    if choice.text:
        content.append({"type": "text", "text": choice.text})
    content.extend(
        {"type": "tool_use", "id": call.id, "name": call.name, "input": tool_input(call.arguments)}
        for call in choice.tool_calls
    )
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        **stop_fields(choice.finish_reason, choice.stop_sequence),
        "usage": usage_fields(result.usage),
    }


def encode_count_tokens_response(input_tokens: int) -> dict[str, Any]:
    return {"input_tokens": max(0, input_tokens)}


def encode_model_list(model_ids: list[str], *, created_at: str) -> dict[str, Any]:
    """`GET /v1/models`, as one page holding every model.

    `lifecycle` is not in the classic shape but the 2.x SDK's `ModelInfo` requires it; every
    model a gateway serves is, by definition, active.
    """
    data = [
        {
            "type": "model",
            "id": model_id,
            "display_name": model_id,
            "created_at": created_at,
            "lifecycle": "active",
        }
        for model_id in model_ids
    ]
    return {
        "data": data,
        "has_more": False,
        "first_id": model_ids[0] if model_ids else None,
        "last_id": model_ids[-1] if model_ids else None,
    }
