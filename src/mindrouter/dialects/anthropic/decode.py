"""Messages and count_tokens request bodies, validated and turned into canonical requests.

The rule for what a client sends: a field the Messages API accepts is never refused. What this
gateway cannot honour (context management, Anthropic's containers and MCP servers, per-turn
tool changes, …) is checked for its type and then left out, its path added to the `Dropped`
record the caller passes in, so that the route can log it. A known field with a wrong type or
value is an `InvalidRequest` whose `param` names it, like any other mistake. Fields the API does
not know at all are ignored (and reported as dropped too): clients add new ones faster than any
gateway follows.
"""

from __future__ import annotations

from typing import Any

from mindrouter.canonical import ChatRequest, ResponseFormat, Sampling
from mindrouter.dialects.anthropic.fields import (
    Dropped,
    as_bool,
    as_choice,
    as_int,
    as_list,
    as_number,
    as_object,
    as_str,
    check_cache_control,
    child,
    invalid,
    required,
)
from mindrouter.dialects.anthropic.messages import decode_messages, decode_system
from mindrouter.dialects.anthropic.thinking import decode_effort, decode_reasoning
from mindrouter.dialects.anthropic.tools import decode_tool_choice, decode_tools
from mindrouter.dialects.fields import kind_of
from mindrouter.errors import InvalidRequest

# Top-level fields the gateway reads.
_DECODED = frozenset(
    {
        "model",
        "max_tokens",
        "messages",
        "system",
        "stop_sequences",
        "temperature",
        "top_p",
        "top_k",
        "stream",
        "tools",
        "tool_choice",
        "thinking",
        "output_config",
        "metadata",
        "cache_control",
    }
)
# Top-level fields the API accepts that nothing here can act on: the JSON kinds each may be.
_ACCEPTED: dict[str, tuple[type, ...]] = {
    "service_tier": (str,),
    "speed": (str,),
    "inference_geo": (str,),
    "container": (dict, str),
    "mcp_servers": (list,),
    "context_management": (dict,),
    "compaction": (dict,),
    "diagnostics": (dict,),
    "billing_policy": (dict,),
    "fallback_credit_token": (dict, str),
    "fallbacks": (list, str),
    "thread": (dict,),
    "betas": (list,),
    "user_profile_id": (str,),
    "workspace_id": (str,),
}
_KIND_NAMES: dict[type, str] = {str: "a string", dict: "an object", list: "an array"}


def decode_messages_request(
    body: object, *, signing_key: bytes, dropped: Dropped | None = None
) -> ChatRequest:
    """A `POST /v1/messages` body. Raises InvalidRequest(message, param).

    `signing_key` is the key the gateway signs thinking blocks with. Replayed thinking is
    accepted whatever its signature (see `messages`), so decoding does not need it today; it is
    taken so that tightening that policy would not change any caller. `dropped` gathers what
    was accepted but left out.
    """
    del signing_key
    return _decode(body, count_only=False, dropped=dropped or Dropped())


def decode_count_tokens_request(
    body: object, *, signing_key: bytes, dropped: Dropped | None = None
) -> ChatRequest:
    """A `POST /v1/messages/count_tokens` body: like messages, but `max_tokens` is optional."""
    del signing_key
    return _decode(body, count_only=True, dropped=dropped or Dropped())


def _decode(body: object, *, count_only: bool, dropped: Dropped) -> ChatRequest:
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.", param=None)
    obj: dict[str, Any] = body
    model = as_str(required(obj, "model", ""), "model", non_empty=True)
    if count_only:
        raw_max = obj.get("max_tokens")
        max_tokens = None if raw_max is None else as_int(raw_max, "max_tokens", minimum=1)
    else:
        max_tokens = as_int(required(obj, "max_tokens", ""), "max_tokens", minimum=1)
    _check_accepted(obj, dropped)
    check_cache_control(obj, "")
    system = decode_system(obj.get("system"))
    messages = decode_messages(required(obj, "messages", ""), dropped)
    tools = decode_tools(obj.get("tools"), dropped)
    tool_choice = decode_tool_choice(obj.get("tool_choice"), tools)
    output_config = _output_config(obj.get("output_config"), dropped)
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
        tools=tools.tools,
        tool_choice=tool_choice,
        stream=False if stream is None or count_only else as_bool(stream, "stream"),
        user=_user(obj.get("metadata")),
    )


def _check_accepted(obj: dict[str, Any], dropped: Dropped) -> None:
    for key, value in obj.items():
        if key in _DECODED or value is None:
            continue
        kinds = _ACCEPTED.get(key)
        if kinds is not None and not isinstance(value, kinds):
            expected = " or ".join(_KIND_NAMES[k] for k in kinds)
            raise invalid(key, f"expected {expected}, got {kind_of(value)}")
        dropped.add(key)


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


def _output_config(value: object, dropped: Dropped) -> dict[str, Any] | None:
    if value is None:
        return None
    config = as_object(value, "output_config")
    # A task budget steers how Anthropic paces a long agent run; there is nothing to map it to.
    if config.get("task_budget") is not None:
        as_object(config["task_budget"], "output_config.task_budget")
        dropped.add("output_config.task_budget")
    return config


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
