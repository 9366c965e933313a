"""Relevance answers from engines are read by index; an answer that does not score every
document exactly once is the backend's failure (retried elsewhere), never a wrong ranking."""

from __future__ import annotations

from typing import Any

import pytest

from mindrouter.backends.relevance_wire import (
    decode_rerank,
    decode_score,
    encode_rerank,
    encode_score,
    query_groups,
    relevance_result,
)
from mindrouter.canonical import RelevanceRequest
from mindrouter.errors import UpstreamUnavailable


def test_rerank_answers_are_read_by_index() -> None:
    data = {
        "results": [
            {"index": 2, "relevance_score": 0.9},
            {"index": 0, "relevance_score": -1.5},
            {"index": 1, "relevance_score": 0},
        ],
        "usage": {"prompt_tokens": 30, "total_tokens": 30},
    }
    assert decode_rerank(data, 3, "b") == ([-1.5, 0.0, 0.9], 30)
    # vLLM's older answers give only total_tokens; some servers give no usage at all.
    assert decode_rerank({**data, "usage": {"total_tokens": 12}}, 3, "b")[1] == 12
    assert decode_rerank({"results": data["results"]}, 3, "b")[1] is None


def test_score_answers() -> None:
    data = {"data": [{"index": 0, "score": 0.5}, {"index": 1, "score": 0.25}]}
    assert decode_score(data, 2, "b") == ([0.5, 0.25], None)


@pytest.mark.parametrize(
    ("results", "problem"),
    [
        (None, "no score for 2 of 2"),
        ([{"index": 0, "relevance_score": 0.1}], "no score for 1 of 2"),
        ([{"index": 0, "relevance_score": 0.1}] * 2, "repeated index"),
        ([{"index": 5, "relevance_score": 0.1}], "bad or repeated index: 5"),
        ([{"index": "0", "relevance_score": 0.1}], "bad or repeated index"),
        ([{"index": 0, "relevance_score": "high"}], "without a numeric relevance_score"),
        ([{"index": 0, "relevance_score": True}], "without a numeric relevance_score"),
        ([{"index": 0, "relevance_score": float("nan")}], "not finite"),
        (["x"], "bad or repeated index"),
    ],
)
def test_incomplete_answers_are_the_backends_failure(results: Any, problem: str) -> None:
    with pytest.raises(UpstreamUnavailable, match=problem) as err:
        decode_rerank({"results": results}, 2, "gpu1")
    assert err.value.backend == "gpu1"


def test_requests_on_the_wire() -> None:
    one = RelevanceRequest("m", ["q"], ["a", "b"], extra={"truncate_prompt_tokens": 8})
    assert encode_score(one, one.extra) == {
        "truncate_prompt_tokens": 8,
        "model": "m",
        "text_1": "q",
        "text_2": ["a", "b"],
    }
    pairs = RelevanceRequest("m", ["q1", "q2"], ["a", "b"])
    assert encode_score(pairs, {})["text_1"] == ["q1", "q2"]
    # The extras never replace the fields the gateway sets.
    body = encode_rerank("m", "q", ["a"], {"model": "x", "top_n": 0})
    assert body == {"model": "m", "query": "q", "documents": ["a"], "top_n": 1}


def test_one_rerank_call_per_distinct_query() -> None:
    req = RelevanceRequest("m", ["x", "y", "x", "z"], ["a", "b", "c", "d"])
    assert query_groups(req) == {"x": [0, 2], "y": [1], "z": [3]}
    assert query_groups(RelevanceRequest("m", ["q"], ["a", "b"])) == {"q": [0, 1]}


def test_usage_is_estimated_only_when_the_engine_gave_none() -> None:
    req = RelevanceRequest("m", ["q"], ["a"])
    counted = relevance_result(req, [0.5], 9, lambda: 100)
    assert (counted.usage.input_tokens, counted.usage.estimated) == (9, False)
    guessed = relevance_result(req, [0.5], None, lambda: 100)
    assert (guessed.usage.input_tokens, guessed.usage.estimated) == (100, True)
    assert guessed.usage.output_tokens == 0
