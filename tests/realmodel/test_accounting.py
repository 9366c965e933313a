"""What the gateway accounts is what llama-server counted.

The same request is made directly to llama-server and through the gateway (temperature 0, fixed
seed, few output tokens). The prompt token counts must be equal: the gateway sent the model the
same conversation and passed the backend's own usage on, in the response, in the audit record
and in the user's usage counters.
"""

from __future__ import annotations

import time
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest

from tests.realmodel.conftest import MODEL, SEED, RealStack

pytestmark = pytest.mark.realmodel

# The Anthropic SDK no longer has a typed `temperature`; the API still takes it in the body.
GREEDY = {"temperature": 0}

MESSAGES = [
    {"role": "system", "content": "You are a terse assistant."},
    {"role": "user", "content": "Name two planets of the solar system."},
]
MAX_TOKENS = 12


def direct_usage(real: RealStack) -> Any:
    return real.llama.chat(MESSAGES, MAX_TOKENS)


def audit_entry(real: RealStack, http: httpx.Client, request_id: str) -> dict[str, Any]:
    # The outcome is queued when the request closes and written by a background task, so it may
    # land just after the client has its last byte; until then the record is "pending".
    deadline = time.monotonic() + 10
    while True:
        resp = http.get(
            real.url + "/admin/audit",
            params={"user": "tester", "limit": 1000},
            headers=real.admin_auth,
        )
        assert resp.status_code == 200, resp.text
        found = [e for e in resp.json() if e["request_id"] == request_id]
        if found and found[0]["status"] != "pending":
            entry: dict[str, Any] = found[0]
            return entry
        assert time.monotonic() < deadline, f"no finished audit record for {request_id}"
        time.sleep(0.1)


def lifetime_tokens(real: RealStack, http: httpx.Client) -> int:
    resp = http.get(real.url + "/v1/usage", headers=real.auth)
    assert resp.status_code == 200, resp.text
    tokens: int = resp.json()["lifetime_tokens"]
    return tokens


def test_openai_usage_equals_llama_server_usage(
    real: RealStack, oai: openai.OpenAI, http: httpx.Client
) -> None:
    direct = direct_usage(real)
    before = lifetime_tokens(real, http)

    resp = oai.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        temperature=0,
        seed=SEED,
        max_tokens=MAX_TOKENS,
    )

    assert resp.usage is not None
    assert resp.usage.prompt_tokens == direct["usage"]["prompt_tokens"]
    # Same prompt, greedy decoding: the same continuation, token for token.
    assert resp.usage.completion_tokens == direct["usage"]["completion_tokens"]
    assert resp.choices[0].message.content == direct["choices"][0]["message"]["content"]

    entry = audit_entry(real, http, resp.id)
    assert entry["status"] == "ok"
    assert entry["model"] == MODEL
    assert entry["backend"] == "llamacpp-1"
    assert entry["input_tokens"] == resp.usage.prompt_tokens
    assert entry["output_tokens"] == resp.usage.completion_tokens
    assert entry["output"] == resp.choices[0].message.content

    # The counters are charged when the request closes; allow that moment to pass.
    expected = before + resp.usage.prompt_tokens + resp.usage.completion_tokens
    deadline = time.monotonic() + 10
    while (now := lifetime_tokens(real, http)) != expected and time.monotonic() < deadline:
        time.sleep(0.1)
    assert now == expected


def test_streamed_usage_equals_llama_server_usage(
    real: RealStack, oai: openai.OpenAI, http: httpx.Client
) -> None:
    direct = direct_usage(real)
    chunks = list(
        oai.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            temperature=0,
            seed=SEED,
            max_tokens=MAX_TOKENS,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    usage = chunks[-1].usage
    assert usage is not None
    assert usage.prompt_tokens == direct["usage"]["prompt_tokens"]
    assert usage.completion_tokens == direct["usage"]["completion_tokens"]

    entry = audit_entry(real, http, chunks[0].id)
    assert entry["stream"] is True
    assert entry["status"] == "ok", entry
    assert entry["input_tokens"] == usage.prompt_tokens, entry
    assert entry["output_tokens"] == usage.completion_tokens, entry


def test_anthropic_input_tokens_equal_llama_server_prompt_tokens(
    real: RealStack, http: httpx.Client
) -> None:
    direct = direct_usage(real)
    claude = anthropic.Anthropic(
        base_url=real.url + "/anthropic", api_key=real.key, max_retries=0, timeout=60
    )
    msg = claude.messages.create(
        model=MODEL,
        system=MESSAGES[0]["content"],
        messages=[MESSAGES[1]],
        max_tokens=MAX_TOKENS,
        extra_body=GREEDY,
    )
    # Anthropic's input_tokens leave out the prompt tokens read from a cache (none here: the
    # server runs with --no-cache-prompt).
    cached = msg.usage.cache_read_input_tokens or 0
    assert msg.usage.input_tokens + cached == direct["usage"]["prompt_tokens"]
    assert msg.usage.output_tokens == direct["usage"]["completion_tokens"]

    counted = claude.messages.count_tokens(
        model=MODEL,
        system=MESSAGES[0]["content"],
        messages=[MESSAGES[1]],
    )
    # count_tokens asks llama-server's own tokenizer (/apply-template + /tokenize).
    assert counted.input_tokens == direct["usage"]["prompt_tokens"]

    entry = audit_entry(real, http, "chatcmpl-" + msg.id.removeprefix("msg_"))
    assert entry["input_tokens"] == direct["usage"]["prompt_tokens"]
    assert entry["output_tokens"] == msg.usage.output_tokens


def test_ollama_counts_equal_llama_server_usage(real: RealStack, http: httpx.Client) -> None:
    direct = direct_usage(real)
    client = ollama.Client(host=real.url, headers=real.auth, timeout=60)
    resp = client.chat(
        model=MODEL,
        messages=MESSAGES,
        options={"temperature": 0, "seed": SEED, "num_predict": MAX_TOKENS},
    )
    assert resp.prompt_eval_count == direct["usage"]["prompt_tokens"]
    assert resp.eval_count == direct["usage"]["completion_tokens"]
