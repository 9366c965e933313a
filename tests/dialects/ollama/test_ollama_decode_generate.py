"""Golden decodes of /api/generate, load calls, keep_alive and the embedding endpoints."""

from __future__ import annotations

import base64
import math

import pytest

from mindrouter.canonical import (
    ChatRequest,
    CompletionRequest,
    EmbeddingRequest,
    ImagePart,
    Message,
    Reasoning,
    ResponseFormat,
    Sampling,
    TextPart,
    text_message,
)
from mindrouter.dialects.ollama import (
    chat_load_action,
    decode_embed_request,
    decode_embeddings_request,
    decode_generate_request,
    decode_show_request,
    generate_load_action,
    parse_keep_alive,
)
from mindrouter.errors import InvalidRequest

PNG = b"\x89PNG\r\n\x1a\n" + b"\x07" * 16


def generate(**fields: object) -> ChatRequest | CompletionRequest:
    return decode_generate_request({"model": "llama3.2", **fields})


def test_plain_prompt_is_a_one_turn_chat() -> None:
    assert generate(prompt="Why is the sky blue?") == ChatRequest(
        model="llama3.2", messages=[text_message("user", "Why is the sky blue?")], stream=True
    )


def test_system_images_and_controls() -> None:
    req = generate(
        prompt="Describe",
        system="You are terse.",
        images=[base64.b64encode(PNG).decode()],
        format="json",
        think="low",
        options={"temperature": 0, "num_predict": 50},
        stream=False,
        template="{{ .Prompt }}",
        context=[1, 2, 3],
        keep_alive=0,
    )
    assert req == ChatRequest(
        model="llama3.2",
        messages=[
            text_message("system", "You are terse."),
            Message(
                role="user",
                content=[TextPart("Describe"), ImagePart(data=PNG, media_type="image/png")],
            ),
        ],
        sampling=Sampling(temperature=0.0, max_tokens=50),
        response_format=ResponseFormat(kind="json"),
        reasoning=Reasoning(mode="on", effort="low"),
        stream=False,
    )


def test_raw_is_a_completion() -> None:
    req = generate(
        prompt="<|user|>Hi<|assistant|>",
        raw=True,
        system="",
        options={"stop": ["<|user|>"], "num_ctx": 2048},
    )
    assert req == CompletionRequest(
        model="llama3.2",
        prompt=["<|user|>Hi<|assistant|>"],
        sampling=Sampling(stop=["<|user|>"]),
        stream=True,
        extra={"num_ctx": 2048},
    )


def test_suffix_is_a_completion_with_suffix() -> None:
    req = generate(prompt="def add(a, b):\n    ", suffix="\n\nprint(add(1, 2))", stream=False)
    assert req == CompletionRequest(
        model="llama3.2",
        prompt=["def add(a, b):\n    "],
        suffix="\n\nprint(add(1, 2))",
        stream=False,
    )


def test_empty_prompt_decodes_and_is_a_load_call() -> None:
    body = {"model": "llama3.2"}
    req = decode_generate_request(body)
    assert isinstance(req, ChatRequest)
    assert req.messages == [Message(role="user", content=[])]
    assert generate_load_action(body) == "load"


@pytest.mark.parametrize(
    ("body", "action"),
    [
        ({"model": "m"}, "load"),
        ({"model": "m", "prompt": ""}, "load"),
        ({"model": "m", "prompt": "", "keep_alive": 0}, "unload"),
        ({"model": "m", "keep_alive": "0s"}, "unload"),
        ({"model": "m", "keep_alive": "0"}, "unload"),
        ({"model": "m", "keep_alive": "5m"}, "load"),
        ({"model": "m", "prompt": "hi", "keep_alive": 0}, None),
    ],
)
def test_generate_load_action(body: dict[str, object], action: str | None) -> None:
    assert generate_load_action(body) == action


@pytest.mark.parametrize(
    ("body", "action"),
    [
        ({"model": "m"}, "load"),
        ({"model": "m", "messages": []}, "load"),
        ({"model": "m", "messages": None, "keep_alive": 0}, "unload"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}]}, None),
    ],
)
def test_chat_load_action(body: dict[str, object], action: str | None) -> None:
    assert chat_load_action(body) == action


def test_load_action_validates_what_it_reads() -> None:
    with pytest.raises(InvalidRequest) as err:
        chat_load_action({"model": "m", "keep_alive": "soon"})
    assert err.value.param == "keep_alive"
    with pytest.raises(InvalidRequest):
        generate_load_action([])


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (None, None),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("1.5s", 1.5),
        ("250ms", 0.25),
        ("+2h", 7200.0),
        ("0", 0.0),
        (0, 0.0),
        (30, 30.0),
        (2.5, 2.5),
        (-1, math.inf),
        ("-5m", math.inf),
    ],
)
def test_parse_keep_alive(value: object, seconds: float | None) -> None:
    assert parse_keep_alive(value) == seconds


@pytest.mark.parametrize("value", ["", "5", "5 m", "m", "1d", "abc", True, [], {}])
def test_parse_keep_alive_rejects(value: object) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_keep_alive(value)
    assert err.value.param == "keep_alive"


def test_embed_single_and_batch() -> None:
    assert decode_embed_request({"model": "nomic-embed-text", "input": "hello"}) == (
        EmbeddingRequest(model="nomic-embed-text", inputs=["hello"], truncate=True)
    )
    assert decode_embed_request(
        {
            "model": "e",
            "input": ["a", "b"],
            "truncate": False,
            "dimensions": 256,
            "options": {"num_ctx": 512},
            "keep_alive": "1m",
        }
    ) == EmbeddingRequest(model="e", inputs=["a", "b"], dimensions=256, truncate=False)


def test_legacy_embeddings() -> None:
    assert decode_embeddings_request({"model": "e", "prompt": "hi", "options": {}}) == (
        EmbeddingRequest(model="e", inputs=["hi"])
    )


def test_show_request_accepts_model_or_legacy_name() -> None:
    assert decode_show_request({"model": "qwen3:8b", "verbose": False}) == "qwen3:8b"
    assert decode_show_request({"name": "llama3.2"}) == "llama3.2"
    bad: list[object] = [{}, {"model": ""}, {"name": 3}, {"model": "m", "verbose": "yes"}, []]
    for body in bad:
        with pytest.raises(InvalidRequest):
            decode_show_request(body)
