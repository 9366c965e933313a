"""Canonical requests → Ollama's native API JSON: /api/chat, /api/generate, /api/embed (pure).

Differences from the OpenAI wire that matter here:
- images are bare base64 on the message; remote URLs would need a download, which the gateway
  does not do (SSRF risk), so they are refused;
- tool-call arguments are objects, tool results name the tool;
- there is no tool_choice: `none` leaves the tools out, a named choice sends only that tool;
- sampling lives in `options`; reasoning is `think`.
"""

from __future__ import annotations

import base64
from typing import Any

import orjson

from mindrouter.canonical import (
    ChatRequest,
    CompletionRequest,
    EmbeddingRequest,
    ImagePart,
    Message,
    Reasoning,
    ResponseFormat,
    Sampling,
    Tool,
    ToolChoice,
)
from mindrouter.errors import InvalidRequest

Json = dict[str, Any]

# Ollama accepts low/medium/high/max; the other efforts are clamped the way its own OpenAI layer
# clamps them.
_THINK_LEVEL: dict[str, str] = {
    "minimal": "low",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "max",
    "max": "max",
}


def encode_think(r: Reasoning) -> bool | str | None:
    if r.mode == "default":
        return None
    if r.mode == "off" or r.effort == "none":
        return False
    if r.effort is None:
        return True
    return _THINK_LEVEL[r.effort]


def encode_options(s: Sampling, num_ctx: int | None) -> Json:
    opts: Json = {}
    for key in ("temperature", "top_p", "top_k", "min_p"):
        value = getattr(s, key)
        if value is not None:
            opts[key] = value
    if s.repetition_penalty is not None:
        opts["repeat_penalty"] = s.repetition_penalty
    for key in ("frequency_penalty", "presence_penalty", "seed"):
        value = getattr(s, key)
        if value is not None:
            opts[key] = value
    if s.stop:
        opts["stop"] = s.stop
    if s.max_tokens is not None:
        opts["num_predict"] = s.max_tokens
    if num_ctx is not None:
        opts["num_ctx"] = num_ctx
    return opts


def image_base64(image: ImagePart) -> str:
    if image.data is not None:
        return base64.b64encode(image.data).decode("ascii")
    url = image.url or ""
    if url.startswith("data:"):
        return url.partition(",")[2]
    raise InvalidRequest(
        "Remote image URLs are not supported for this backend; send the image inline as base64.",
        param="messages",
    )


def arguments_object(arguments: str) -> Any:
    """OpenAI argument text → the object Ollama wants; text that is not a JSON object is kept
    under `_raw` so nothing the model wrote is lost."""
    if not arguments.strip():
        return {}
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {"_raw": arguments}
    return value if isinstance(value, dict) else {"_raw": arguments}


def encode_messages(messages: list[Message]) -> list[Json]:
    out: list[Json] = []
    tool_names: dict[str, str] = {}
    for m in messages:
        msg: Json = {"role": m.role, "content": m.text()}
        images = m.images()
        if images:
            msg["images"] = [image_base64(p) for p in images]
        if m.role == "assistant":
            if m.reasoning:
                msg["thinking"] = m.reasoning
            if m.tool_calls:
                calls = []
                for call in m.tool_calls:
                    tool_names[call.id] = call.name
                    fn = {"name": call.name, "arguments": arguments_object(call.arguments)}
                    calls.append({"id": call.id, "function": fn})
                msg["tool_calls"] = calls
        elif m.role == "tool":
            name = m.name or tool_names.get(m.tool_call_id or "")
            if name:
                msg["tool_name"] = name
            if m.tool_call_id:
                msg["tool_call_id"] = m.tool_call_id
        out.append(msg)
    return out


def encode_tools(tools: list[Tool], choice: ToolChoice | None) -> list[Json]:
    if choice is not None and choice.mode == "none":
        return []
    if choice is not None and choice.mode == "named" and choice.name:
        tools = [t for t in tools if t.name == choice.name] or tools
    out = []
    for t in tools:
        fn: Json = {"name": t.name, "parameters": t.parameters}
        if t.description is not None:
            fn["description"] = t.description
        out.append({"type": "function", "function": fn})
    return out


def encode_format(rf: ResponseFormat | None) -> str | Json | None:
    if rf is None or rf.kind == "text":
        return None
    if rf.kind == "json_schema" and rf.schema is not None:
        return rf.schema
    return "json"


def encode_chat(req: ChatRequest, *, stream: bool, num_ctx: int | None = None) -> Json:
    body: Json = {"model": req.model, "messages": encode_messages(req.messages), "stream": stream}
    if req.tools:
        tools = encode_tools(req.tools, req.tool_choice)
        if tools:
            body["tools"] = tools
    fmt = encode_format(req.response_format)
    if fmt is not None:
        body["format"] = fmt
    options = encode_options(req.sampling, num_ctx)
    if options:
        body["options"] = options
    think = encode_think(req.reasoning)
    if think is not None:
        body["think"] = think
    return body


def encode_generate(
    req: CompletionRequest, prompt: str, *, stream: bool, num_ctx: int | None = None
) -> Json:
    """One prompt of a raw completion. With a suffix the model's template must build the
    fill-in-the-middle prompt, so `raw` is only set without one (raw mode drops the suffix)."""
    body: Json = {"model": req.model, "prompt": prompt, "stream": stream}
    if req.suffix is None:
        body["raw"] = True
    else:
        body["suffix"] = req.suffix
    options = encode_options(req.sampling, num_ctx)
    if options:
        body["options"] = options
    return body


def encode_embed(req: EmbeddingRequest) -> Json:
    inputs = req.inputs
    if any(not isinstance(item, str) for item in inputs):
        raise InvalidRequest(
            "Token-id inputs are not supported for this backend; send text.", param="input"
        )
    body: Json = {"model": req.model, "input": inputs, "truncate": req.truncate}
    if req.dimensions is not None:
        body["dimensions"] = req.dimensions
    return body
