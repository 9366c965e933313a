"""Stage 8 through the gateway: counting the input and capping the output to the context.

    remaining  = context_length - input_tokens - 1024
    max_tokens = min(requested, remaining, 65536)

One backend per engine, each serving `m-<engine>` (a 2048-token context, in the gateway's config
and in the simulator alike) and `big-<engine>` (200 000 tokens). What each simulator received
shows the cap the gateway applied; its request counter shows whether the gateway asked its
tokenizer:

- vLLM and llama.cpp count near the limit with the engine's own tokenizer (`/tokenize`, after
  `/apply-template` for llama.cpp), so the cap is exact to the engine's count;
- Ollama has no tokenizer endpoint, so the gateway's estimate (tiktoken plus per-message
  overhead) is used;
- far from the limit nothing is tokenized;
- an input that leaves no room is refused with 400 `context_length_exceeded` before any engine
  sees it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import ollama
import openai
import pytest

from mindrouter.sim.config import SimConfig, SimModel
from mindrouter.tokens import PER_MESSAGE_OVERHEAD, REPLY_PRIMER, count_text
from tests.gateway.test_resilience import (
    DIALECTS,
    HTTP,
    Cluster,
    backend,
    check_error_shape,
    post,
    start_cluster,
)

ENGINES = ("vllm", "llamacpp", "ollama")
CONTEXT = 2048
BIG_CONTEXT = 200_000
MARGIN = 1024
MAX_OUTPUT = 65536
# About 700 tokens: near the limit once 100 000 output tokens are asked for, yet it fits.
NEAR = "word " * 700
# About 3000 tokens: more than the context holds.
TOO_LONG = "word " * 3000


def sim_config(engine: str) -> SimConfig:
    tag = ":latest" if engine == "ollama" else ""
    models = [
        SimModel(f"m-{engine}{tag}", CONTEXT),
        SimModel(f"big-{engine}{tag}", BIG_CONTEXT),
    ]
    return SimConfig(engine=engine, models=models)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def fit() -> Iterator[Cluster]:
    c = start_cluster(
        [backend(engine, sim_config(engine)) for engine in ENGINES],
        models=[{"name": f"m-{engine}", "context_length": CONTEXT} for engine in ENGINES]
        + [{"name": f"big-{engine}", "context_length": BIG_CONTEXT} for engine in ENGINES],
    )
    try:
        yield c
    finally:
        c.close()


def estimate(text: str) -> int:
    """The gateway's estimate for a conversation of one user message."""
    return REPLY_PRIMER + PER_MESSAGE_OVERHEAD + count_text(text)


def newest_record(c: Cluster) -> int | None:
    r = HTTP.get(c.url + "/admin/audit", params={"limit": 1}, headers=c.auth)
    assert r.status_code == 200, r.text
    return r.json()[0]["id"] if r.json() else None


def tokenizer_calls(c: Cluster, engine: str) -> int:
    counts = c.states[engine].requests_total
    return sum(n for (route, _), n in counts.items() if route in ("/tokenize", "/apply-template"))


def engine_count(c: Cluster, engine: str, messages: list[dict[str, Any]]) -> int:
    """The engine's own count of the prompt the gateway sent it, asked directly."""
    url = c.sims[engine].url
    if engine == "vllm":
        r = HTTP.post(url + "/tokenize", json={"model": "m-vllm", "messages": messages})
        count: int = r.json()["count"]
        return count
    rendered = HTTP.post(url + "/apply-template", json={"messages": messages}).json()["prompt"]
    tokens = HTTP.post(url + "/tokenize", json={"content": rendered, "add_special": True})
    return len(tokens.json()["tokens"])


def sent_limit(body: dict[str, Any]) -> int | None:
    """The output limit in the body an engine received."""
    if "options" in body:
        limit: int | None = body["options"].get("num_predict")
        return limit
    return body.get("max_tokens")


def ask(c: Cluster, dialect: str, model: str, text: str, limit: int | None) -> None:
    extra: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": text}]}
    if dialect == "ollama":
        extra["options"] = {} if limit is None else {"num_predict": limit}
    else:
        extra["max_tokens"] = limit
    r = post(c, dialect, **extra)
    assert r.status_code == 200, r.text


# -- too long: refused before any engine sees it -------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_an_input_that_cannot_fit_is_refused_in_each_dialect(fit: Cluster, engine: str) -> None:
    c = fit
    before = len(c.states[engine].records)
    messages = [{"role": "user", "content": TOO_LONG}]
    for dialect in DIALECTS:
        for stream in (False, True):
            r = post(c, dialect, stream, model=f"m-{engine}", messages=messages)
            assert r.status_code == 400, (dialect, r.text)
            message = check_error_shape(dialect, r)
            assert f"context of {CONTEXT} tokens" in message
            body = r.json()
            if dialect == "openai":
                assert body["error"]["code"] == "context_length_exceeded"
                assert body["error"]["type"] == "invalid_request_error"
                assert body["error"]["param"] == "messages"
            elif dialect == "anthropic":
                assert body["error"]["type"] == "invalid_request_error"
    # The engine never received any of them.
    assert len(c.states[engine].records) == before


def test_an_input_of_many_contexts_is_refused_on_the_estimate_alone(fit: Cluster) -> None:
    """Some 300 contexts' worth of text: refused before admission on a count that stops at four
    contexts, without asking any engine's tokenizer, and without an audit record."""
    c = fit
    huge = "word " * 600_000
    calls = {e: tokenizer_calls(c, e) for e in ENGINES}
    seen = {e: c.seen(e) for e in ENGINES}
    newest = newest_record(c)
    for engine in ENGINES:
        r = post(c, "openai", model=f"m-{engine}", messages=[{"role": "user", "content": huge}])
        assert r.status_code == 400, r.text
        assert r.json()["error"]["code"] == "context_length_exceeded"
        assert f"more than {4 * CONTEXT} tokens (estimated)" in r.json()["error"]["message"]
    assert {e: tokenizer_calls(c, e) for e in ENGINES} == calls
    assert {e: c.seen(e) for e in ENGINES} == seen
    assert newest_record(c) == newest


def test_the_sdks_raise_their_bad_request_for_a_context_overflow(fit: Cluster) -> None:
    c = fit
    with pytest.raises(openai.BadRequestError) as oe:
        c.openai().chat.completions.create(
            model="m-vllm", messages=[{"role": "user", "content": TOO_LONG}], max_tokens=10
        )
    assert oe.value.code == "context_length_exceeded"
    with pytest.raises(anthropic.BadRequestError) as ae:
        c.anthropic().messages.create(
            model="m-llamacpp", max_tokens=10, messages=[{"role": "user", "content": TOO_LONG}]
        )
    assert ae.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    with pytest.raises(ollama.ResponseError) as le:
        c.ollama().chat(model="m-ollama", messages=[{"role": "user", "content": TOO_LONG}])
    assert le.value.status_code == 400 and "context" in le.value.error


# -- near the limit: the engine's own count where it has one -------------------------------------


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("engine", ["vllm", "llamacpp"])
def test_near_the_limit_the_cap_uses_the_engines_tokenizer(
    fit: Cluster, engine: str, dialect: str
) -> None:
    c = fit
    calls = tokenizer_calls(c, engine)
    ask(c, dialect, f"m-{engine}", NEAR, 100_000)
    assert tokenizer_calls(c, engine) > calls
    record = c.states[engine].records[-1]
    counted = engine_count(c, engine, record.body["messages"])
    # The engine's count, not the estimate, decided the cap (they differ for this prompt).
    assert counted != estimate(NEAR)
    assert sent_limit(record.body) == CONTEXT - counted - MARGIN
    assert record.status == 200


@pytest.mark.parametrize("dialect", DIALECTS)
def test_near_the_limit_ollama_is_capped_with_the_estimate(fit: Cluster, dialect: str) -> None:
    c = fit
    ask(c, dialect, "m-ollama", NEAR, 100_000)
    body = c.states["ollama"].records[-1].body
    assert body["options"]["num_ctx"] == CONTEXT
    # Without a tokenizer the estimate is all there is; it is below the engine's own count
    # here, so the cap errs on the side of room for the reply.
    assert body["options"]["num_predict"] == CONTEXT - estimate(NEAR) - MARGIN
    assert tokenizer_calls(c, "ollama") == 0


# -- far from the limit: no tokenizer round trip --------------------------------------------------


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("engine", ENGINES)
def test_far_from_the_limit_the_request_is_not_tokenized(
    fit: Cluster, engine: str, dialect: str
) -> None:
    c = fit
    calls = tokenizer_calls(c, engine)
    # The requested limit is the smallest of the three.
    ask(c, dialect, f"m-{engine}", "hello there", 50)
    assert sent_limit(c.states[engine].records[-1].body) == 50
    # 65536 is the smallest: a huge context and a huge request.
    ask(c, dialect, f"big-{engine}", "hello there", 100_000)
    assert sent_limit(c.states[engine].records[-1].body) == MAX_OUTPUT
    assert tokenizer_calls(c, engine) == calls


@pytest.mark.parametrize("dialect", ["openai", "ollama"])
@pytest.mark.parametrize("engine", ENGINES)
def test_without_a_requested_limit_the_room_left_is_the_cap(
    fit: Cluster, engine: str, dialect: str
) -> None:
    # (Anthropic requires max_tokens, so only the other dialects can leave it out.)
    c = fit
    calls = tokenizer_calls(c, engine)
    ask(c, dialect, f"m-{engine}", "hello there", None)
    assert (
        sent_limit(c.states[engine].records[-1].body) == CONTEXT - estimate("hello there") - MARGIN
    )
    ask(c, dialect, f"big-{engine}", "hello there", None)
    assert sent_limit(c.states[engine].records[-1].body) == MAX_OUTPUT
    assert tokenizer_calls(c, engine) == calls
