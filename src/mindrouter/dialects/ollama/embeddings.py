"""/api/embed and the legacy /api/embeddings, both directions.

The current endpoint returns unit-length (L2-normalised) vectors whatever the backend gave, as
Ollama does, so cosine similarity is a plain dot product for its clients. The legacy endpoint
embeds one prompt and returns the vector as the backend produced it.
"""

from __future__ import annotations

import math
from typing import Any

from mindrouter.canonical import EmbeddingRequest, EmbeddingResult
from mindrouter.dialects.ollama.fields import (
    as_object,
    as_str,
    field,
    invalid,
    kind_of,
    opt_bool,
    opt_int,
    opt_object,
    req_str,
)
from mindrouter.dialects.ollama.lifecycle import parse_keep_alive
from mindrouter.dialects.ollama.timing import Timings


def decode_embed_request(body: object) -> EmbeddingRequest:
    """A /api/embed body: `input` is one string or a non-empty list of them.

    `options` are validated as an object and ignored: no sampling applies to embeddings.
    """
    obj = as_object(body, "")
    model = req_str(obj, "model", "")
    inputs = _inputs(obj.get("input"))
    truncate = opt_bool(obj, "truncate", "")
    dimensions = opt_int(obj, "dimensions", "", lo=1)
    opt_object(obj, "options", "")
    parse_keep_alive(obj.get("keep_alive"))
    return EmbeddingRequest(
        model=model,
        inputs=inputs,
        dimensions=dimensions,
        truncate=True if truncate is None else truncate,
    )


def _inputs(value: object) -> list[str]:
    if value is None:
        raise invalid("input", "is required")
    if isinstance(value, str):
        if not value:
            raise invalid("input", "must not be empty")
        return [value]
    if not isinstance(value, list):
        raise invalid("input", f"must be a string or an array of strings, got {kind_of(value)}")
    if not value:
        raise invalid("input", "must not be an empty array")
    texts: list[str] = []
    for i, item in enumerate(value):
        where = field("input", i)
        text = as_str(item, where)
        if not text:
            raise invalid(where, "must not be empty")
        texts.append(text)
    return texts


def decode_embeddings_request(body: object) -> EmbeddingRequest:
    """A legacy /api/embeddings body: one `prompt` string."""
    obj = as_object(body, "")
    model = req_str(obj, "model", "")
    prompt = obj.get("prompt")
    if prompt is None:
        raise invalid("prompt", "is required")
    if not as_str(prompt, "prompt"):
        raise invalid("prompt", "must not be empty")
    opt_object(obj, "options", "")
    parse_keep_alive(obj.get("keep_alive"))
    return EmbeddingRequest(model=model, inputs=[prompt])


def l2_normalise(vector: list[float]) -> list[float]:
    """`vector` scaled to unit length; a zero (or non-finite) vector is returned unchanged."""
    norm = math.sqrt(math.fsum(x * x for x in vector))
    if norm == 0.0 or not math.isfinite(norm):
        return list(vector)
    return [x / norm for x in vector]


def encode_embed_response(
    result: EmbeddingResult, *, model: str, timings: Timings
) -> dict[str, Any]:
    return {
        "model": model,
        "embeddings": [l2_normalise(v) for v in result.vectors],
        "total_duration": timings.total_ns,
        "load_duration": timings.load_ns,
        "prompt_eval_count": result.usage.input_tokens,
    }


def encode_embeddings_response(result: EmbeddingResult) -> dict[str, Any]:
    return {"embedding": list(result.vectors[0]) if result.vectors else []}
