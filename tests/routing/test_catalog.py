"""The catalog: model names and aliases, Ollama's `:latest`, discovered models, and which
backends serve a model; plus the routing view of a backend's state."""

from __future__ import annotations

from typing import Any

import pytest

from mindrouter.canonical import (
    ChatRequest,
    EmbeddingRequest,
    Message,
    RelevanceRequest,
    ResponseFormat,
    TextPart,
)
from mindrouter.errors import InvalidRequest, ModelNotFound
from mindrouter.routing.backend_config import BackendConfig, Engine
from mindrouter.routing.breaker import Breaker
from mindrouter.routing.catalog import (
    DEFAULT_CONTEXT,
    EMA_ALPHA,
    RERANK,
    STRUCTURED_OUTPUT,
    BackendState,
    Catalog,
    ModelSpec,
    check_modality,
    guess_spec,
    required_features,
)


def state(name: str, engine: Engine, max_concurrent: int = 8, **fields: Any) -> BackendState:
    return BackendState(
        BackendConfig(name, engine, f"http://{name}", max_concurrent=max_concurrent), **fields
    )


def catalog(*backends: BackendState) -> Catalog:
    specs = [
        ModelSpec("llama", 4096, aliases=("llama3", "meta-llama/Llama-3")),
        ModelSpec("embedder", 512, frozenset({"embedding"})),
    ]
    return Catalog(specs, list(backends))


def test_names_and_aliases_resolve_to_the_same_spec() -> None:
    c = catalog()
    spec = c.resolve("llama")
    assert c.resolve("llama3") is spec and c.resolve("meta-llama/Llama-3") is spec
    assert spec.context_length == 4096


def test_latest_tag_resolves_an_untagged_name_or_alias() -> None:
    c = catalog()
    assert c.resolve("llama:latest").name == "llama"
    assert c.resolve("llama3:latest").name == "llama"


def test_other_tags_are_different_models() -> None:
    with pytest.raises(ModelNotFound) as exc:
        catalog().resolve("llama:8b")
    assert exc.value.model == "llama:8b"


def test_unknown_model() -> None:
    with pytest.raises(ModelNotFound):
        catalog().resolve("nope")


def test_names_are_case_sensitive() -> None:
    with pytest.raises(ModelNotFound):
        catalog().resolve("LLAMA")


def test_a_model_only_a_backend_names_gets_a_guessed_spec() -> None:
    b = state("b", "vllm", serves={"llama": "l", "nomic-embed-text": "e", "qwen": "q"})
    c = catalog(b)
    qwen = c.resolve("qwen")
    assert (qwen.capabilities, qwen.context_length) == (frozenset({"chat"}), DEFAULT_CONTEXT)
    assert c.resolve("nomic-embed-text").is_embedding
    assert guess_spec("BGE-Embed").is_embedding


def test_add_discovered_uses_the_configured_name_for_a_known_model_or_alias() -> None:
    c = catalog()
    assert c.add_discovered("llama", 999) == "llama"
    assert c.add_discovered("llama3:latest", 999) == "llama"
    # The config's context length wins over what the backend says.
    assert c.resolve("llama").context_length == 4096


def test_add_discovered_adds_a_new_model_with_the_backends_context() -> None:
    c = catalog()
    assert c.add_discovered("qwen3:8b", 40960) == "qwen3:8b"
    assert c.resolve("qwen3:8b").context_length == 40960
    assert c.add_discovered("mistral", None) == "mistral"
    assert c.resolve("mistral").context_length == DEFAULT_CONTEXT
    # Found again later: the same name, no duplicate, with what the backend says now.
    assert c.add_discovered("qwen3:8b", 32768) == "qwen3:8b"
    assert c.resolve("qwen3:8b").context_length == 32768
    assert [s.name for s in c.models()].count("qwen3:8b") <= 1


def test_a_discovered_latest_model_resolves_without_its_tag() -> None:
    c = catalog()
    name = c.add_discovered("gemma3:latest", 8192)
    assert c.resolve("gemma3").name == name


def test_models_lists_only_served_models_in_config_order() -> None:
    a = state("a", "vllm", serves={"embedder": "e"})
    b = state("b", "ollama", serves={"llama": "llama3:latest", "embedder": "e2"})
    c = catalog(a, b)
    assert [m.name for m in c.models()] == ["llama", "embedder"]
    assert [m.name for m in catalog().models()] == []


def test_serving_pairs_each_backend_with_its_own_upstream_name() -> None:
    a = state("a", "vllm", serves={"llama": "meta-llama/Llama-3"})
    b = state("b", "ollama", serves={"llama": "llama3:latest"})
    c = catalog(a, b, state("c", "vllm", serves={"embedder": "e"}))
    assert c.serving("llama") == [(a, "meta-llama/Llama-3"), (b, "llama3:latest")]
    assert c.serving("nope") == []


def test_mark_used() -> None:
    c = catalog()
    assert c.last_used("llama") is None
    c.mark_used("llama", 5.0)
    assert c.last_used("llama") == 5.0


def test_modality_checks() -> None:
    chat, embed = catalog().resolve("llama"), catalog().resolve("embedder")
    check_modality(chat, "chat")
    check_modality(embed, "embedding")
    for spec, modality, param in [
        (chat, "embedding", "model"),
        (embed, "chat", "model"),
        (chat, "multimodal", "messages"),
    ]:
        with pytest.raises(InvalidRequest) as exc:
            check_modality(spec, modality)
        assert exc.value.param == param
    check_modality(ModelSpec("v", capabilities=frozenset({"chat", "vision"})), "multimodal")
    # A model that both chats and embeds may do either.
    both = ModelSpec("both", capabilities=frozenset({"chat", "embedding"}))
    check_modality(both, "chat")
    check_modality(both, "embedding")


def test_backend_status_and_usability() -> None:
    b = state("b", "vllm", max_concurrent=2)
    assert (b.status, b.usable(0.0), b.full) == ("HEALTHY", True, False)
    b.healthy = False
    assert (b.status, b.usable(0.0)) == ("UNHEALTHY", False)
    b.draining = True
    assert b.status == "DRAINING"  # draining is what an admin asked for: it shows first
    b.healthy = True
    assert b.usable(0.0) is False
    b.draining = False
    b.breaker = Breaker(threshold=1, cooldown=10, failures=1, open_until=10.0)
    assert b.status == "HEALTHY" and not b.usable(5.0) and b.usable(10.0)
    b.in_flight = 2
    assert b.full


def test_ttft_and_time_per_token_are_moving_averages() -> None:
    b = state("b", "vllm")
    b.observe_ttft(1.0)
    b.observe_tpot(0.05)
    assert (b.ttft_ema, b.tpot_ema) == (1.0, 0.05)  # the first sample is taken as it is
    b.observe_ttft(2.0)
    b.observe_tpot(0.1)
    assert b.ttft_ema == pytest.approx(1.0 + EMA_ALPHA * 1.0)
    assert b.tpot_ema == pytest.approx(0.05 + EMA_ALPHA * 0.05)


def test_structured_output_is_required_only_by_json_mode_and_schemas() -> None:
    def chat(fmt: ResponseFormat | None) -> ChatRequest:
        return ChatRequest(
            model="m", messages=[Message("user", [TextPart("hi")])], response_format=fmt
        )

    assert required_features(chat(None)) == frozenset()
    assert required_features(chat(ResponseFormat("text"))) == frozenset()
    assert required_features(chat(ResponseFormat("json"))) == {STRUCTURED_OUTPUT}
    schema = ResponseFormat("json_schema", schema={"type": "object"})
    assert required_features(chat(schema)) == {STRUCTURED_OUTPUT}
    assert required_features(EmbeddingRequest(model="e", inputs=["x"])) == frozenset()


def test_room_counts_only_backends_with_the_features_required() -> None:
    plain = state("plain", "openai", max_concurrent=1, serves={"m": "m"}, features=frozenset())
    able = state("able", "vllm", max_concurrent=1, serves={"m": "m"})
    cat = Catalog([ModelSpec("m")], [plain, able])
    need = frozenset({STRUCTURED_OUTPUT})
    assert cat.has_room("m", frozenset(), 0.0) and cat.has_room("m", need, 0.0)
    able.in_flight = 1
    assert cat.has_room("m", frozenset(), 0.0)  # the plain backend still has its slot
    assert not cat.has_room("m", need, 0.0)
    cat.check_features(ModelSpec("m"), need)  # some backend of the model could take it


def test_a_request_no_backend_of_the_model_could_take_is_refused() -> None:
    plain = state("plain", "openai", serves={"m": "m"}, features=frozenset())
    cat = Catalog([ModelSpec("m")], [plain])
    cat.check_features(ModelSpec("m"), frozenset())
    with pytest.raises(InvalidRequest, match="supports structured output") as err:
        cat.check_features(ModelSpec("m"), frozenset({STRUCTURED_OUTPUT}))
    assert err.value.param == "response_format"


def test_rerank_models_are_guessed_by_name_and_checked() -> None:
    assert guess_spec("BAAI/bge-reranker-v2-m3").capabilities == {"rerank"}
    assert guess_spec("Qwen3-Reranker-0.6B").capabilities == {"rerank"}
    reranker = ModelSpec("rr", capabilities=frozenset({"rerank"}))
    check_modality(reranker, "rerank")
    for modality in ("chat", "completion"):
        with pytest.raises(InvalidRequest, match="is a rerank model; use the rerank") as err:
            check_modality(reranker, modality)
        assert err.value.param == "model"
    with pytest.raises(InvalidRequest, match="not an embedding model"):
        check_modality(reranker, "embedding")
    with pytest.raises(InvalidRequest, match="not a rerank model") as err:
        check_modality(ModelSpec("chat"), "rerank")
    assert err.value.param == "model"


def test_reranking_needs_a_backend_with_a_rerank_api() -> None:
    req = RelevanceRequest(model="rr", queries=["q"], documents=["d"])
    assert required_features(req) == {RERANK}
    ollama = state("o", "ollama", serves={"rr": "rr"}, features=frozenset())
    vllm = state("v", "vllm", serves={"rr": "rr"})
    spec = ModelSpec("rr", capabilities=frozenset({"rerank"}))
    Catalog([spec], [ollama, vllm]).check_features(spec, frozenset({RERANK}))
    with pytest.raises(InvalidRequest, match="has a rerank API") as err:
        Catalog([spec], [ollama]).check_features(spec, frozenset({RERANK}))
    assert err.value.param == "model"
