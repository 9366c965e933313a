"""Rerank and score bodies, as vLLM serves them next to its OpenAI routes.

Rerank is the Jina / Cohere shape that RAG front ends send (Open WebUI, Dify, LangChain's
Cohere and Jina rerankers): `{model, query, documents, top_n, return_documents}` answered with
`results` sorted best first, each `{index, relevance_score, document?}`. Score is vLLM's own:
`{model, text_1, text_2}` answered with one `{index, score}` per pair in request order.

Both decode into one `RelevanceRequest`; ordering, `top_n` and echoing documents back are done
here, from the request, so every engine's answer looks the same to the client. Errors are
`InvalidRequest`s naming the field, as the OpenAI dialect reports them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from mindrouter.canonical import RelevanceRequest, RelevanceResult
from mindrouter.dialects.openai.fields import JSONObject, invalid, kind_of, opt_bool, path, req_str
from mindrouter.errors import InvalidRequest

# More documents than this in one request is a mistake, not a search (Cohere allows 10,000 too).
MAX_DOCUMENTS = 10_000

_RERANK_DECODED = frozenset({"model", "query", "documents", "top_n", "return_documents"})
# Cohere's document options that no engine here implements: accepted and left out.
_RERANK_IGNORED = frozenset({"rank_fields", "max_chunks_per_doc", "max_tokens_per_doc"})
# vLLM accepts its two score inputs under any of these names; text_1 / text_2 is the oldest.
_SCORE_FIELDS = (
    ("text_1", "text_2"),
    ("queries", "documents"),
    ("queries", "items"),
    ("data_1", "data_2"),
)
_SCORE_DECODED = frozenset(name for pair in _SCORE_FIELDS for name in pair) | {"model"}


@dataclass(frozen=True, slots=True)
class RerankOptions:
    """How the client wants the ranking shown: the best `top_n` (None: all), with the texts."""

    top_n: int | None = None
    return_documents: bool = True


def decode_rerank_request(body: object) -> tuple[RelevanceRequest, RerankOptions]:
    """A `/v1/rerank` (`/rerank`, `/v2/rerank`) body. `top_n` 0 or null means every document,
    as vLLM reads it; documents are returned unless `return_documents` is false."""
    obj = _body(body)
    model = req_str(obj, "model", non_empty=True)
    if obj.get("query") is None:
        raise invalid("query", "is required")
    query = _text(obj["query"], "query")
    if not query:
        raise invalid("query", "must not be empty")
    documents = _documents(obj.get("documents"))
    top_n = obj.get("top_n")
    if top_n is not None and (not isinstance(top_n, int) or isinstance(top_n, bool) or top_n < 0):
        shown = top_n if isinstance(top_n, int) and not isinstance(top_n, bool) else kind_of(top_n)
        raise invalid("top_n", f"must be an integer >= 0, got {shown}")
    returned = opt_bool(obj, "return_documents")
    request = RelevanceRequest(
        model=model,
        queries=[query],
        documents=documents,
        extra=_extras(obj, _RERANK_DECODED | _RERANK_IGNORED),
    )
    options = RerankOptions(top_n=top_n or None, return_documents=returned is not False)
    return request, options


def decode_score_request(body: object) -> RelevanceRequest:
    """A `/v1/score` body: `text_1` is one text, compared with each of `text_2`, or as many
    texts as `text_2`, compared pair by pair."""
    obj = _body(body)
    model = req_str(obj, "model", non_empty=True)
    first, second = _score_fields(obj)
    queries = _texts(obj[first], first)
    documents = _texts(obj[second], second)
    if len(queries) not in (1, len(documents)):
        raise invalid(
            first,
            f"must hold one text or as many as {second} ({len(documents)}), got {len(queries)}",
        )
    return RelevanceRequest(
        model=model, queries=queries, documents=documents, extra=_extras(obj, _SCORE_DECODED)
    )


def rerank_id(request_id: str) -> str:
    """The response id vLLM would give (`rerank-…`), made from the gateway's request id."""
    return "rerank-" + request_id.partition("-")[2]


def score_id(request_id: str) -> str:
    return "score-" + request_id.partition("-")[2]


def encode_rerank_response(
    result: RelevanceResult,
    req: RelevanceRequest,
    options: RerankOptions,
    *,
    request_id: str,
    model: str,
) -> dict[str, Any]:
    scores = result.scores
    # Best first; equal scores keep the documents' order, so the answer is deterministic.
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    if options.top_n is not None:
        order = order[: options.top_n]
    results: list[dict[str, Any]] = []
    for i in order:
        item: dict[str, Any] = {"index": i, "relevance_score": scores[i]}
        if options.return_documents:
            item["document"] = {"text": req.documents[i]}
        results.append(item)
    tokens = result.usage.input_tokens
    return {
        "id": rerank_id(request_id),
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        "results": results,
    }


def encode_score_response(
    result: RelevanceResult, *, request_id: str, created: int, model: str
) -> dict[str, Any]:
    tokens = result.usage.input_tokens
    return {
        "id": score_id(request_id),
        "object": "list",
        "created": created,
        "model": model,
        "data": [
            {"index": i, "object": "score", "score": score} for i, score in enumerate(result.scores)
        ],
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0},
    }


def _body(body: object) -> JSONObject:
    if not isinstance(body, dict):
        raise InvalidRequest(f"The request body must be a JSON object, got {kind_of(body)}.")
    return cast(JSONObject, body)


def _extras(obj: JSONObject, known: frozenset[str]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in known}


def _text(value: object, param: str) -> str:
    """A string, or an object carrying one in `text` (Jina's and Cohere's document objects)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        text = value.get("text")
        if isinstance(text, str):
            return text
        where = path(param, "text")
        if text is None:
            raise invalid(where, "is required")
        raise invalid(where, f"must be a string, got {kind_of(text)}")
    raise invalid(param, f"must be a string or an object with text, got {kind_of(value)}")


def _documents(value: object) -> list[str]:
    if value is None:
        raise invalid("documents", "is required")
    if not isinstance(value, list):
        raise invalid("documents", f"must be an array, got {kind_of(value)}")
    if not value:
        raise invalid("documents", "must not be an empty array")
    if len(value) > MAX_DOCUMENTS:
        raise invalid("documents", f"at most {MAX_DOCUMENTS} documents, got {len(value)}")
    return [_text(item, path("documents", i)) for i, item in enumerate(value)]


def _texts(value: object, param: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise invalid(param, f"must be a string or an array of strings, got {kind_of(value)}")
    if not value:
        raise invalid(param, "must not be an empty array")
    if len(value) > MAX_DOCUMENTS:
        raise invalid(param, f"at most {MAX_DOCUMENTS} texts, got {len(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise invalid(path(param, i), f"must be a string, got {kind_of(item)}")
    return cast(list[str], value)


def _score_fields(obj: JSONObject) -> tuple[str, str]:
    """The pair of names this body uses for its two inputs."""
    for first, second in _SCORE_FIELDS:
        if obj.get(first) is not None and obj.get(second) is not None:
            return first, second
    for first, second in _SCORE_FIELDS:
        if obj.get(first) is not None:
            raise invalid(second, "is required")
        if obj.get(second) is not None:
            raise invalid(first, "is required")
    raise invalid("text_1", "is required")
