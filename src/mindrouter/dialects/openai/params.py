"""Decode the generation parameters shared by chat and legacy completions: sampling, stop strings,
streaming flags, the response format and reasoning control.
"""

from __future__ import annotations

from typing import cast

from mindrouter.canonical import EFFORTS, Effort, Reasoning, ResponseFormat, Sampling
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
)

# OpenAI's own limits; engines accept more, but clients written against OpenAI expect these.
MAX_STOP_STRINGS = 4
MAX_CHOICES = 128


def decode_sampling(body: JSONObject, *, default_max_tokens: int | None = None) -> Sampling:
    """Sampling parameters, including the non-standard top_k, min_p and repetition_penalty that
    clients send through `extra_body` for vLLM and llama.cpp.

    `max_completion_tokens` wins over the older `max_tokens` when both are sent.
    """
    max_tokens = opt_int(body, "max_tokens", minimum=1)
    newer = opt_int(body, "max_completion_tokens", minimum=1)
    if newer is not None:
        max_tokens = newer
    return Sampling(
        max_tokens=default_max_tokens if max_tokens is None else max_tokens,
        temperature=opt_number(body, "temperature", minimum=0, maximum=2),
        top_p=opt_number(body, "top_p", minimum=0, maximum=1),
        # -1 (vLLM) and 0 (llama.cpp) both mean "no top-k cut".
        top_k=opt_int(body, "top_k", minimum=-1),
        min_p=opt_number(body, "min_p", minimum=0, maximum=1),
        repetition_penalty=opt_number(body, "repetition_penalty", above=0),
        frequency_penalty=opt_number(body, "frequency_penalty", minimum=-2, maximum=2),
        presence_penalty=opt_number(body, "presence_penalty", minimum=-2, maximum=2),
        stop=decode_stop(body),
        seed=opt_int(body, "seed"),
        n=opt_int(body, "n", minimum=1, maximum=MAX_CHOICES) or 1,
    )


def decode_stop(body: JSONObject) -> list[str]:
    """`stop` as a list. Empty strings are dropped: they could never usefully end generation, and
    some clients send `""` to mean "no stop string"."""
    value = body.get("stop")
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value else []
    if not isinstance(value, list):
        raise invalid("stop", f"must be a string or an array of strings, got {kind_of(value)}")
    if len(value) > MAX_STOP_STRINGS:
        raise invalid("stop", f"at most {MAX_STOP_STRINGS} stop strings, got {len(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise invalid(path("stop", i), f"must be a string, got {kind_of(item)}")
    return [item for item in value if item]


def decode_stream(body: JSONObject) -> bool:
    """Whether to stream; also checks `stream_options`, which OpenAI accepts only with streaming."""
    stream = opt_bool(body, "stream") or False
    options = opt_object(body, "stream_options")
    if options is not None:
        if not stream:
            raise invalid("stream_options", "is only allowed when stream is true")
        for key in ("include_usage", "include_obfuscation", "continuous_usage_stats"):
            opt_bool(options, key, "stream_options")
    return stream


def wants_usage(body: object) -> bool:
    """Whether a streamed reply should end with a usage chunk (`stream_options.include_usage`).

    Read from the raw body because the canonical request has no place for it: it shapes only the
    client's stream. Call it after the decoder has accepted the body.
    """
    if not isinstance(body, dict) or body.get("stream") is not True:
        return False
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def decode_response_format(body: JSONObject) -> ResponseFormat | None:
    spec = opt_object(body, "response_format")
    if spec is None:
        return None
    kind = spec.get("type")
    # llama.cpp also takes the schema at the top level of response_format.
    loose_schema = opt_object(spec, "schema", "response_format")
    if kind == "text":
        return ResponseFormat(kind="text")
    if kind == "json_object":
        if loose_schema is not None:
            return ResponseFormat(kind="json_schema", schema=loose_schema)
        return ResponseFormat(kind="json")
    if kind == "json_schema":
        at = "response_format.json_schema"
        inner = opt_object(spec, "json_schema", "response_format")
        if inner is None:
            if loose_schema is None:
                raise invalid(at, "is required when type is json_schema")
            return ResponseFormat(kind="json_schema", schema=loose_schema)
        schema = opt_object(inner, "schema", at)
        if schema is None:
            raise invalid(path(at, "schema"), "is required")
        return ResponseFormat(
            kind="json_schema",
            schema=schema,
            name=opt_str(inner, "name", at),
            strict=opt_bool(inner, "strict", at),
        )
    shown = repr(kind) if isinstance(kind, str) else kind_of(kind)
    raise invalid("response_format.type", f"must be text, json_object or json_schema; got {shown}")


def decode_reasoning(body: JSONObject) -> Reasoning:
    """`reasoning_effort` none turns thinking off and any other level turns it on with that
    effort. An explicit `chat_template_kwargs.enable_thinking` boolean then has the last word,
    because it is what the model's chat template will actually obey."""
    reasoning = Reasoning()
    effort = opt_str(body, "reasoning_effort")
    if effort is not None:
        if effort not in EFFORTS:
            raise invalid(
                "reasoning_effort", f"must be one of {', '.join(EFFORTS)}; got {effort!r}"
            )
        reasoning.effort = cast(Effort, effort)
        reasoning.mode = "off" if effort == "none" else "on"
    kwargs = opt_object(body, "chat_template_kwargs")
    if kwargs is not None:
        enable = opt_bool(kwargs, "enable_thinking", "chat_template_kwargs")
        if enable is not None:
            reasoning.mode = "on" if enable else "off"
            if enable and reasoning.effort == "none":
                reasoning.effort = None
    include = opt_bool(body, "include_reasoning")
    if include is not None:
        reasoning.return_reasoning = include
    return reasoning
