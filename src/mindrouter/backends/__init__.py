"""Engine adapters: canonical requests in, canonical results and events out.

`build_adapter` picks the adapter for an engine. URL conventions:
- vllm, llamacpp: the server root; a trailing `/v1` is accepted and removed (their tokenizer
  routes live at the root, the OpenAI routes under `/v1`);
- openai: an API base ending in a version segment (`https://host/v1`) is used as it is;
  anything else gets `/v1` appended;
- ollama: the server root; a trailing `/api` is accepted and removed.

`context_lengths` (model name → tokens) is used by the Ollama adapter only, to send `num_ctx`;
see `mindrouter.backends.ollama`.
"""

from __future__ import annotations

from collections.abc import Mapping

from mindrouter.backends.base import EngineAdapter, Timeouts
from mindrouter.backends.http import DEFAULT_TIMEOUTS
from mindrouter.backends.llamacpp import LlamaCppAdapter
from mindrouter.backends.ollama import OllamaAdapter
from mindrouter.backends.openai import OpenAIAdapter
from mindrouter.backends.vllm import VLLMAdapter
from mindrouter.routing.backend_config import ENGINES, Engine

__all__ = [
    "EngineAdapter",
    "LlamaCppAdapter",
    "OllamaAdapter",
    "OpenAIAdapter",
    "Timeouts",
    "VLLMAdapter",
    "build_adapter",
]


def build_adapter(
    engine: Engine,
    url: str,
    *,
    timeouts: Timeouts = DEFAULT_TIMEOUTS,
    api_key: str | None = None,
    name: str | None = None,
    context_lengths: Mapping[str, int] | None = None,
) -> EngineAdapter:
    if engine == "ollama":
        return OllamaAdapter(
            url, timeouts=timeouts, api_key=api_key, name=name, context_lengths=context_lengths
        )
    if engine == "vllm":
        return VLLMAdapter(url, timeouts=timeouts, api_key=api_key, name=name)
    if engine == "llamacpp":
        return LlamaCppAdapter(url, timeouts=timeouts, api_key=api_key, name=name)
    if engine == "openai":
        return OpenAIAdapter(url, timeouts=timeouts, api_key=api_key, name=name)
    raise ValueError(f"unknown engine {engine!r}; expected one of {', '.join(ENGINES)}")
