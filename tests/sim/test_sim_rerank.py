"""The simulators' rerank and score endpoints: vLLM's shapes and routes, llama.cpp's, the
deterministic token-overlap scores, the per-pair token counts, and each engine's refusals."""

from __future__ import annotations

import math
from collections.abc import Iterator

import httpx
import pytest

from mindrouter.sim import SimConfig, SimModel
from mindrouter.sim.rerank import PAIR_OVERHEAD, pair_tokens, relevance, relevance_logit
from mindrouter.sim.tokenizer import count_tokens

from .support import Sim, start_sim

QUERY = "where do llamas live"
DOCS = ["Pandas live in China.", "Llamas live in the Andes.", "It rains."]


@pytest.fixture(scope="module")
def sims() -> Iterator[dict[str, Sim]]:
    models = [SimModel("rr", 64, kind="rerank"), SimModel("chat")]
    started = {
        "vllm": start_sim(SimConfig("vllm", models)),
        "llamacpp": start_sim(SimConfig("llamacpp", models)),
    }
    try:
        yield started
    finally:
        for sim in started.values():
            sim.close()


def post(sim: Sim, path: str, body: object) -> httpx.Response:
    return httpx.post(sim.url + path, json=body, timeout=10)


def test_scores_are_deterministic_and_follow_shared_words() -> None:
    assert relevance(QUERY, DOCS[1]) == relevance(QUERY, DOCS[1])
    assert relevance(QUERY, DOCS[1]) > relevance(QUERY, DOCS[0]) > relevance(QUERY, DOCS[2])
    assert relevance(QUERY, QUERY) > 0.9 and relevance(QUERY, "zzz") < 0.05
    p = relevance(QUERY, DOCS[0])
    assert relevance_logit(QUERY, DOCS[0]) == pytest.approx(math.log(p / (1 - p)))
    assert pair_tokens("a b", "c") == count_tokens("a b") + count_tokens("c") + PAIR_OVERHEAD


@pytest.mark.parametrize("path", ["/rerank", "/v1/rerank", "/v2/rerank"])
def test_vllm_rerank(sims: dict[str, Sim], path: str) -> None:
    r = post(sims["vllm"], path, {"model": "rr", "query": QUERY, "documents": DOCS, "top_n": 2})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["id"].startswith("rerank-") and body["model"] == "rr"
    tokens = sum(pair_tokens(QUERY, d) for d in DOCS)
    assert body["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}
    assert [x["index"] for x in body["results"]] == [1, 0]
    first = body["results"][0]
    assert first["document"] == {"text": DOCS[1], "multi_modal": None}
    assert first["relevance_score"] == relevance(QUERY, DOCS[1])
    assert sims["vllm"].state.records[-1].prompt_tokens == tokens
    everything = post(sims["vllm"], path, {"query": QUERY, "documents": DOCS, "top_n": 0})
    assert len(everything.json()["results"]) == 3  # 0 means all; no model means the reranker


@pytest.mark.parametrize("path", ["/score", "/v1/score"])
def test_vllm_score(sims: dict[str, Sim], path: str) -> None:
    body = post(sims["vllm"], path, {"model": "rr", "text_1": QUERY, "text_2": DOCS}).json()
    assert body["object"] == "list" and body["id"].startswith("score-")
    assert [d["score"] for d in body["data"]] == [relevance(QUERY, d) for d in DOCS]
    pairs = post(sims["vllm"], path, {"model": "rr", "text_1": ["a", "b"], "text_2": ["a", "c"]})
    assert [d["score"] for d in pairs.json()["data"]] == [relevance("a", "a"), relevance("b", "c")]
    assert pairs.json()["usage"]["prompt_tokens"] == pair_tokens("a", "a") + pair_tokens("b", "c")
    bad = post(sims["vllm"], path, {"model": "rr", "text_1": ["a", "b"], "text_2": ["a"] * 3})
    assert bad.status_code == 400 and "1:1, 1:N or N:N" in bad.json()["error"]["message"]


def test_llamacpp_rerank(sims: dict[str, Sim]) -> None:
    sim = sims["llamacpp"]
    for path in ("/rerank", "/reranking", "/v1/rerank", "/v1/reranking"):
        body = post(sim, path, {"model": "rr", "query": QUERY, "documents": DOCS}).json()
        assert set(body) == {"model", "object", "usage", "results"}
        assert [set(x) for x in body["results"]] == [{"index", "relevance_score"}] * 3
        assert body["results"][0] == {
            "index": 1,
            "relevance_score": relevance_logit(QUERY, DOCS[1]),
        }
    cut = post(sim, "/rerank", {"model": "rr", "query": QUERY, "documents": DOCS, "top_n": 0})
    assert cut.json()["results"] == []  # llama.cpp cuts to top_n, even to nothing
    assert post(sim, "/score", {"text_1": "a", "text_2": "b"}).status_code == 404


def test_refusals(sims: dict[str, Sim]) -> None:
    r = post(sims["vllm"], "/rerank", {"model": "chat", "query": "q", "documents": ["d"]})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == "The model `chat` does not support Rerank (Score) API"
    r = post(sims["llamacpp"], "/rerank", {"model": "chat", "query": "q", "documents": ["d"]})
    assert r.status_code == 501 and "--reranking" in r.json()["error"]["message"]
    chat = {"model": "rr", "messages": [{"role": "user", "content": "hi"}]}
    assert post(sims["vllm"], "/v1/chat/completions", chat).status_code == 400
    assert post(sims["llamacpp"], "/v1/chat/completions", chat).status_code == 501
    # A pair longer than the model's 64-token context.
    long = {"model": "rr", "query": "q", "documents": ["word " * 100]}
    assert post(sims["vllm"], "/rerank", long).status_code == 400
    for body in (
        {"model": "rr", "documents": ["d"]},
        {"model": "rr", "query": "q", "documents": []},
    ):
        assert post(sims["vllm"], "/rerank", body).status_code == 400
