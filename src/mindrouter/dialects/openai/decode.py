"""Decode OpenAI request bodies into canonical requests: chat, legacy completions, embeddings.

Input is the already-parsed JSON body. Anything wrong raises `InvalidRequest` whose message
starts with the offending parameter (`messages[2].content[0]: unknown content part type 'foo'`)
and whose `param` is that same path, as OpenAI reports it.

Fields are sorted three ways: those with a canonical meaning are decoded; OpenAI fields the
gateway accepts but does not act on (metadata, store, logprobs, ...) are dropped; everything else
is an engine extra (chat_template_kwargs, min_tokens, mirostat, logit_bias, ...) and is kept
untouched in `extra`, so it reaches engines that speak OpenAI's wire format.
"""

from __future__ import annotations

from typing import Any, Literal, cast

from mindrouter.canonical import ChatRequest, CompletionRequest, EmbeddingRequest
from mindrouter.dialects.openai.fields import (
    JSONObject,
    invalid,
    kind_of,
    opt_int,
    opt_str,
    path,
    req_str,
)
from mindrouter.dialects.openai.messages import decode_messages
from mindrouter.dialects.openai.params import (
    decode_reasoning,
    decode_response_format,
    decode_sampling,
    decode_stream,
)
from mindrouter.dialects.openai.tools import decode_tools
from mindrouter.errors import InvalidRequest

EncodingFormat = Literal["float", "base64"]

# OpenAI's default output limit for legacy completions, which engines do not share (vLLM uses the
# rest of the context, llama.cpp unlimited), so it is applied here to keep OpenAI's behaviour.
COMPLETION_DEFAULT_MAX_TOKENS = 16
MAX_EMBEDDING_INPUTS = 2048

# Fields both endpoints decode into the canonical request.
_SHARED_DECODED = frozenset(
    {
        "model",
        "user",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "repetition_penalty",
        "frequency_penalty",
        "presence_penalty",
        "stop",
        "seed",
        "n",
        "stream",
        "stream_options",
    }
)
_CHAT_DECODED = _SHARED_DECODED | {
    "messages",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "functions",
    "function_call",
    "response_format",
    "reasoning_effort",
    "include_reasoning",
}
_CHAT_IGNORED = frozenset(
    {
        "metadata",
        "store",
        "service_tier",
        "logprobs",
        "top_logprobs",
        "safety_identifier",
        "prompt_cache_key",
        "prompt_cache_retention",
        "verbosity",
        "modalities",
        "audio",
        "prediction",
        "web_search_options",
    }
)
_COMPLETION_DECODED = _SHARED_DECODED | {"prompt", "suffix", "echo", "logprobs"}


def decode_chat_request(body: object) -> ChatRequest:
    """A `/v1/chat/completions` body as a ChatRequest.

    Whether a streamed reply should carry a usage chunk is not part of the canonical request; ask
    `wants_usage(body)` for it once this has accepted the body.
    """
    obj = _body(body)
    model = _model(obj)
    if obj.get("messages") is None:
        raise invalid("messages", "is required")
    messages = decode_messages(obj["messages"])
    tools, tool_choice = decode_tools(obj)
    return ChatRequest(
        model=model,
        messages=messages,
        sampling=decode_sampling(obj),
        response_format=decode_response_format(obj),
        reasoning=decode_reasoning(obj),
        tools=tools,
        tool_choice=tool_choice,
        stream=decode_stream(obj),
        extra=_extras(obj, _CHAT_DECODED, _CHAT_IGNORED),
        user=opt_str(obj, "user"),
    )


def decode_completion_request(body: object) -> CompletionRequest:
    """A legacy `/v1/completions` body. `max_tokens` defaults to 16 as on OpenAI."""
    obj = _body(body)
    model = _model(obj)
    prompt = _prompt(obj.get("prompt"))
    opt_int(obj, "logprobs", minimum=0, maximum=5)
    return CompletionRequest(
        model=model,
        prompt=prompt,
        sampling=decode_sampling(obj, default_max_tokens=COMPLETION_DEFAULT_MAX_TOKENS),
        suffix=opt_str(obj, "suffix"),
        echo=_flag(obj, "echo"),
        stream=decode_stream(obj),
        extra=_extras(obj, _COMPLETION_DECODED, frozenset()),
        user=opt_str(obj, "user"),
    )


def decode_embedding_request(body: object) -> tuple[EmbeddingRequest, EncodingFormat]:
    """A `/v1/embeddings` body and the encoding the vectors should be returned in.

    The encoding defaults to float when absent (the openai SDK always sends it, as base64).
    """
    obj = _body(body)
    model = _model(obj)
    fmt = obj.get("encoding_format")
    if fmt is None:
        fmt = "float"
    elif fmt not in ("float", "base64"):
        shown = repr(fmt) if isinstance(fmt, str) else kind_of(fmt)
        raise invalid("encoding_format", f"must be float or base64, got {shown}")
    request = EmbeddingRequest(
        model=model,
        inputs=_embedding_inputs(obj.get("input")),
        dimensions=opt_int(obj, "dimensions", minimum=1),
        user=opt_str(obj, "user"),
    )
    return request, cast(EncodingFormat, fmt)


def _body(body: object) -> JSONObject:
    if not isinstance(body, dict):
        raise InvalidRequest(f"The request body must be a JSON object, got {kind_of(body)}.")
    return cast(JSONObject, body)


def _model(obj: JSONObject) -> str:
    return req_str(obj, "model", non_empty=True)


def _flag(obj: JSONObject, key: str) -> bool:
    value = obj.get(key)
    if value is None or isinstance(value, bool):
        return bool(value)
    raise invalid(key, f"must be a boolean, got {kind_of(value)}")


def _extras(obj: JSONObject, decoded: frozenset[str], ignored: frozenset[str]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in decoded and k not in ignored}


def _prompt(value: object) -> list[str]:
    if value is None:
        raise invalid("prompt", "is required")
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise invalid("prompt", f"must be a string or an array of strings, got {kind_of(value)}")
    if not value:
        raise invalid("prompt", "must not be an empty array")
    for i, item in enumerate(value):
        if isinstance(item, str):
            continue
        if isinstance(item, list) or (isinstance(item, int) and not isinstance(item, bool)):
            raise invalid("prompt", "token id prompts are not supported; send text")
        raise invalid(path("prompt", i), f"must be a string, got {kind_of(item)}")
    return value


def _embedding_inputs(value: object) -> list[str] | list[list[int]]:
    if value is None:
        raise invalid("input", "is required")
    if isinstance(value, str):
        if not value:
            raise invalid("input", "must not be an empty string")
        return [value]
    if not isinstance(value, list):
        raise invalid("input", f"must be a string or an array, got {kind_of(value)}")
    if not value:
        raise invalid("input", "must not be an empty array")
    if len(value) > MAX_EMBEDDING_INPUTS:
        raise invalid("input", f"at most {MAX_EMBEDDING_INPUTS} inputs, got {len(value)}")
    first = value[0]
    if isinstance(first, str):
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise invalid(path("input", i), f"must be a string, got {kind_of(item)}")
            if not item:
                raise invalid(path("input", i), "must not be an empty string")
        return cast(list[str], value)
    if isinstance(first, list):
        return [_token_ids(item, path("input", i)) for i, item in enumerate(value)]
    return [_token_ids(value, "input")]


def _token_ids(value: object, at: str) -> list[int]:
    if not isinstance(value, list):
        raise invalid(at, f"must be an array of token ids, got {kind_of(value)}")
    if not value:
        raise invalid(at, "must not be an empty array")
    for i, item in enumerate(value):
        if not isinstance(item, int) or isinstance(item, bool) or item < 0:
            shown = item if isinstance(item, int) and not isinstance(item, bool) else kind_of(item)
            raise invalid(path(at, i), f"must be a token id (an integer >= 0), got {shown}")
    return cast(list[int], value)
