"""Rerank and score through the gateway, to every engine that can serve them.

One cluster: a simulated vLLM serving a reranker `rr-vllm` and a chat model `chat-vllm`; a
simulated `llama-server --reranking` serving `rr-llamacpp`; the vLLM simulator behind the generic
OpenAI-compatible adapter serving `rr-openai` (so it is called on `/v1/rerank`, not `/score`);
an Ollama simulator, which has no rerank API, as the only backend of `rr-ollama` and as a second
backend of `rr-vllm`.

What each engine received and counted is read from the simulator's request records; what the
gateway recorded and charged from `GET /admin/audit` and `GET /v1/usage`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from mindrouter.sim.config import SimConfig, SimModel
from mindrouter.sim.rerank import pair_tokens
from tests.gateway.test_resilience import HTTP, Cluster, start_cluster

RERANKERS = {"vllm": "rr-vllm", "llamacpp": "rr-llamacpp", "openai": "rr-openai"}
QUERY = "where do llamas live"
DOCUMENTS = [
    "The giant panda lives in the bamboo forests of China.",
    "Llamas live in the Andes, the mountains of South America.",
    "The weather today is sunny.",
]
BEST = 1  # the document that shares words with the query


@pytest.fixture(scope="module")
def rr() -> Iterator[Cluster]:
    vllm = SimConfig("vllm", [SimModel("rr-vllm", kind="rerank"), SimModel("chat-vllm")])
    llamacpp = SimConfig("llamacpp", [SimModel("rr-llamacpp", kind="rerank")])
    generic = SimConfig("vllm", [SimModel("rr-openai", kind="rerank")])
    ollama = SimConfig("ollama", [SimModel("rr-ollama:latest")])
    backends: list[dict[str, Any]] = [
        {
            "name": "ollama",
            "engine": "ollama",
            "sim": ollama,
            # First and with the highest priority: it would win if it could rerank.
            "priority": 10,
            "models": [
                {"name": "rr-ollama", "upstream": "rr-ollama:latest"},
                {"name": "rr-vllm", "upstream": "rr-ollama:latest"},
            ],
        },
        {"name": "vllm", "engine": "vllm", "sim": vllm, "models": ["rr-vllm", "chat-vllm"]},
        {"name": "llamacpp", "engine": "llamacpp", "sim": llamacpp, "models": ["rr-llamacpp"]},
        {"name": "openai", "engine": "openai", "sim": generic, "models": ["rr-openai"]},
    ]
    c = start_cluster(
        backends,
        models=[
            *({"name": m, "capabilities": ["rerank"]} for m in [*RERANKERS.values(), "rr-ollama"]),
            {"name": "chat-vllm", "capabilities": ["chat"]},
        ],
    )
    try:
        yield c
    finally:
        c.close()


def post(c: Cluster, path: str, body: Any) -> httpx.Response:
    return HTTP.post(c.url + path, json=body, headers=c.auth)


def last_record(c: Cluster, backend: str) -> Any:
    return c.states[backend].records[-1]


def rerank_body(model: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "query": QUERY, "documents": DOCUMENTS, **extra}


# -- rerank on each engine ------------------------------------------------------------------------


@pytest.mark.parametrize("engine", list(RERANKERS))
def test_rerank_ranks_best_first_with_the_engines_count(rr: Cluster, engine: str) -> None:
    model = RERANKERS[engine]
    before = rr.period_tokens()
    r = post(rr, "/v1/rerank", rerank_body(model))
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"id", "model", "usage", "results"}
    assert body["id"].startswith("rerank-") and body["model"] == model
    results = body["results"]
    assert sorted(item["index"] for item in results) == [0, 1, 2]
    scores = [item["relevance_score"] for item in results]
    assert scores == sorted(scores, reverse=True)
    assert results[0]["index"] == BEST
    for item in results:
        assert item["document"] == {"text": DOCUMENTS[item["index"]]}
    # The engine's own count is what the client is told and what the user is charged.
    record = last_record(rr, engine)
    expected = sum(pair_tokens(QUERY, d) for d in DOCUMENTS)
    assert record.prompt_tokens == expected
    assert body["usage"] == {"prompt_tokens": expected, "total_tokens": expected}
    audit = rr.audit(1)[0]
    assert audit["status"] == "ok" and audit["backend"] == engine
    assert audit["endpoint"] == "/v1/rerank" and audit["model"] == model
    assert audit["input_tokens"] == expected and audit["output_tokens"] == 0
    assert [m["role"] for m in audit["messages"]] == ["query", "document", "document", "document"]
    assert audit["messages"][0]["content"] == QUERY
    assert rr.period_tokens() - before == expected


def test_each_engine_is_called_on_its_own_route(rr: Cluster) -> None:
    for engine, model in RERANKERS.items():
        assert post(rr, "/rerank", rerank_body(model)).status_code == 200
        record = last_record(rr, engine)
        assert record.route == {"vllm": "/score", "llamacpp": "/v1/rerank"}.get(
            engine, "/v1/rerank"
        )
        if engine == "vllm":
            assert record.body["text_1"] == QUERY and record.body["text_2"] == DOCUMENTS
        else:
            assert record.body["query"] == QUERY and record.body["top_n"] == len(DOCUMENTS)


def test_llamacpp_raw_scores_are_passed_as_the_engine_gave_them(rr: Cluster) -> None:
    """llama.cpp answers logits (negative for poor matches); they are not rescaled."""
    body = post(rr, "/v1/rerank", rerank_body("rr-llamacpp")).json()
    assert min(item["relevance_score"] for item in body["results"]) < 0


@pytest.mark.parametrize("path", ["/v1/rerank", "/rerank", "/v2/rerank"])
def test_top_n_and_return_documents(rr: Cluster, path: str) -> None:
    full = post(rr, path, rerank_body("rr-vllm")).json()["results"]
    cut = post(rr, path, rerank_body("rr-vllm", top_n=2, return_documents=False)).json()
    assert [item["index"] for item in cut["results"]] == [item["index"] for item in full[:2]]
    assert all(set(item) == {"index", "relevance_score"} for item in cut["results"])
    # 0 and null mean every document (vLLM's reading; Dify sends null).
    for top_n in (0, None, 10):
        got = post(rr, path, rerank_body("rr-vllm", top_n=top_n)).json()["results"]
        assert len(got) == len(DOCUMENTS)


def test_open_webui_external_reranker(rr: Cluster) -> None:
    """What Open WebUI's external reranker posts, and how it reads the answer back."""
    docs = list(DOCUMENTS)
    r = HTTP.post(
        rr.url + "/v1/rerank",
        json={"model": "rr-vllm", "query": QUERY, "documents": docs, "top_n": len(docs)},
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {rr.key}"},
    )
    r.raise_for_status()
    data = r.json()
    scores = [x["relevance_score"] for x in sorted(data["results"], key=lambda x: x["index"])]
    assert len(scores) == len(docs) and max(scores) == scores[BEST]


def test_dify_openai_compatible_reranker(rr: Cluster) -> None:
    """Dify's OpenAI-API-compatible provider: `{endpoint_url}/rerank` with `top_n` null and
    `return_documents`, reading `document` as an object with `text`."""
    r = HTTP.post(
        rr.url + "/v1/rerank",
        json={
            "model": "rr-llamacpp",
            "query": QUERY,
            "documents": DOCUMENTS,
            "top_n": None,
            "return_documents": True,
        },
        headers=rr.auth,
    )
    r.raise_for_status()
    for result in r.json()["results"]:
        assert result["document"]["text"] == DOCUMENTS[result["index"]]


def test_document_objects_with_text(rr: Cluster) -> None:
    """Jina and Cohere clients may send `{"text": ...}` objects; the engine gets strings."""
    docs = [{"text": d, "id": i} for i, d in enumerate(DOCUMENTS)]
    r = post(rr, "/v1/rerank", rerank_body("rr-vllm", documents=docs))
    assert r.status_code == 200, r.text
    assert last_record(rr, "vllm").body["text_2"] == DOCUMENTS
    assert r.json()["results"][0]["document"] == {"text": DOCUMENTS[BEST]}


def test_engine_extras_reach_engines_that_take_them(rr: Cluster) -> None:
    post(rr, "/v1/rerank", rerank_body("rr-vllm", truncate_prompt_tokens=64, rank_fields=["x"]))
    body = last_record(rr, "vllm").body
    assert body["truncate_prompt_tokens"] == 64 and "rank_fields" not in body
    post(rr, "/v1/rerank", rerank_body("rr-openai", truncate_prompt_tokens=64))
    assert "truncate_prompt_tokens" not in last_record(rr, "openai").body


# -- score ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", list(RERANKERS))
def test_score_one_to_many_and_pairs(rr: Cluster, engine: str) -> None:
    model = RERANKERS[engine]
    one = post(rr, "/v1/score", {"model": model, "text_1": QUERY, "text_2": DOCUMENTS})
    assert one.status_code == 200, one.text
    body = one.json()
    assert body["object"] == "list" and body["id"].startswith("score-")
    assert body["model"] == model and isinstance(body["created"], int)
    assert [d["index"] for d in body["data"]] == [0, 1, 2]
    assert all(d["object"] == "score" for d in body["data"])
    expected = sum(pair_tokens(QUERY, d) for d in DOCUMENTS)
    assert body["usage"] == {
        "prompt_tokens": expected,
        "total_tokens": expected,
        "completion_tokens": 0,
    }
    ranked = post(rr, "/v1/rerank", rerank_body(model)).json()["results"]
    by_index = {item["index"]: item["relevance_score"] for item in ranked}
    assert [d["score"] for d in body["data"]] == [by_index[i] for i in range(3)]
    # Pairs: each text_2 with its own text_1. llama.cpp and the generic server take one query
    # per call, so they get one call for each distinct query.
    seen = len(rr.states[engine].records)
    queries = ["llamas", "pandas", "llamas"]
    pairs = post(rr, "/score", {"model": model, "text_1": queries, "text_2": DOCUMENTS})
    assert pairs.status_code == 200, pairs.text
    calls = rr.states[engine].records[seen:]
    assert len(calls) == (1 if engine == "vllm" else 2)
    tokens = sum(pair_tokens(q, d) for q, d in zip(queries, DOCUMENTS, strict=True))
    assert sum(call.prompt_tokens for call in calls) == tokens
    assert pairs.json()["usage"]["prompt_tokens"] == tokens
    assert rr.audit(1)[0]["input_tokens"] == tokens


def test_score_accepts_vllms_other_field_names(rr: Cluster) -> None:
    r = post(rr, "/v1/score", {"model": "rr-vllm", "queries": QUERY, "documents": DOCUMENTS})
    assert r.status_code == 200, r.text
    assert len(r.json()["data"]) == 3


# -- refusals -------------------------------------------------------------------------------------


def test_a_rerank_model_never_goes_to_ollama(rr: Cluster) -> None:
    seen = len(rr.states["ollama"].records)
    for _ in range(3):
        assert post(rr, "/v1/rerank", rerank_body("rr-vllm")).status_code == 200
    assert len(rr.states["ollama"].records) == seen
    r = post(rr, "/v1/rerank", rerank_body("rr-ollama"))
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "model" and "rerank API" in error["message"]
    assert len(rr.states["ollama"].records) == seen


def test_a_model_without_the_capability(rr: Cluster) -> None:
    seen = len(rr.states["vllm"].records)
    for path, body in (
        ("/v1/rerank", rerank_body("chat-vllm")),
        ("/v1/score", {"model": "chat-vllm", "text_1": "a", "text_2": "b"}),
    ):
        r = post(rr, path, body)
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["type"] == "invalid_request_error" and error["param"] == "model"
        assert "not a rerank model" in error["message"]
    # A reranker is not a chat model either.
    chat = {"model": "rr-vllm", "messages": [{"role": "user", "content": "hi"}]}
    r = post(rr, "/v1/chat/completions", chat)
    assert r.status_code == 400 and "rerank model" in r.json()["error"]["message"]
    assert len(rr.states["vllm"].records) == seen


BAD_RERANK: list[tuple[Any, str | None]] = [
    ({"query": QUERY, "documents": DOCUMENTS}, "model"),
    ({"model": "rr-vllm", "documents": DOCUMENTS}, "query"),
    ({"model": "rr-vllm", "query": "", "documents": DOCUMENTS}, "query"),
    ({"model": "rr-vllm", "query": 7, "documents": DOCUMENTS}, "query"),
    ({"model": "rr-vllm", "query": QUERY}, "documents"),
    ({"model": "rr-vllm", "query": QUERY, "documents": []}, "documents"),
    ({"model": "rr-vllm", "query": QUERY, "documents": "one"}, "documents"),
    ({"model": "rr-vllm", "query": QUERY, "documents": ["a", 3]}, "documents[1]"),
    ({"model": "rr-vllm", "query": QUERY, "documents": [{"id": 1}]}, "documents[0].text"),
    ({"model": "rr-vllm", "query": QUERY, "documents": DOCUMENTS, "top_n": -1}, "top_n"),
    ({"model": "rr-vllm", "query": QUERY, "documents": DOCUMENTS, "top_n": "2"}, "top_n"),
    (
        {"model": "rr-vllm", "query": QUERY, "documents": DOCUMENTS, "return_documents": "no"},
        "return_documents",
    ),
    ([QUERY], None),
]
BAD_SCORE: list[tuple[Any, str | None]] = [
    ({"model": "rr-vllm", "text_2": DOCUMENTS}, "text_1"),
    ({"model": "rr-vllm", "text_1": QUERY}, "text_2"),
    ({"model": "rr-vllm", "text_1": QUERY, "text_2": []}, "text_2"),
    ({"model": "rr-vllm", "text_1": ["a", "b"], "text_2": DOCUMENTS}, "text_1"),
    ({"model": "rr-vllm", "text_1": QUERY, "text_2": [1]}, "text_2[0]"),
    ({"model": "rr-vllm", "text_1": {"x": 1}, "text_2": DOCUMENTS}, "text_1"),
]


@pytest.mark.parametrize(("body", "param"), BAD_RERANK)
def test_bad_rerank_bodies_get_400_naming_the_field(
    rr: Cluster, body: Any, param: str | None
) -> None:
    seen = sum(len(s.records) for s in rr.states.values())
    r = post(rr, "/v1/rerank", body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    if param is not None:
        assert error["message"].startswith(param + ":")
    assert sum(len(s.records) for s in rr.states.values()) == seen


@pytest.mark.parametrize(("body", "param"), BAD_SCORE)
def test_bad_score_bodies_get_400_naming_the_field(
    rr: Cluster, body: Any, param: str | None
) -> None:
    r = post(rr, "/v1/score", body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and error["message"].startswith(f"{param}:")


def test_unknown_model_and_missing_key(rr: Cluster) -> None:
    r = post(rr, "/v1/rerank", rerank_body("nope"))
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    r = HTTP.post(rr.url + "/rerank", json=rerank_body("rr-vllm"))
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    r = HTTP.post(
        rr.url + "/v1/score", content=b"{not json", headers={**rr.auth, "content-type": "x"}
    )
    assert r.status_code == 400


def test_an_engine_refusal_is_passed_on(rr: Cluster) -> None:
    """A pair that does not fit the engine's context is the engine's 400, not a 5xx."""
    long = "word " * 9000
    r = post(rr, "/v1/rerank", rerank_body("rr-vllm", documents=[long]))
    assert r.status_code == 400, r.text
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert rr.audit(1)[0]["status"] == "error"
