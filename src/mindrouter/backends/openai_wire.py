"""Canonical requests → OpenAI wire JSON, for every engine that speaks it (pure, no I/O).

vLLM, llama.cpp and generic OpenAI-compatible servers share the body; a `Flavor` says what each
accepts beyond the standard fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mindrouter.canonical import (
    ChatRequest,
    CompletionRequest,
    EmbeddingRequest,
    ImagePart,
    Message,
    Reasoning,
    ResponseFormat,
    Sampling,
    TextPart,
    Tool,
    ToolChoice,
    text_message,
)

Json = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Flavor:
    """What one OpenAI-compatible engine accepts beyond the standard fields."""

    # Assistant-message field that carries replayed reasoning; None drops it.
    replay_reasoning_as: str | None
    # (canonical Sampling attribute, wire field) pairs for the non-standard sampling knobs.
    sampling_extras: tuple[tuple[str, str], ...]
    # Merge the engine extras the client sent (`req.extra`) into the top-level body.
    pass_extra: bool
    # Reasoning controls besides `reasoning_effort`.
    template_kwargs: bool
    thinking_budget: bool
    include_reasoning: bool
    reasoning_format: bool
    # Merge every system turn into one leading system message (`fold_system_turns`).
    fold_system: bool


VLLM = Flavor(
    replay_reasoning_as="reasoning",
    sampling_extras=(
        ("top_k", "top_k"),
        ("min_p", "min_p"),
        ("repetition_penalty", "repetition_penalty"),
    ),
    pass_extra=True,
    template_kwargs=True,
    thinking_budget=True,
    include_reasoning=True,
    reasoning_format=False,
    fold_system=True,
)
LLAMACPP = Flavor(
    replay_reasoning_as="reasoning_content",
    # llama-server reads its native `repeat_penalty` name on the OpenAI routes too.
    sampling_extras=(
        ("top_k", "top_k"),
        ("min_p", "min_p"),
        ("repetition_penalty", "repeat_penalty"),
    ),
    pass_extra=True,
    template_kwargs=True,
    thinking_budget=False,
    include_reasoning=False,
    reasoning_format=True,
    fold_system=True,
)
GENERIC = Flavor(
    replay_reasoning_as=None,
    sampling_extras=(),
    pass_extra=False,
    template_kwargs=False,
    thinking_budget=False,
    include_reasoning=False,
    reasoning_format=False,
    fold_system=False,
)


def fold_system_turns(messages: list[Message]) -> list[Message]:
    """One leading system message holding every system turn's text, in order; the rest as is.

    The canonical form keeps system turns where the client put them (Anthropic clients send them
    between user and assistant turns). Many chat templates that vLLM and llama.cpp apply accept a
    system message only first (Gemma's raises an error for any other), so for those engines the
    instructions move to the front, where every template takes them.
    """
    systems = [m for m in messages if m.role == "system"]
    if not systems or (len(systems) == 1 and messages[0].role == "system"):
        return messages
    text = "\n\n".join(t for t in (m.text() for m in systems) if t)
    return [text_message("system", text), *(m for m in messages if m.role != "system")]


def encode_content(parts: list[TextPart | ImagePart]) -> str | list[Json]:
    """A plain string when the content is text only; otherwise the list of parts."""
    texts = [p.text for p in parts if isinstance(p, TextPart)]
    if len(texts) == len(parts):
        return texts[0] if len(texts) == 1 else "".join(texts)
    out: list[Json] = []
    for p in parts:
        if isinstance(p, TextPart):
            out.append({"type": "text", "text": p.text})
        else:
            image: Json = {"url": p.as_data_url()}
            if p.detail:
                image["detail"] = p.detail
            out.append({"type": "image_url", "image_url": image})
    return out


def encode_message(m: Message, flavor: Flavor) -> Json:
    if m.role == "tool":
        return {"role": "tool", "tool_call_id": m.tool_call_id or "", "content": m.text()}
    if m.role != "assistant":
        return {"role": m.role, "content": encode_content(m.content)}
    msg: Json = {"role": "assistant"}
    text = m.text()
    msg["content"] = text if text or not m.tool_calls else None
    if m.tool_calls:
        msg["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in m.tool_calls
        ]
    if m.reasoning and flavor.replay_reasoning_as:
        msg[flavor.replay_reasoning_as] = m.reasoning
    return msg


def encode_tool(t: Tool) -> Json:
    fn: Json = {"name": t.name}
    if t.description is not None:
        fn["description"] = t.description
    fn["parameters"] = t.parameters
    if t.strict is not None:
        fn["strict"] = t.strict
    return {"type": "function", "function": fn}


def encode_tool_choice(tc: ToolChoice) -> str | Json:
    if tc.mode == "named" and tc.name:
        return {"type": "function", "function": {"name": tc.name}}
    return "required" if tc.mode == "named" else tc.mode


def encode_response_format(rf: ResponseFormat | None) -> Json | None:
    if rf is None or rf.kind == "text":
        return None
    if rf.kind == "json" or rf.schema is None:
        return {"type": "json_object"}
    spec: Json = {"name": rf.name or "response", "schema": rf.schema}
    if rf.strict is not None:
        spec["strict"] = rf.strict
    return {"type": "json_schema", "json_schema": spec}


def _put_sampling(body: Json, s: Sampling, flavor: Flavor) -> None:
    if s.max_tokens is not None:
        body["max_tokens"] = s.max_tokens
    for key in ("temperature", "top_p", "frequency_penalty", "presence_penalty", "seed"):
        value = getattr(s, key)
        if value is not None:
            body[key] = value
    if s.stop:
        body["stop"] = s.stop
    if s.n != 1:
        body["n"] = s.n
    for attr, wire in flavor.sampling_extras:
        value = getattr(s, attr)
        if value is not None:
            body[wire] = value


def _put_reasoning(body: Json, r: Reasoning, flavor: Flavor) -> None:
    if r.effort is not None:
        body["reasoning_effort"] = r.effort
    elif r.mode == "off" and not flavor.template_kwargs:
        # The only switch a generic OpenAI-compatible server understands.
        body["reasoning_effort"] = "none"
    if flavor.template_kwargs and r.mode != "default":
        kwargs = body.setdefault("chat_template_kwargs", {})
        kwargs["enable_thinking"] = r.mode != "off"
    if flavor.thinking_budget and r.budget_tokens is not None:
        body["thinking_token_budget"] = r.budget_tokens
    # vLLM includes reasoning by default, so only the opt-out needs saying.
    if flavor.include_reasoning and not r.return_reasoning:
        body["include_reasoning"] = False
    if flavor.reasoning_format and r.mode == "on":
        body["reasoning_format"] = "deepseek"


def _merge_extra(body: Json, extra: dict[str, Any]) -> None:
    """Client extras never override what the canonical request decided."""
    for key, value in extra.items():
        if key == "chat_template_kwargs" and isinstance(value, dict):
            body["chat_template_kwargs"] = {**value, **body.get("chat_template_kwargs", {})}
        elif key not in body:
            body[key] = value


def _put_stream(body: Json, stream: bool) -> None:
    body["stream"] = stream
    if stream:
        # Always: the gateway accounts every token, so it needs the engine's usage figures.
        body["stream_options"] = {"include_usage": True}


def encode_chat(req: ChatRequest, flavor: Flavor, *, stream: bool) -> Json:
    messages = fold_system_turns(req.messages) if flavor.fold_system else req.messages
    body: Json = {"model": req.model, "messages": [encode_message(m, flavor) for m in messages]}
    _put_sampling(body, req.sampling, flavor)
    if req.tools:
        body["tools"] = [encode_tool(t) for t in req.tools]
        if req.tool_choice is not None:
            body["tool_choice"] = encode_tool_choice(req.tool_choice)
            if req.tool_choice.parallel is not None:
                body["parallel_tool_calls"] = req.tool_choice.parallel
    fmt = encode_response_format(req.response_format)
    if fmt is not None:
        body["response_format"] = fmt
    _put_reasoning(body, req.reasoning, flavor)
    if flavor.pass_extra and req.extra:
        _merge_extra(body, req.extra)
    _put_stream(body, stream)
    return body


def encode_completion(req: CompletionRequest, flavor: Flavor, *, stream: bool) -> Json:
    prompt: str | list[str] = req.prompt[0] if len(req.prompt) == 1 else req.prompt
    body: Json = {"model": req.model, "prompt": prompt}
    if req.suffix is not None:
        body["suffix"] = req.suffix
    if req.echo:
        body["echo"] = True
    _put_sampling(body, req.sampling, flavor)
    if flavor.pass_extra and req.extra:
        _merge_extra(body, req.extra)
    _put_stream(body, stream)
    return body


def encode_embedding(req: EmbeddingRequest) -> Json:
    # Floats, always: the client dialect re-encodes to base64 itself when its caller asked.
    body: Json = {"model": req.model, "input": req.inputs, "encoding_format": "float"}
    if req.dimensions is not None:
        body["dimensions"] = req.dimensions
    return body
