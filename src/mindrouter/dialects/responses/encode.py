"""Encode canonical results as Responses objects: output items, status, usage.

One `ResponseShape` per request holds what every rendering of the response repeats (id, times,
model, the echoed request settings); the unary reply and each streamed snapshot
(`response.created`, `response.completed`, ...) are built from it, so they never disagree.

Output items: a `reasoning` item when the engine reasoned (its text as `content`, or as the
`summary` when the client asked for one), a `message` item with one `output_text` part, and a
`function_call` item per call (under its namespace when the tool came from one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mindrouter.canonical import ChatResult, FinishReason, ToolCall, Usage
from mindrouter.dialects.responses.decode import ResponsesOptions

JSONObject = dict[str, Any]

# Finish reasons that leave a response incomplete, and the reason the API reports for each.
INCOMPLETE: dict[FinishReason, str] = {
    "length": "max_output_tokens",
    "context_exceeded": "max_output_tokens",
    "content_filter": "content_filter",
}


def response_id_for(request_id: str) -> str:
    """The response id that goes with a gateway request id (same random part)."""
    return "resp_" + request_id.removeprefix("chatcmpl-")


def encode_usage(usage: Usage) -> JSONObject:
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {
            "cached_tokens": usage.cached_input_tokens,
            "cache_write_tokens": 0,
        },
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total_tokens,
    }


@dataclass(slots=True)
class ResponseShape:
    id: str
    created_at: int
    model: str
    options: ResponsesOptions

    def item_id(self, kind: str, index: int) -> str:
        return f"{kind}_{self.id.removeprefix('resp_')}{index:02d}"

    def render(
        self,
        *,
        status: str,
        output: list[JSONObject],
        usage: Usage | None = None,
        incomplete: str | None = None,
        error: JSONObject | None = None,
        completed_at: int | None = None,
    ) -> JSONObject:
        o = self.options
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "background": False,
            "completed_at": completed_at,
            "error": error,
            "incomplete_details": {"reason": incomplete} if incomplete else None,
            "instructions": o.instructions,
            "max_output_tokens": o.max_output_tokens,
            "metadata": o.metadata,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": True
            if o.tools.choice is None or o.tools.choice.parallel is None
            else o.tools.choice.parallel,
            "previous_response_id": o.previous_response_id,
            "reasoning": o.reasoning_echo or {"effort": None, "summary": None},
            "store": o.store,
            "temperature": 1.0 if o.temperature is None else o.temperature,
            "text": {"format": o.text_format},
            "tool_choice": o.tools.choice_echo,
            "tools": o.tools.echo,
            "top_p": 1.0 if o.top_p is None else o.top_p,
            "truncation": "disabled",
            "usage": encode_usage(usage) if usage is not None else None,
            "user": o.user,
        }

    def reasoning_item(self, index: int, text: str, *, status: str = "completed") -> JSONObject:
        part = {"type": "summary_text" if self.options.summary else "reasoning_text", "text": text}
        return {
            "id": self.item_id("rs", index),
            "type": "reasoning",
            "summary": [part] if self.options.summary else [],
            "content": [] if self.options.summary else [part],
            "encrypted_content": None,
            "status": status,
        }

    def message_item(
        self, index: int, text: str | None, *, status: str = "completed"
    ) -> JSONObject:
        content = [] if text is None else [output_text(text)]
        return {
            "id": self.item_id("msg", index),
            "type": "message",
            "role": "assistant",
            "status": status,
            "content": content,
        }

    def call_item(
        self, index: int, call: ToolCall, *, arguments: str | None = None, status: str = "completed"
    ) -> JSONObject:
        item: JSONObject = {
            "id": self.item_id("fc", index),
            "type": "function_call",
            "call_id": call.id,
            "name": call.name,
            "arguments": call.arguments if arguments is None else arguments,
            "status": status,
        }
        namespace = self.options.tools.namespaces.get(call.name)
        if namespace is not None:
            item["namespace"] = namespace
        return item


def output_text(text: str) -> JSONObject:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def encode_response(result: ChatResult, shape: ResponseShape, *, now: int) -> JSONObject:
    """The whole response to a unary request."""
    choice = result.first
    incomplete = INCOMPLETE.get(choice.finish_reason)
    status = "incomplete" if incomplete else "completed"
    output: list[JSONObject] = []
    if choice.reasoning:
        output.append(shape.reasoning_item(len(output), choice.reasoning))
    if choice.text or not choice.tool_calls:
        output.append(shape.message_item(len(output), choice.text, status=status))
    for call in choice.tool_calls:
        output.append(shape.call_item(len(output), call))
    return shape.render(
        status=status,
        output=output,
        usage=result.usage,
        incomplete=incomplete,
        completed_at=None if incomplete else now,
    )
