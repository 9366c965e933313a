"""Relevance requests on the engines' wire (pure, no I/O): vLLM's `/score`, and the Jina-style
`/rerank` that llama.cpp (`llama-server --reranking`) and OpenAI-compatible servers serve.

Answers are read by `index`, never by position: `/rerank` answers come sorted best first. An
answer that does not give exactly one finite score for each document sent is the backend's
failure, so the request may be retried elsewhere.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from mindrouter.backends.fields import token_count
from mindrouter.canonical import RelevanceRequest, RelevanceResult, Usage
from mindrouter.errors import UpstreamUnavailable

Json = dict[str, Any]


def query_groups(req: RelevanceRequest) -> dict[str, list[int]]:
    """The documents (by position) that share each query, in first-seen order: `/rerank` takes
    one query per call, so a score request with several queries takes one call per query."""
    groups: dict[str, list[int]] = {}
    for i in range(len(req.documents)):
        groups.setdefault(req.query_of(i), []).append(i)
    return groups


def encode_rerank(model: str, query: str, documents: list[str], extra: Json) -> Json:
    # top_n spelled out: Jina-style servers default to all documents, but not every one does.
    return {
        **extra,
        "model": model,
        "query": query,
        "documents": documents,
        "top_n": len(documents),
    }


def encode_score(req: RelevanceRequest, extra: Json) -> Json:
    """vLLM's `/score`: one text against every document, or one text per document."""
    text_1: str | list[str] = req.queries[0] if len(req.queries) == 1 else req.queries
    return {**extra, "model": req.model, "text_1": text_1, "text_2": req.documents}


def decode_rerank(data: Json, count: int, backend: str) -> tuple[list[float], int | None]:
    """Scores in document order from a `/rerank` answer, and the tokens it says it read."""
    return _scores(data.get("results"), "relevance_score", count, backend), _tokens(data)


def decode_score(data: Json, count: int, backend: str) -> tuple[list[float], int | None]:
    return _scores(data.get("data"), "score", count, backend), _tokens(data)


def relevance_result(
    req: RelevanceRequest,
    scores: list[float],
    tokens: int | None,
    estimate_input: Callable[[], int],
) -> RelevanceResult:
    if tokens is None:
        usage = Usage(input_tokens=estimate_input(), estimated=True)
    else:
        usage = Usage(input_tokens=tokens)
    return RelevanceResult(model=req.model, scores=scores, usage=usage)


def _scores(items: Any, key: str, count: int, backend: str) -> list[float]:
    scores: list[float | None] = [None] * count
    for item in items if isinstance(items, list) else ():
        index = item.get("index") if isinstance(item, dict) else None
        value = item.get(key) if isinstance(item, dict) else None
        if not isinstance(index, int) or not 0 <= index < count or scores[index] is not None:
            raise _bad_answer(backend, f"a result with a bad or repeated index: {index!r}")
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise _bad_answer(backend, f"result {index} without a numeric {key}")
        if not math.isfinite(value):
            raise _bad_answer(backend, f"result {index} with a {key} that is not finite")
        scores[index] = float(value)
    missing = [i for i, s in enumerate(scores) if s is None]
    if missing:
        raise _bad_answer(backend, f"no score for {len(missing)} of {count} documents")
    return [s for s in scores if s is not None]


def _tokens(data: Json) -> int | None:
    usage = data.get("usage")
    if not isinstance(usage, dict):
        return None
    for key in ("prompt_tokens", "total_tokens"):
        value = token_count(usage.get(key))
        if value is not None:
            return value
    return None


def _bad_answer(backend: str, problem: str) -> UpstreamUnavailable:
    return UpstreamUnavailable(f"{backend}: the relevance answer has {problem}", backend)
