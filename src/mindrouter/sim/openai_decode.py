"""Decode OpenAI-shaped requests (as vLLM and llama.cpp accept them) into engine-neutral terms.

Unknown fields are accepted and ignored, as both engines do. Invalid values raise `SimError(400)`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from mindrouter.sim.engine import SimError
from mindrouter.sim.tokenizer import count_tokens

Dialect = Literal["vllm", "llamacpp"]


@dataclass
class Prompt:
    seed_text: str
    tokens: int


@dataclass
class CompletionRequest:
    model: str
    prompts: list[Prompt]
    stream: bool
    include_usage: bool
    continuous_usage: bool
    max_tokens: int | None
    stop: list[str]
    n: int
    ignore_eos: bool = False


@dataclass
class EmbeddingRequest:
    model: str
    inputs: list[Prompt] = field(default_factory=list)
    base64: bool = False
    dimensions: int | None = None


def json_object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise SimError(400, "the request body must be a JSON object")
    return body


def int_field(body: Mapping[str, Any], key: str, minimum: int | None = None) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise SimError(400, f"{key} must be an integer", param=key)
    if minimum is not None and value < minimum:
        raise SimError(400, f"{key} must be at least {minimum}, got {value}.", param=key)
    return value


def decode_stop(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return list(value)
    raise SimError(400, "stop must be a string or a list of strings", param="stop")


def stream_options(body: Mapping[str, Any]) -> tuple[bool, bool, bool]:
    stream = body.get("stream") is True
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise SimError(400, "stream_options must be an object", param="stream_options")
    options = options or {}
    if options and not stream:
        raise SimError(400, "Stream options can only be defined when `stream=True`.")
    return (
        stream,
        options.get("include_usage") is True,
        options.get("continuous_usage_stats") is True,
    )


def model_field(body: Mapping[str, Any]) -> str:
    """The requested model; "" when absent (both engines then use the model they serve)."""
    model = body.get("model")
    if model is None or isinstance(model, str):
        return model or ""
    raise SimError(400, "model must be a string", param="model")


def decode_inputs(value: Any, param: str) -> list[Prompt]:
    """A string, a list of strings, a list of token ids, or a list of token-id lists."""
    if isinstance(value, str):
        return [Prompt(value, count_tokens(value))]
    if not isinstance(value, list) or not value:
        raise SimError(400, f"{param} must be a non-empty string or list", param=param)
    if all(isinstance(item, int) and not isinstance(item, bool) for item in value):
        return [Prompt(" ".join(map(str, value)), len(value))]
    prompts: list[Prompt] = []
    for item in value:
        if isinstance(item, str):
            prompts.append(Prompt(item, count_tokens(item)))
        elif isinstance(item, list) and item and all(isinstance(i, int) for i in item):
            prompts.append(Prompt(" ".join(map(str, item)), len(item)))
        else:
            raise SimError(400, f"{param} items must be strings or lists of token ids", param=param)
    return prompts


def decode_completion(body: Any, dialect: Dialect) -> CompletionRequest:
    body = json_object(body)
    if "prompt" not in body:
        raise SimError(400, "prompt is required", param="prompt")
    stream, include_usage, continuous = stream_options(body)
    if dialect == "vllm":
        # vLLM's completion endpoint keeps OpenAI's default of 16 tokens.
        max_tokens = int_field(body, "max_tokens", 1) if "max_tokens" in body else 16
    else:
        max_tokens = int_field(body, "max_tokens", -1)
        if max_tokens is None:
            max_tokens = int_field(body, "n_predict", -1)
        if max_tokens is not None and max_tokens < 0:
            max_tokens = None
    n = int_field(body, "n", 1) or 1
    if dialect == "llamacpp" and n != 1:
        raise SimError(400, "Only one completion choice is allowed", param="n")
    return CompletionRequest(
        model=model_field(body),
        prompts=decode_inputs(body["prompt"], "prompt"),
        stream=stream,
        include_usage=include_usage,
        continuous_usage=continuous,
        max_tokens=max_tokens,
        stop=decode_stop(body.get("stop")),
        n=n,
        ignore_eos=body.get("ignore_eos") is True,
    )


def decode_embedding(body: Any) -> EmbeddingRequest:
    body = json_object(body)
    if "input" not in body:
        raise SimError(400, "input is required", param="input")
    encoding = body.get("encoding_format") or "float"
    if encoding not in ("float", "base64"):
        raise SimError(400, "encoding_format must be 'float' or 'base64'", param="encoding_format")
    return EmbeddingRequest(
        model=model_field(body),
        inputs=decode_inputs(body["input"], "input"),
        base64=encoding == "base64",
        dimensions=int_field(body, "dimensions", 1),
    )
