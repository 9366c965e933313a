"""The factory picks the adapter, and each engine's URL convention resolves the same way."""

from __future__ import annotations

import pytest

from mindrouter.backends import (
    LlamaCppAdapter,
    OllamaAdapter,
    OpenAIAdapter,
    VLLMAdapter,
    build_adapter,
)


@pytest.mark.parametrize(
    ("engine", "cls"),
    [
        ("vllm", VLLMAdapter),
        ("llamacpp", LlamaCppAdapter),
        ("openai", OpenAIAdapter),
        ("ollama", OllamaAdapter),
    ],
)
def test_factory(engine: str, cls: type) -> None:
    adapter = build_adapter(engine, "http://h:1", name="gpu-1")  # type: ignore[arg-type]
    assert isinstance(adapter, cls)
    assert (adapter.engine, adapter.url) == (engine, "http://h:1")


def test_unknown_engine() -> None:
    with pytest.raises(ValueError, match="unknown engine"):
        build_adapter("tgi", "http://h")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "url", ["http://h:8000", "http://h:8000/", "http://h:8000/v1", "http://h:8000/v1/"]
)
def test_vllm_and_llamacpp_urls(url: str) -> None:
    for cls in (VLLMAdapter, LlamaCppAdapter):
        adapter = cls(url)
        assert (adapter.http.root, adapter.api) == ("http://h:8000", "/v1")


@pytest.mark.parametrize(
    ("url", "root", "prefix"),
    [
        ("https://api.example.com", "https://api.example.com", "/v1"),
        ("https://api.example.com/v1/", "https://api.example.com/v1", ""),
        ("https://example.com/openai/v1", "https://example.com/openai/v1", ""),
        ("https://example.com/api/paas/v4", "https://example.com/api/paas/v4", ""),
    ],
)
def test_generic_openai_urls(url: str, root: str, prefix: str) -> None:
    adapter = OpenAIAdapter(url)
    assert (adapter.http.root, adapter.api) == (root, prefix)


@pytest.mark.parametrize("url", ["http://h:11434", "http://h:11434/", "http://h:11434/api"])
def test_ollama_urls(url: str) -> None:
    adapter = OllamaAdapter(url, context_lengths={"m": 1})
    assert adapter.http.root == "http://h:11434"
    assert adapter.context_lengths == {"m": 1}
