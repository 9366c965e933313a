"""The three client dialects, each through its official SDK, against the real model.

The simulator's replies are words from a fixed list; every check here asks for text that is not
only made of those words, so a green run shows that the model itself answered.
"""

from __future__ import annotations

import re

import anthropic
import ollama
import openai
import pytest

from mindrouter.sim.text import VOCABULARY
from tests.realmodel.conftest import MODEL, RealStack

pytestmark = pytest.mark.realmodel

QUESTION = "What is the capital of France? Answer in one short sentence."
MAX_TOKENS = 24
SEED = 7


def assert_real_text(text: str | None) -> None:
    assert text is not None
    assert text.strip(), "the model returned no text"
    words = re.findall(r"[a-z]+", text.lower())
    assert any(w not in VOCABULARY for w in words), f"only simulator words: {text!r}"


@pytest.fixture(scope="module")
def claude(real: RealStack) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=real.url + "/anthropic", api_key=real.key, max_retries=0, timeout=60
    )


@pytest.fixture(scope="module")
def olla(real: RealStack) -> ollama.Client:
    return ollama.Client(host=real.url, headers=real.auth, timeout=60)


# -- OpenAI ------------------------------------------------------------------------------------


def test_openai_chat(oai: openai.OpenAI) -> None:
    resp = oai.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": QUESTION}],
        temperature=0,
        seed=SEED,
        max_tokens=MAX_TOKENS,
    )
    assert resp.model == MODEL
    choice = resp.choices[0]
    assert_real_text(choice.message.content)
    assert "paris" in (choice.message.content or "").lower()
    assert choice.finish_reason in ("stop", "length")
    assert resp.usage is not None
    assert resp.usage.prompt_tokens > 0
    assert 0 < resp.usage.completion_tokens <= MAX_TOKENS
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens


def test_openai_chat_stream(oai: openai.OpenAI) -> None:
    stream = oai.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": QUESTION}],
        temperature=0,
        seed=SEED,
        max_tokens=MAX_TOKENS,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    pieces = [
        c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
    ]
    assert len(pieces) >= 3, chunks
    text = "".join(pieces)
    assert_real_text(text)
    assert "paris" in text.lower()
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] in ("stop", "length")
    usage = chunks[-1].usage
    assert usage is not None
    assert usage.prompt_tokens > 0
    assert 0 < usage.completion_tokens <= MAX_TOKENS


def test_openai_legacy_completion(oai: openai.OpenAI) -> None:
    resp = oai.completions.create(
        model=MODEL,
        prompt="The three primary colors are",
        temperature=0,
        seed=SEED,
        max_tokens=16,
    )
    assert_real_text(resp.choices[0].text)
    assert resp.choices[0].finish_reason in ("stop", "length")
    assert resp.usage is not None
    assert resp.usage.prompt_tokens > 0
    assert 0 < resp.usage.completion_tokens <= 16


def test_openai_legacy_completion_stream(oai: openai.OpenAI) -> None:
    chunks = list(
        oai.completions.create(
            model=MODEL,
            prompt="The three primary colors are",
            temperature=0,
            seed=SEED,
            max_tokens=16,
            stream=True,
        )
    )
    pieces = [c.choices[0].text for c in chunks if c.choices and c.choices[0].text]
    assert len(pieces) >= 3, chunks
    assert_real_text("".join(pieces))


# -- Anthropic ---------------------------------------------------------------------------------


def test_anthropic_messages(claude: anthropic.Anthropic) -> None:
    msg = claude.messages.create(
        model=MODEL,
        max_tokens=MAX_TOKENS,
        temperature=0,
        messages=[{"role": "user", "content": QUESTION}],
    )
    assert msg.role == "assistant"
    texts = [b.text for b in msg.content if b.type == "text"]
    assert texts
    assert_real_text("".join(texts))
    assert "paris" in "".join(texts).lower()
    assert msg.stop_reason in ("end_turn", "max_tokens")
    assert msg.usage.input_tokens > 0
    assert 0 < msg.usage.output_tokens <= MAX_TOKENS


def test_anthropic_messages_stream(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(
        model=MODEL,
        max_tokens=MAX_TOKENS,
        temperature=0,
        messages=[{"role": "user", "content": QUESTION}],
    ) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(pieces) >= 3, pieces
    text = "".join(pieces)
    assert_real_text(text)
    assert "paris" in text.lower()
    assert "".join(b.text for b in final.content if b.type == "text") == text
    assert final.stop_reason in ("end_turn", "max_tokens")
    assert final.usage.input_tokens > 0
    assert 0 < final.usage.output_tokens <= MAX_TOKENS


# -- Ollama ------------------------------------------------------------------------------------

OPTIONS = {"temperature": 0, "seed": SEED, "num_predict": MAX_TOKENS}


def test_ollama_chat(olla: ollama.Client) -> None:
    resp = olla.chat(model=MODEL, messages=[{"role": "user", "content": QUESTION}], options=OPTIONS)
    assert resp.done
    assert_real_text(resp.message.content)
    assert "paris" in (resp.message.content or "").lower()
    assert resp.prompt_eval_count and resp.prompt_eval_count > 0
    assert resp.eval_count and 0 < resp.eval_count <= MAX_TOKENS


def test_ollama_chat_stream(olla: ollama.Client) -> None:
    parts = list(
        olla.chat(
            model=MODEL,
            messages=[{"role": "user", "content": QUESTION}],
            options=OPTIONS,
            stream=True,
        )
    )
    pieces = [p.message.content for p in parts if p.message.content]
    assert len(pieces) >= 3, parts
    text = "".join(pieces)
    assert_real_text(text)
    assert "paris" in text.lower()
    last = parts[-1]
    assert last.done
    assert all(not p.done for p in parts[:-1])
    assert last.prompt_eval_count and last.prompt_eval_count > 0
    assert last.eval_count and 0 < last.eval_count <= MAX_TOKENS


def test_ollama_generate(olla: ollama.Client) -> None:
    resp = olla.generate(model=MODEL, prompt=QUESTION, options=OPTIONS)
    assert resp.done
    assert_real_text(resp.response)
    assert resp.prompt_eval_count and resp.prompt_eval_count > 0
    assert resp.eval_count and 0 < resp.eval_count <= MAX_TOKENS


def test_ollama_generate_stream(olla: ollama.Client) -> None:
    parts = list(olla.generate(model=MODEL, prompt=QUESTION, options=OPTIONS, stream=True))
    pieces = [p.response for p in parts if p.response]
    assert len(pieces) >= 3, parts
    assert_real_text("".join(pieces))
    assert parts[-1].done
    assert parts[-1].eval_count and 0 < parts[-1].eval_count <= MAX_TOKENS
