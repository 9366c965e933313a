"""Fitting requests into the model's context (2048 tokens), counted by llama-server's tokenizer.

The gateway counts a chat request's input exactly with llama-server's `/apply-template` and
`/tokenize`, refuses a prompt that cannot fit with a 400 `context_length_exceeded`, and lowers
an oversized `max_tokens` so that input and output fit.
"""

from __future__ import annotations

import httpx
import openai
import pytest

from mindrouter.pipeline.fit import SAFETY_MARGIN
from tests.realmodel.conftest import CONTEXT, MODEL, OVERSTATED, SEED, UPSTREAM, RealStack

pytestmark = pytest.mark.realmodel

# Far more than 2048 tokens in any tokenizer.
TOO_LONG = " ".join(f"word{i % 97}" for i in range(3000))
# About 3000 tokens: within OVERSTATED's claimed 8192, beyond llama-server's 2048.
MIDDLING = " ".join(f"word{i % 97}" for i in range(1000))
# Long enough (about 970 tokens) that little room is left for the reply once the gateway's
# safety margin is taken off the context, so the cap is reached quickly.
FILLER = " ".join(
    ["The river flows past the old mill, and the miller counts the sacks of grain."] * 55
)


def test_too_long_prompt_is_context_length_exceeded(
    real: RealStack, oai: openai.OpenAI, http: httpx.Client
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        oai.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": TOO_LONG}],
            temperature=0,
            max_tokens=16,
        )
    err = caught.value
    # The gateway's own check, from llama-server's exact count: "the input is N tokens, but
    # model 'gemma' has a context of 2048 tokens ..."
    assert "2048" in err.message, err.message
    assert err.status_code == 400
    assert err.code == "context_length_exceeded"
    assert err.type == "invalid_request_error"

    # The same in raw form: the OpenAI error shape.
    resp = http.post(
        real.url + "/v1/chat/completions",
        headers=real.auth,
        json={"model": MODEL, "messages": [{"role": "user", "content": TOO_LONG}]},
    )
    assert resp.status_code == 400
    body = resp.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == "context_length_exceeded"
    assert body["error"]["type"] == "invalid_request_error"
    assert isinstance(body["error"]["message"], str)
    assert body["error"]["message"]


def test_llama_server_itself_refuses_the_too_long_prompt(
    real: RealStack, http: httpx.Client
) -> None:
    # What the gateway's check spares the backend, and what it would map if it let it through.
    resp = http.post(
        real.llama.url + "/v1/chat/completions",
        json={"model": UPSTREAM, "messages": [{"role": "user", "content": TOO_LONG}]},
    )
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["type"] == "exceed_context_size_error"


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
def test_llama_servers_refusal_is_context_length_exceeded(oai: openai.OpenAI, stream: bool) -> None:
    # The gateway believes the prompt fits (its entry says 8192), passes it on, and maps
    # llama-server's 400 exceed_context_size_error to its own error, before any stream starts.
    with pytest.raises(openai.BadRequestError) as caught:
        oai.chat.completions.create(
            model=OVERSTATED,
            messages=[{"role": "user", "content": MIDDLING}],
            temperature=0,
            max_tokens=16,
            stream=stream,
        )
    assert caught.value.status_code == 400
    assert caught.value.code == "context_length_exceeded"
    assert caught.value.type == "invalid_request_error"
    # llama-server's own words, passed on: "request (N tokens) exceeds the available context
    # size (2048 tokens), ..."
    assert "2048" in caught.value.message, caught.value.message


def test_too_long_legacy_prompt_is_context_length_exceeded(oai: openai.OpenAI) -> None:
    # A raw prompt is judged by the gateway's own estimate, which is plenty here.
    with pytest.raises(openai.BadRequestError) as caught:
        oai.completions.create(model=MODEL, prompt=TOO_LONG, temperature=0, max_tokens=16)
    assert caught.value.status_code == 400
    assert caught.value.code == "context_length_exceeded"


def test_oversized_max_tokens_is_capped(oai: openai.OpenAI) -> None:
    # llama-server alone takes max_tokens 100000 and generates until its context is full (about
    # 1080 tokens here, 40 s on this machine). Through the gateway the reply is cut exactly where
    # the gateway's cap puts it: the context, less the input as llama-server's tokenizer counts
    # it, less the safety margin. The base model keeps repeating the filler, so only the cap
    # stops it.
    resp = oai.chat.completions.create(
        model=MODEL,
        messages=[
            {
                "role": "user",
                "content": FILLER + "\n\nNow write the sentence above again, many times.",
            }
        ],
        temperature=0,
        seed=SEED,
        max_tokens=100_000,
    )
    assert resp.usage is not None
    assert resp.choices[0].message.content
    room = CONTEXT - SAFETY_MARGIN - resp.usage.prompt_tokens
    assert 0 < room < 200, resp.usage
    assert resp.choices[0].finish_reason == "length"
    assert resp.usage.completion_tokens == room
