"""The request bodies of the overhead run."""

from __future__ import annotations

from typing import Any

import orjson

from bench.overhead.targets import MODEL

# In a request's messages: the mock answers a stream of it with the unary reply at once (see
# bench/overhead/mock.py), as a gateway that collects an engine stream for a unary request needs.
WHOLE = " [whole]"


def chat_body(
    *,
    stream: bool = False,
    content: str = "Say something.",
    whole: bool | None = None,
    **extra: Any,
) -> bytes:
    """`whole` (default: for a non-streamed request) adds the mock's `[whole]` marker."""
    if whole if whole is not None else not stream:
        content += WHOLE
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 256,
    }
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    body.update(extra)
    return orjson.dumps(body)


def large_prompt_body() -> bytes:
    """~100 KB of conversation and ten tools, as an agent's request looks."""
    paragraph = (
        "The quarterly report lists revenue by region, the cost of goods sold, and the operating "
        "margin, with notes on currency effects and one-off items that the auditors flagged. "
    )
    history = []
    for i in range(40):
        role = "user" if i % 2 == 0 else "assistant"
        history.append({"role": role, "content": f"[{i}] " + paragraph * 14})
    history[-1]["content"] += WHOLE
    tools = [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "description": f"Looks up record kind {i} by its identifier and returns the "
                "fields asked for, with their provenance.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string", "description": "the record identifier"},
                        "fields": {"type": "array", "items": {"type": "string"}},
                        "as_of": {"type": "string", "format": "date"},
                    },
                    "required": ["id"],
                },
            },
        }
        for i in range(10)
    ]
    return orjson.dumps(
        {
            "model": MODEL,
            "messages": [{"role": "system", "content": "You are a careful analyst."}, *history],
            "tools": tools,
            "max_tokens": 256,
        }
    )


def anthropic_body() -> bytes:
    return orjson.dumps(
        {
            "model": MODEL,
            "max_tokens": 256,
            "messages": [{"role": "user", "content": "Say something." + WHOLE}],
        }
    )
