"""Ollama model listings (/api/tags, /api/ps, /api/show, /api/version) against the SDK's models."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import ollama

from mindrouter.dialects.ollama import (
    ModelView,
    encode_ps,
    encode_show,
    encode_tags,
    encode_version,
    format_rfc3339,
)


def roundtrip(body: dict[str, Any]) -> dict[str, Any]:
    """What a client receives: the body as JSON text, parsed again."""
    parsed: dict[str, Any] = json.loads(json.dumps(body))
    return parsed


MODIFIED = format_rfc3339(1767261600.0)
EXPIRES = format_rfc3339(1767261900.25)
QWEN = ModelView(
    name="qwen3:8b",
    context_length=32768,
    modified_at=MODIFIED,
    capabilities=["chat", "tools", "thinking", "completion"],
    family="qwen3",
    parameter_size="8.2B",
    quantization_level="Q4_K_M",
    parameter_count=8_190_735_360,
    size=5_225_376_047,
    size_vram=5_137_025_024,
    digest="a" * 64,
    expires_at=EXPIRES,
    loaded=True,
)
EMBED = ModelView(
    name="nomic-embed-text",
    context_length=2048,
    modified_at=MODIFIED,
    capabilities=["embedding"],
)


def test_tags() -> None:
    body = encode_tags([QWEN, EMBED])
    first = body["models"][0]
    assert first == {
        "name": "qwen3:8b",
        "model": "qwen3:8b",
        "modified_at": MODIFIED,
        "size": 5_225_376_047,
        "digest": "a" * 64,
        "details": {
            "parent_model": "",
            "format": "gguf",
            "family": "qwen3",
            "families": ["qwen3"],
            "parameter_size": "8.2B",
            "quantization_level": "Q4_K_M",
        },
        "capabilities": ["completion", "tools", "thinking"],
    }
    second = body["models"][1]
    assert len(second["digest"]) == 64 and second["digest"] != first["digest"]
    sdk = ollama.ListResponse.model_validate(roundtrip(body))
    assert sdk.models[0].modified_at == datetime(2026, 1, 1, 10, 0, tzinfo=UTC)


def test_ps_lists_only_loaded_models() -> None:
    body = encode_ps([QWEN, EMBED])
    assert [m["name"] for m in body["models"]] == ["qwen3:8b"]
    entry = body["models"][0]
    assert (entry["expires_at"], entry["size_vram"], entry["context_length"]) == (
        EXPIRES,
        5_137_025_024,
        32768,
    )
    sdk = ollama.ProcessResponse.model_validate(roundtrip(body))
    assert sdk.models[0].expires_at == datetime(2026, 1, 1, 10, 5, 0, 250000, tzinfo=UTC)
    assert encode_ps([EMBED]) == {"models": []}


def test_show_has_model_info() -> None:
    body = encode_show(QWEN)
    assert body["model_info"] == {
        "general.architecture": "qwen3",
        "qwen3.context_length": 32768,
        "general.parameter_count": 8_190_735_360,
    }
    assert ".Tools" in body["template"]
    sdk = ollama.ShowResponse.model_validate(roundtrip(body))
    assert sdk.modelinfo is not None
    arch = sdk.modelinfo["general.architecture"]
    assert sdk.modelinfo[f"{arch}.context_length"] == 32768
    assert sdk.capabilities == ["completion", "tools", "thinking"]
    plain = ollama.ShowResponse.model_validate(roundtrip(encode_show(EMBED)))
    assert plain.modelinfo == {"general.architecture": "unknown", "unknown.context_length": 2048}
    assert plain.capabilities == ["embedding"]


def test_version() -> None:
    assert encode_version("0.12.3") == {"version": "0.12.3"}
