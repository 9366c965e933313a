"""Decode a `POST /v1/responses` body into a canonical chat request plus what only this API has.

The canonical request is what any engine can serve: `instructions` become a leading system turn,
`input` (after the history of `previous_response_id`, which the caller resolves and passes in)
becomes the conversation, `text.format` the response format, `reasoning.effort` the reasoning
request. `ResponsesOptions` keeps what shapes the reply and its storage: whether to store it, the
chain it continues, metadata to echo, the tools as the client named them.

Fields sort three ways, as on the other OpenAI endpoints: decoded; accepted but not acted on
(listed in `_IGNORED`, dropped with a debug line by the caller); anything else is an engine extra,
passed to engines that speak OpenAI's wire format. `conversation` and `prompt` name objects kept
on OpenAI's side that no gateway has, and are refused rather than silently ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from mindrouter.canonical import (
    EFFORTS,
    ChatRequest,
    Effort,
    Message,
    Reasoning,
    ResponseFormat,
    Sampling,
    TextPart,
)
from mindrouter.dialects.openai.fields import (
    JSONObject,
    invalid,
    kind_of,
    opt_bool,
    opt_int,
    opt_number,
    opt_object,
    opt_str,
    path,
    req_str,
)
from mindrouter.dialects.responses.items import decode_input
from mindrouter.dialects.responses.tools import DecodedTools, decode_tools
from mindrouter.errors import InvalidRequest

_DECODED = frozenset(
    {
        "model",
        "input",
        "instructions",
        "max_output_tokens",
        "temperature",
        "top_p",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "text",
        "reasoning",
        "stream",
        "stream_options",
        "store",
        "previous_response_id",
        "metadata",
        "user",
        "conversation",
        "prompt",
    }
)
IGNORED = frozenset(
    {
        "include",
        "background",
        "background_options",
        "context_management",
        "max_tool_calls",
        "prompt_cache_key",
        "prompt_cache_retention",
        "prompt_cache_options",
        "safety_identifier",
        "service_tier",
        "top_logprobs",
        "truncation",
        "client_metadata",
        "moderation",
        "access_programs",
        "image",
        "cyber",
    }
)
_SUMMARIES = frozenset({"auto", "concise", "detailed"})
MAX_METADATA_PAIRS = 16


@dataclass(slots=True)
class ResponsesOptions:
    store: bool = True
    previous_response_id: str | None = None
    instructions: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    tools: DecodedTools = field(default_factory=DecodedTools)
    text_format: JSONObject = field(default_factory=lambda: {"type": "text"})
    reasoning_echo: JSONObject | None = None
    summary: bool = False  # reasoning goes out as a summary (what reasoning.summary asks for)
    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    user: str | None = None
    ignored: list[str] = field(default_factory=list)


def peek_previous(body: object) -> str | None:
    """The `previous_response_id` of a body, checked, so the caller can load the history."""
    if not isinstance(body, dict):
        return None
    value = opt_str(cast(JSONObject, body), "previous_response_id")
    if value is not None and not value:
        raise invalid("previous_response_id", "must not be empty")
    return value


def decode_responses_request(
    body: object, history: list[Message] | None = None
) -> tuple[ChatRequest, ResponsesOptions]:
    """The request, and its options. `history` is the stored conversation the body continues."""
    if not isinstance(body, dict):
        raise InvalidRequest(f"The request body must be a JSON object, got {kind_of(body)}.")
    obj = cast(JSONObject, body)
    model = req_str(obj, "model", non_empty=True)
    for refused in ("conversation", "prompt"):
        if obj.get(refused) is not None:
            raise invalid(refused, f"stored {refused} objects are not available on this gateway")
    if obj.get("input") is None:
        raise invalid("input", "is required")
    messages = [*(history or []), *decode_input(obj["input"])]
    instructions = opt_str(obj, "instructions")
    if instructions:
        messages.insert(0, Message(role="system", content=[TextPart(instructions)]))
    tools = decode_tools(obj)
    reasoning, reasoning_echo, summary = _reasoning(obj)
    response_format, text_format = _text(obj)
    options = ResponsesOptions(
        store=_store(obj),
        previous_response_id=peek_previous(obj),
        instructions=instructions,
        metadata=_metadata(obj),
        tools=tools,
        text_format=text_format,
        reasoning_echo=reasoning_echo,
        summary=summary,
        temperature=opt_number(obj, "temperature", minimum=0, maximum=2),
        top_p=opt_number(obj, "top_p", minimum=0, maximum=1),
        max_output_tokens=opt_int(obj, "max_output_tokens", minimum=1),
        user=opt_str(obj, "user"),
        ignored=sorted(k for k in obj if k in IGNORED),
    )
    request = ChatRequest(
        model=model,
        messages=messages,
        sampling=Sampling(
            max_tokens=options.max_output_tokens,
            temperature=options.temperature,
            top_p=options.top_p,
        ),
        response_format=response_format,
        reasoning=reasoning,
        tools=tools.tools,
        tool_choice=tools.choice,
        stream=_stream(obj),
        extra={k: v for k, v in obj.items() if k not in _DECODED and k not in IGNORED},
        user=options.user,
    )
    if not request.messages:
        raise invalid("input", "must hold at least one message")
    return request, options


def _store(obj: JSONObject) -> bool:
    value = opt_bool(obj, "store")
    return True if value is None else value


def _stream(obj: JSONObject) -> bool:
    stream = opt_bool(obj, "stream") or False
    options = opt_object(obj, "stream_options")
    if options is not None:
        if not stream:
            raise invalid("stream_options", "is only allowed when stream is true")
        opt_bool(options, "include_obfuscation", "stream_options")
    return stream


def _metadata(obj: JSONObject) -> dict[str, str]:
    value = opt_object(obj, "metadata")
    if value is None:
        return {}
    if len(value) > MAX_METADATA_PAIRS:
        raise invalid("metadata", f"at most {MAX_METADATA_PAIRS} pairs, got {len(value)}")
    for key, item in value.items():
        if len(key) > 64:
            raise invalid("metadata", f"keys are at most 64 characters; {key[:20]!r}… is longer")
        if not isinstance(item, str):
            raise invalid(path("metadata", key), f"must be a string, got {kind_of(item)}")
        if len(item) > 512:
            raise invalid(path("metadata", key), "values are at most 512 characters")
    return cast(dict[str, str], value)


def _reasoning(obj: JSONObject) -> tuple[Reasoning, JSONObject | None, bool]:
    spec = opt_object(obj, "reasoning")
    reasoning = Reasoning()
    if spec is None:
        return reasoning, None, False
    effort = opt_str(spec, "effort", "reasoning")
    if effort is not None:
        if effort not in EFFORTS:
            raise invalid(
                "reasoning.effort", f"must be one of {', '.join(EFFORTS)}; got {effort!r}"
            )
        reasoning.effort = cast(Effort, effort)
        reasoning.mode = "off" if effort == "none" else "on"
    summary = opt_str(spec, "summary", "reasoning")
    if summary is None:
        summary = opt_str(spec, "generate_summary", "reasoning")
    if summary is not None and summary not in _SUMMARIES:
        raise invalid("reasoning.summary", f"must be auto, concise or detailed; got {summary!r}")
    echo: JSONObject = {"effort": effort, "summary": summary}
    return reasoning, echo, summary is not None


def _text(obj: JSONObject) -> tuple[ResponseFormat | None, JSONObject]:
    text = opt_object(obj, "text")
    spec = None if text is None else opt_object(text, "format", "text")
    if text is not None:
        verbosity = opt_str(text, "verbosity", "text")
        if verbosity is not None and verbosity not in ("low", "medium", "high"):
            raise invalid("text.verbosity", f"must be low, medium or high; got {verbosity!r}")
    if spec is None:
        return None, {"type": "text"}
    at = "text.format"
    kind = spec.get("type")
    if kind == "text":
        return None, {"type": "text"}
    if kind == "json_object":
        return ResponseFormat(kind="json"), {"type": "json_object"}
    if kind == "json_schema":
        schema = opt_object(spec, "schema", at)
        if schema is None:
            raise invalid(path(at, "schema"), "is required when type is json_schema")
        name = req_str(spec, "name", at, non_empty=True)
        strict = opt_bool(spec, "strict", at)
        echo: dict[str, Any] = {
            "type": "json_schema",
            "name": name,
            "schema": schema,
            "strict": strict,
            "description": opt_str(spec, "description", at),
        }
        return ResponseFormat(kind="json_schema", schema=schema, name=name, strict=strict), echo
    shown = repr(kind) if isinstance(kind, str) else kind_of(kind)
    raise invalid(path(at, "type"), f"must be text, json_object or json_schema; got {shown}")
