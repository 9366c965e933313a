"""Messages and count_tokens request bodies, validated and turned into canonical requests.

Validation is strict where a mistake would otherwise surface later as a confusing backend error
(wrong types, out-of-range values, unsupported blocks), and every failure is an `InvalidRequest`
whose `param` names the field. Top-level fields with no meaning here (`service_tier`,
`container`, `mcp_servers`, …) are ignored: newer clients send them routinely (PROTOCOLS §2.2).
"""

from __future__ import annotations

from typing import Any

from mindrouter.canonical import ChatRequest, ResponseFormat, Sampling
from mindrouter.dialects.anthropic.fields import (
    as_bool,
    as_choice,
    as_int,
    as_list,
    as_number,
    as_object,
    as_str,
    child,
    required,
)
from mindrouter.dialects.anthropic.messages import decode_messages, decode_system
from mindrouter.dialects.anthropic.thinking import decode_effort, decode_reasoning
from mindrouter.dialects.anthropic.tools import decode_tool_choice, decode_tools
from mindrouter.errors import InvalidRequest


def decode_messages_request(body: object, *, signing_key: bytes) -> ChatRequest:
    """A `POST /v1/messages` body. Raises InvalidRequest(message, param).

    `signing_key` is the key the gateway signs thinking blocks with. Replayed thinking is
    accepted whatever its signature (see `messages`), so decoding does not need it today; it is
    taken so that tightening that policy would not change any caller.
    """
    del signing_key
    return _decode(body, count_only=False)


def decode_count_tokens_request(body: object, *, signing_key: bytes) -> ChatRequest:
    """A `POST /v1/messages/count_tokens` body: like messages, but `max_tokens` is optional."""
    del signing_key
    return _decode(body, count_only=True)


def _decode(body: object, *, count_only: bool) -> ChatRequest:
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.", param=None)
    obj: dict[str, Any] = body
    model = as_str(required(obj, "model", ""), "model", non_empty=True)
    if count_only:
        raw_max = obj.get("max_tokens")
        max_tokens = None if raw_max is None else as_int(raw_max, "max_tokens", minimum=1)
    else:
        max_tokens = as_int(required(obj, "max_tokens", ""), "max_tokens", minimum=1)
    system = decode_system(obj.get("system"))
    messages = decode_messages(required(obj, "messages", ""))
    tools = decode_tools(obj.get("tools"))
    tool_choice = decode_tool_choice(obj.get("tool_choice"), tools)
    output_config = _output_config(obj.get("output_config"))
    reasoning = decode_reasoning(
        obj.get("thinking"), effort=decode_effort(output_config), max_tokens=max_tokens
    )
    stream = obj.get("stream")
    return ChatRequest(
        model=model,
        messages=[system, *messages] if system is not None else messages,
        sampling=_sampling(obj, max_tokens),
        response_format=_response_format(output_config),
        reasoning=reasoning,
        tools=tools,
        tool_choice=tool_choice,
        stream=False if stream is None or count_only else as_bool(stream, "stream"),
        user=_user(obj.get("metadata")),
    )


def _sampling(obj: dict[str, Any], max_tokens: int | None) -> Sampling:
    sampling = Sampling(max_tokens=max_tokens)
    # temperature, top_p and top_k left the SDK's typed signature (clients now send them through
    # extra_body) but are still part of the API.
    if obj.get("temperature") is not None:
        sampling.temperature = as_number(obj["temperature"], "temperature", low=0.0, high=1.0)
    if obj.get("top_p") is not None:
        sampling.top_p = as_number(obj["top_p"], "top_p", low=0.0, high=1.0)
    if obj.get("top_k") is not None:
        sampling.top_k = as_int(obj["top_k"], "top_k", minimum=0)
    if obj.get("stop_sequences") is not None:
        sampling.stop = [
            as_str(item, child("stop_sequences", i))
            for i, item in enumerate(as_list(obj["stop_sequences"], "stop_sequences"))
        ]
    return sampling


def _output_config(value: object) -> dict[str, Any] | None:
    return None if value is None else as_object(value, "output_config")


def _response_format(output_config: dict[str, Any] | None) -> ResponseFormat | None:
    """`output_config.format`: a JSON schema the output must follow."""
    if output_config is None or output_config.get("format") is None:
        return None
    path = "output_config.format"
    fmt = as_object(output_config["format"], path)
    as_choice(required(fmt, "type", path), child(path, "type"), ("json_schema",))
    schema = as_object(required(fmt, "schema", path), child(path, "schema"))
    return ResponseFormat(kind="json_schema", schema=schema)


def _user(value: object) -> str | None:
    if value is None:
        return None
    metadata = as_object(value, "metadata")
    user_id = metadata.get("user_id")
    return None if user_id is None else as_str(user_id, "metadata.user_id")
