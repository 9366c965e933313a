"""Rerank and score, as vLLM (`/rerank`, `/v1/rerank`, `/v2/rerank`, `/score`, `/v1/score`) and
llama.cpp's `llama-server --reranking` (`/rerank`, `/v1/rerank`, ...) answer them.

Scores are deterministic and plausible: the more words a document shares with the query (cosine
of their word sets, plurals folded into the singular), the higher, with a small hash-based
offset so that ties are rare. vLLM answers a cross-encoder's probability in (0, 1); llama.cpp
the raw logit behind it, which may be negative. Each (query, document) pair costs
`pair_tokens`: both texts plus the three separator tokens a cross-encoder template adds; usage
is the sum over the pairs.

vLLM's `/rerank` sorts best first, returns each document's text, and cuts to `top_n` when it is
between 1 and the number of documents. llama.cpp sorts too but sends no text, and cuts to
`top_n` (default: every document), so `top_n: 0` gets no results there.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.types import ASGIApp

from mindrouter.sim.engine import RequestRecord, SimError
from mindrouter.sim.openai_decode import json_object, model_field
from mindrouter.sim.openai_encode import BodyEncoder, new_id
from mindrouter.sim.playback import GenerationResponse, Job, Timing
from mindrouter.sim.tokenizer import count_tokens

if TYPE_CHECKING:
    from mindrouter.sim.openai_server import OpenAIServer

PAIR_OVERHEAD = 3  # [CLS] query [SEP] document [SEP]
_WORD = re.compile(r"\w+")


def pair_tokens(query: str, document: str) -> int:
    return count_tokens(query) + count_tokens(document) + PAIR_OVERHEAD


def _words(text: str) -> set[str]:
    # A plural and its singular count as one word, so "lives" matches "live".
    return {w[:-1] if len(w) > 3 and w.endswith("s") else w for w in _WORD.findall(text.lower())}


def relevance_logit(query: str, document: str) -> float:
    q, d = _words(query), _words(document)
    overlap = len(q & d) / math.sqrt(len(q) * len(d)) if q and d else 0.0
    digest = hashlib.blake2b(f"{query}\0{document}".encode(), digest_size=4).digest()
    jitter = int.from_bytes(digest, "little") / 2**32 - 0.5
    return 12.0 * overlap - 4.0 + 0.5 * jitter


def relevance(query: str, document: str) -> float:
    """The probability a cross-encoder would give: the logistic of `relevance_logit`."""
    return 1.0 / (1.0 + math.exp(-relevance_logit(query, document)))


@dataclass
class Pairs:
    model: str
    queries: list[str]  # one per document
    documents: list[str]
    top_n: int | None = None


def _strings(value: Any, param: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return list(value)
    raise SimError(400, f"{param} must be a string or a non-empty list of strings", param=param)


def decode_rerank(body: Any) -> Pairs:
    body = json_object(body)
    query = body.get("query")
    if not isinstance(query, str):
        raise SimError(400, "query must be a string", param="query")
    documents = body.get("documents")
    if not isinstance(documents, list) or not documents:
        raise SimError(400, "documents must be a non-empty list of strings", param="documents")
    if not all(isinstance(d, str) for d in documents):
        raise SimError(400, "documents must be a non-empty list of strings", param="documents")
    top_n = body.get("top_n")
    if top_n is not None and (not isinstance(top_n, int) or isinstance(top_n, bool)):
        raise SimError(400, "top_n must be an integer", param="top_n")
    return Pairs(model_field(body), [query] * len(documents), list(documents), top_n)


def decode_score(body: Any) -> Pairs:
    body = json_object(body)
    for key in ("text_1", "text_2"):
        if key not in body:
            raise SimError(400, f"{key} is required", param=key)
    first = _strings(body["text_1"], "text_1")
    second = _strings(body["text_2"], "text_2")
    if len(first) > 1 and len(first) != len(second):
        raise SimError(400, "Input lengths must be either 1:1, 1:N or N:N")
    queries = first * len(second) if len(first) == 1 else first
    return Pairs(model_field(body), queries, second)


def relevance_reply(
    server: OpenAIServer, pairs: Pairs, record: RequestRecord, ranked: bool
) -> ASGIApp:
    """Score every pair and answer in the engine's shape: `ranked` for `/rerank`, in request
    order for `/score`."""
    model = server.resolve_model(pairs.model, "rerank")
    record.model = model.name
    costs = [pair_tokens(q, d) for q, d in zip(pairs.queries, pairs.documents, strict=True)]
    for cost in costs:
        server.fit(model, cost, 0)
    record.prompt_tokens = tokens = sum(costs)
    if (hang := server.fault(record)) is not None:
        return hang
    vllm = server.dialect == "vllm"
    score = relevance if vllm else relevance_logit
    scores = [score(q, d) for q, d in zip(pairs.queries, pairs.documents, strict=True)]
    name = server.echo_model(pairs.model, model)

    def build(timing: Timing) -> dict[str, Any]:
        if not ranked:
            return {
                "id": new_id("score"),
                "object": "list",
                "created": int(time.time()),
                "model": name,
                "data": [{"index": i, "object": "score", "score": s} for i, s in enumerate(scores)],
                "usage": {
                    "prompt_tokens": tokens,
                    "total_tokens": tokens,
                    "completion_tokens": 0,
                    "prompt_tokens_details": None,
                },
            }
        order = sorted(range(len(scores)), key=lambda i: -scores[i])
        if vllm:
            if pairs.top_n is not None and 0 < pairs.top_n < len(order):
                order = order[: pairs.top_n]
            results = [
                {
                    "index": i,
                    "document": {"text": pairs.documents[i], "multi_modal": None},
                    "relevance_score": scores[i],
                }
                for i in order
            ]
            usage = {"prompt_tokens": tokens, "total_tokens": tokens}
            return {"id": new_id("rerank"), "model": name, "usage": usage, "results": results}
        top_n = len(order) if pairs.top_n is None else max(0, pairs.top_n)
        results = [{"index": i, "relevance_score": scores[i]} for i in order[:top_n]]
        return {
            "model": name,
            "object": "list",
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            "results": results,
        }

    return GenerationResponse(server.state, Job(record, [], BodyEncoder(build), stream=False))
