"""Legacy completion and embedding requests decode into their canonical requests."""

from __future__ import annotations

import pytest

from mindrouter.canonical import Sampling
from mindrouter.dialects.openai import (
    COMPLETION_DEFAULT_MAX_TOKENS,
    decode_completion_request,
    decode_embedding_request,
    wants_usage,
)


def test_completion_defaults_follow_openai() -> None:
    req = decode_completion_request({"model": "m", "prompt": "Once upon"})
    assert req.prompt == ["Once upon"]
    assert req.sampling == Sampling(max_tokens=COMPLETION_DEFAULT_MAX_TOKENS)
    assert COMPLETION_DEFAULT_MAX_TOKENS == 16
    assert (req.suffix, req.echo, req.stream, req.extra) == (None, False, False, {})


def test_completion_fields() -> None:
    body = {
        "model": "m",
        "prompt": ["a", "b"],
        "suffix": "end",
        "echo": True,
        "n": 2,
        "stop": "\n",
        "max_tokens": 64,
        "temperature": 0,
        "seed": 7,
        "logprobs": 2,
        "best_of": 3,
        "logit_bias": {"1": 5},
        "user": "u",
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    req = decode_completion_request(body)
    assert req.prompt == ["a", "b"]
    assert (req.suffix, req.echo, req.stream, req.user) == ("end", True, True, "u")
    assert req.sampling == Sampling(max_tokens=64, temperature=0.0, seed=7, n=2, stop=["\n"])
    assert req.extra == {"best_of": 3, "logit_bias": {"1": 5}}
    assert wants_usage(body)


def test_completion_empty_prompt_string_is_allowed() -> None:
    assert decode_completion_request({"model": "m", "prompt": ""}).prompt == [""]


@pytest.mark.parametrize(
    ("wire", "inputs"),
    [
        ("hello", ["hello"]),
        (["a", "b"], ["a", "b"]),
        ([1, 2, 3], [[1, 2, 3]]),
        ([[1, 2], [3]], [[1, 2], [3]]),
    ],
)
def test_embedding_input_forms(wire: object, inputs: object) -> None:
    req, fmt = decode_embedding_request({"model": "e", "input": wire})
    assert req.inputs == inputs
    assert fmt == "float"


def test_embedding_options() -> None:
    req, fmt = decode_embedding_request(
        {"model": "e", "input": "x", "encoding_format": "base64", "dimensions": 256, "user": "u"}
    )
    assert (req.model, req.dimensions, req.user, fmt) == ("e", 256, "u", "base64")
    _, fmt = decode_embedding_request({"model": "e", "input": "x", "encoding_format": "float"})
    assert fmt == "float"
