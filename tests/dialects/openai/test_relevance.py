"""Rerank and score bodies decode into one RelevanceRequest; answers are ranked, cut and shown
from the request, whatever order the engine gave the scores in."""

from __future__ import annotations

from typing import Any

import pytest

from mindrouter.canonical import RelevanceRequest, RelevanceResult, Usage
from mindrouter.dialects.openai import (
    RerankOptions,
    decode_rerank_request,
    decode_score_request,
    encode_rerank_response,
    encode_score_response,
)
from mindrouter.dialects.openai.relevance import MAX_DOCUMENTS
from mindrouter.errors import InvalidRequest

DOCS = ["alpha", "beta", "gamma"]


def test_rerank_defaults_are_vllms() -> None:
    req, options = decode_rerank_request({"model": "m", "query": "q", "documents": DOCS})
    assert req == RelevanceRequest(model="m", queries=["q"], documents=DOCS)
    assert options == RerankOptions(top_n=None, return_documents=True)
    assert req.modality == "rerank"


@pytest.mark.parametrize(("top_n", "kept"), [(None, None), (0, None), (2, 2), (99, 99)])
def test_top_n(top_n: int | None, kept: int | None) -> None:
    body = {"model": "m", "query": "q", "documents": DOCS, "top_n": top_n}
    assert decode_rerank_request(body)[1].top_n == kept


def test_document_objects_and_query_object() -> None:
    body = {
        "model": "m",
        "query": {"text": "q"},
        "documents": [{"text": "a", "title": "t"}, "b"],
        "return_documents": False,
    }
    req, options = decode_rerank_request(body)
    assert req.queries == ["q"] and req.documents == ["a", "b"]
    assert options.return_documents is False


def test_extras_kept_cohere_options_dropped() -> None:
    body = {
        "model": "m",
        "query": "q",
        "documents": DOCS,
        "truncate_prompt_tokens": 128,
        "priority": 1,
        "rank_fields": ["text"],
        "max_tokens_per_doc": 512,
        "max_chunks_per_doc": 3,
    }
    assert decode_rerank_request(body)[0].extra == {"truncate_prompt_tokens": 128, "priority": 1}


@pytest.mark.parametrize(
    ("body", "param", "problem"),
    [
        ({"query": "q", "documents": DOCS}, "model", "is required"),
        ({"model": "", "query": "q", "documents": DOCS}, "model", "must not be empty"),
        ({"model": "m", "documents": DOCS}, "query", "is required"),
        ({"model": "m", "query": "", "documents": DOCS}, "query", "must not be empty"),
        ({"model": "m", "query": ["q"], "documents": DOCS}, "query", "got an array"),
        ({"model": "m", "query": {"text": 1}, "documents": DOCS}, "query.text", "got an integer"),
        ({"model": "m", "query": "q"}, "documents", "is required"),
        ({"model": "m", "query": "q", "documents": []}, "documents", "empty array"),
        ({"model": "m", "query": "q", "documents": {"a": 1}}, "documents", "got an object"),
        ({"model": "m", "query": "q", "documents": [None]}, "documents[0]", "got null"),
        ({"model": "m", "query": "q", "documents": [{}]}, "documents[0].text", "is required"),
        ({"model": "m", "query": "q", "documents": DOCS, "top_n": -1}, "top_n", "got -1"),
        ({"model": "m", "query": "q", "documents": DOCS, "top_n": True}, "top_n", "a boolean"),
        ({"model": "m", "query": "q", "documents": DOCS, "top_n": 1.5}, "top_n", "a number"),
        (
            {"model": "m", "query": "q", "documents": DOCS, "return_documents": 1},
            "return_documents",
            "must be a boolean",
        ),
        (
            {"model": "m", "query": "q", "documents": ["d"] * (MAX_DOCUMENTS + 1)},
            "documents",
            f"at most {MAX_DOCUMENTS}",
        ),
    ],
)
def test_bad_rerank_bodies_name_the_field(body: Any, param: str, problem: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        decode_rerank_request(body)
    assert err.value.param == param
    assert err.value.message.startswith(f"{param}: ") and problem in err.value.message


def test_a_body_that_is_not_an_object() -> None:
    with pytest.raises(InvalidRequest, match="JSON object, got an array"):
        decode_rerank_request([])
    with pytest.raises(InvalidRequest, match="JSON object, got a string"):
        decode_score_request("x")


def test_score_one_to_many_and_pairs() -> None:
    one = decode_score_request({"model": "m", "text_1": "q", "text_2": DOCS})
    assert one.queries == ["q"] and one.documents == DOCS
    assert [one.query_of(i) for i in range(3)] == ["q", "q", "q"]
    pairs = decode_score_request({"model": "m", "text_1": ["a", "b", "c"], "text_2": DOCS})
    assert [pairs.query_of(i) for i in range(3)] == ["a", "b", "c"]
    single = decode_score_request({"model": "m", "text_1": ["a"], "text_2": "d"})
    assert single.queries == ["a"] and single.documents == ["d"]


@pytest.mark.parametrize(
    ("first", "second"),
    [("text_1", "text_2"), ("queries", "documents"), ("queries", "items"), ("data_1", "data_2")],
)
def test_score_field_names_vllm_accepts(first: str, second: str) -> None:
    req = decode_score_request({"model": "m", first: "q", second: DOCS, "use_activation": False})
    assert req.queries == ["q"] and req.documents == DOCS
    assert req.extra == {"use_activation": False}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m"}, "text_1"),
        ({"model": "m", "text_1": "q"}, "text_2"),
        ({"model": "m", "text_2": DOCS}, "text_1"),
        ({"model": "m", "queries": "q"}, "documents"),
        ({"model": "m", "documents": DOCS}, "queries"),
        ({"model": "m", "text_1": "q", "text_2": []}, "text_2"),
        ({"model": "m", "text_1": ["a", "b"], "text_2": DOCS}, "text_1"),
        ({"model": "m", "text_1": 3, "text_2": DOCS}, "text_1"),
        ({"model": "m", "text_1": "q", "text_2": ["a", {}]}, "text_2[1]"),
    ],
)
def test_bad_score_bodies_name_the_field(body: Any, param: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        decode_score_request(body)
    assert err.value.param == param and err.value.message.startswith(f"{param}: ")


def result(scores: list[float]) -> RelevanceResult:
    return RelevanceResult(model="up", scores=scores, usage=Usage(input_tokens=42))


def test_rerank_answer_is_ranked_from_document_order() -> None:
    req = RelevanceRequest(model="m", queries=["q"], documents=DOCS)
    body = encode_rerank_response(
        result([0.2, 0.9, 0.2]), req, RerankOptions(), request_id="chatcmpl-abc", model="m"
    )
    assert body == {
        "id": "rerank-abc",
        "model": "m",
        "usage": {"prompt_tokens": 42, "total_tokens": 42},
        "results": [
            {"index": 1, "relevance_score": 0.9, "document": {"text": "beta"}},
            # Equal scores keep the documents' order.
            {"index": 0, "relevance_score": 0.2, "document": {"text": "alpha"}},
            {"index": 2, "relevance_score": 0.2, "document": {"text": "gamma"}},
        ],
    }
    cut = encode_rerank_response(
        result([0.2, 0.9, 0.5]),
        req,
        RerankOptions(top_n=2, return_documents=False),
        request_id="chatcmpl-abc",
        model="m",
    )
    assert cut["results"] == [
        {"index": 1, "relevance_score": 0.9},
        {"index": 2, "relevance_score": 0.5},
    ]


def test_score_answer_keeps_request_order() -> None:
    body = encode_score_response(
        result([0.2, 0.9]), request_id="chatcmpl-abc", created=7, model="m"
    )
    assert body == {
        "id": "score-abc",
        "object": "list",
        "created": 7,
        "model": "m",
        "data": [
            {"index": 0, "object": "score", "score": 0.2},
            {"index": 1, "object": "score", "score": 0.9},
        ],
        "usage": {"prompt_tokens": 42, "total_tokens": 42, "completion_tokens": 0},
    }
