"""The client dialects (OpenAI chat, completions and Responses, Anthropic, Ollama), each through
its official SDK, against the real model.

Two checks show that the model itself answered: the text is not made only of the simulator's
fixed words, and it is exactly what llama-server generates for the same request made directly
(decoding is greedy, so a request has one answer).

The GGUF is the pretrained (base) Gemma 3 270M and carries no chat template, so llama-server
renders chats with its ChatML fallback, and the model tends to continue the conversation's text
rather than answer it. Legacy completions read naturally ("The capital of France is the capital
of the country of France...").
"""

from __future__ import annotations

import re
from typing import Any

import anthropic
import ollama
import openai
import pytest

from mindrouter.sim.text import VOCABULARY
from tests.realmodel.conftest import MODEL, SEED, RealStack

pytestmark = pytest.mark.realmodel

# The Anthropic SDK no longer has a typed `temperature`; the API still takes it in the body.
GREEDY = {"temperature": 0}
QUESTION = "Write one sentence about the sea."
CHAT: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
PROMPT = "The capital of France is"
MAX_TOKENS = 24


def assert_real_text(text: str | None) -> None:
    assert text is not None
    assert text.strip(), "the model returned no text"
    words = re.findall(r"[a-z]+", text.lower())
    assert any(w not in VOCABULARY for w in words), f"only simulator words: {text!r}"


@pytest.fixture(scope="module")
def direct_chat(real: RealStack) -> Any:
    return real.llama.chat(CHAT, MAX_TOKENS)


@pytest.fixture(scope="module")
def direct_completion(real: RealStack) -> Any:
    return real.llama.complete(PROMPT, MAX_TOKENS)


@pytest.fixture(scope="module")
def claude(real: RealStack) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=real.url + "/anthropic", api_key=real.key, max_retries=0, timeout=60
    )


@pytest.fixture(scope="module")
def olla(real: RealStack) -> ollama.Client:
    return ollama.Client(host=real.url, headers=real.auth, timeout=60)


def chat_text(direct: Any) -> str:
    text: str = direct["choices"][0]["message"]["content"]
    return text


# -- OpenAI ------------------------------------------------------------------------------------


def test_openai_chat(oai: openai.OpenAI, direct_chat: Any) -> None:
    resp = oai.chat.completions.create(
        model=MODEL, messages=CHAT, temperature=0, seed=SEED, max_tokens=MAX_TOKENS
    )
    assert resp.model == MODEL
    choice = resp.choices[0]
    assert_real_text(choice.message.content)
    assert choice.message.content == chat_text(direct_chat)
    assert choice.finish_reason in ("stop", "length")
    assert resp.usage is not None
    assert resp.usage.prompt_tokens > 0
    assert 0 < resp.usage.completion_tokens <= MAX_TOKENS
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens


def test_openai_chat_stream(oai: openai.OpenAI, direct_chat: Any) -> None:
    stream = oai.chat.completions.create(
        model=MODEL,
        messages=CHAT,
        temperature=0,
        seed=SEED,
        max_tokens=MAX_TOKENS,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    pieces = [c.choices[0].delta.content for c in chunks if c.choices]
    texts = [p for p in pieces if p]
    assert len(texts) >= 3, chunks
    text = "".join(texts)
    assert_real_text(text)
    assert text == chat_text(direct_chat)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] in ("stop", "length")
    usage = chunks[-1].usage
    assert usage is not None
    assert usage.prompt_tokens > 0
    assert 0 < usage.completion_tokens <= MAX_TOKENS


def test_openai_legacy_completion(oai: openai.OpenAI, direct_completion: Any) -> None:
    resp = oai.completions.create(
        model=MODEL, prompt=PROMPT, temperature=0, seed=SEED, max_tokens=MAX_TOKENS
    )
    assert_real_text(resp.choices[0].text)
    assert resp.choices[0].text == direct_completion["choices"][0]["text"]
    assert resp.choices[0].finish_reason in ("stop", "length")
    assert resp.usage is not None
    assert resp.usage.prompt_tokens == direct_completion["usage"]["prompt_tokens"]
    assert 0 < resp.usage.completion_tokens <= MAX_TOKENS


def test_openai_legacy_completion_stream(oai: openai.OpenAI, direct_completion: Any) -> None:
    chunks = list(
        oai.completions.create(
            model=MODEL, prompt=PROMPT, temperature=0, seed=SEED, max_tokens=MAX_TOKENS, stream=True
        )
    )
    pieces = [c.choices[0].text for c in chunks if c.choices and c.choices[0].text]
    assert len(pieces) >= 3, chunks
    assert "".join(pieces) == direct_completion["choices"][0]["text"]


def test_openai_responses(oai: openai.OpenAI, direct_chat: Any) -> None:
    resp = oai.responses.create(
        model=MODEL,
        input=QUESTION,
        temperature=0,
        max_output_tokens=MAX_TOKENS,
        extra_body={"seed": SEED},
    )
    assert resp.status in ("completed", "incomplete")
    assert_real_text(resp.output_text)
    assert resp.output_text == chat_text(direct_chat)
    assert resp.usage is not None
    assert resp.usage.input_tokens > 0
    assert 0 < resp.usage.output_tokens <= MAX_TOKENS


def test_openai_responses_stream(oai: openai.OpenAI, direct_chat: Any) -> None:
    # The output limit usually ends this answer, so the last event is response.incomplete,
    # which the SDK's stream helper does not count as an ending: read the raw events.
    events = list(
        oai.responses.create(
            model=MODEL,
            input=QUESTION,
            temperature=0,
            max_output_tokens=MAX_TOKENS,
            extra_body={"seed": SEED},
            stream=True,
        )
    )
    pieces = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert events[-1].type in ("response.completed", "response.incomplete")
    final = events[-1].response  # type: ignore[union-attr]
    assert len(pieces) >= 3, pieces
    text = "".join(pieces)
    assert_real_text(text)
    assert text == chat_text(direct_chat) == final.output_text
    assert final.usage is not None and 0 < final.usage.output_tokens <= MAX_TOKENS


# -- Anthropic ---------------------------------------------------------------------------------


def test_anthropic_messages(claude: anthropic.Anthropic, direct_chat: Any) -> None:
    msg = claude.messages.create(
        model=MODEL, max_tokens=MAX_TOKENS, extra_body=GREEDY, messages=CHAT
    )
    assert msg.role == "assistant"
    text = "".join(b.text for b in msg.content if b.type == "text")
    assert_real_text(text)
    assert text == chat_text(direct_chat)
    assert msg.stop_reason in ("end_turn", "max_tokens")
    assert msg.usage.input_tokens + (msg.usage.cache_read_input_tokens or 0) > 0
    assert 0 < msg.usage.output_tokens <= MAX_TOKENS


def test_anthropic_messages_stream(claude: anthropic.Anthropic, direct_chat: Any) -> None:
    with claude.messages.stream(
        model=MODEL, max_tokens=MAX_TOKENS, extra_body=GREEDY, messages=CHAT
    ) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(pieces) >= 3, pieces
    text = "".join(pieces)
    assert_real_text(text)
    assert text == chat_text(direct_chat)
    assert "".join(b.text for b in final.content if b.type == "text") == text
    assert final.stop_reason in ("end_turn", "max_tokens")
    assert 0 < final.usage.output_tokens <= MAX_TOKENS


# -- Ollama ------------------------------------------------------------------------------------

OPTIONS = {"temperature": 0, "seed": SEED, "num_predict": MAX_TOKENS}


def test_ollama_chat(olla: ollama.Client, direct_chat: Any) -> None:
    resp = olla.chat(model=MODEL, messages=CHAT, options=OPTIONS)
    assert resp.done
    assert_real_text(resp.message.content)
    assert resp.message.content == chat_text(direct_chat)
    assert resp.prompt_eval_count and resp.prompt_eval_count > 0
    assert resp.eval_count and 0 < resp.eval_count <= MAX_TOKENS


def test_ollama_chat_stream(olla: ollama.Client, direct_chat: Any) -> None:
    parts = list(olla.chat(model=MODEL, messages=CHAT, options=OPTIONS, stream=True))
    pieces = [p.message.content for p in parts if p.message.content]
    assert len(pieces) >= 3, parts
    text = "".join(pieces)
    assert_real_text(text)
    assert text == chat_text(direct_chat)
    last = parts[-1]
    assert last.done
    assert all(not p.done for p in parts[:-1])
    assert last.prompt_eval_count and last.prompt_eval_count > 0
    assert last.eval_count and 0 < last.eval_count <= MAX_TOKENS


def test_ollama_generate(olla: ollama.Client, direct_chat: Any) -> None:
    # Without `raw` the prompt is templated: a one-turn chat.
    resp = olla.generate(model=MODEL, prompt=QUESTION, options=OPTIONS)
    assert resp.done
    assert_real_text(resp.response)
    assert resp.response == chat_text(direct_chat)
    assert resp.prompt_eval_count and resp.prompt_eval_count > 0
    assert resp.eval_count and 0 < resp.eval_count <= MAX_TOKENS


def test_ollama_generate_raw_stream(olla: ollama.Client, direct_completion: Any) -> None:
    parts = list(olla.generate(model=MODEL, prompt=PROMPT, raw=True, options=OPTIONS, stream=True))
    pieces = [p.response for p in parts if p.response]
    assert len(pieces) >= 3, parts
    text = "".join(pieces)
    assert_real_text(text)
    assert text == direct_completion["choices"][0]["text"]
    assert parts[-1].done
    assert parts[-1].prompt_eval_count == direct_completion["usage"]["prompt_tokens"]
    assert parts[-1].eval_count and 0 < parts[-1].eval_count <= MAX_TOKENS
