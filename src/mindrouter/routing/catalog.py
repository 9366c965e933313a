"""Models, their aliases and capabilities, and the backends that serve each of them.

Pure state, read on every request: built from the settings at start, then replaced in place
(`replace`) whenever the database's backends or models change, so every holder of the catalog
sees the new one. A model named by a backend but not described gets defaults guessed from its
name (an "embed" model embeds, a "rerank" model reranks), or what discovery learnt of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mindrouter.canonical import AnyRequest, ChatRequest, RelevanceRequest
from mindrouter.errors import InvalidRequest, ModelNotFound
from mindrouter.routing.backend_config import BackendConfig
from mindrouter.routing.breaker import Breaker

DEFAULT_CONTEXT = 8192
# What a backend may or may not support, beyond serving a model. A request that needs a feature
# goes only to backends that have it (a hard constraint of backend selection).
STRUCTURED_OUTPUT = "structured_output"  # JSON mode and JSON schemas (response_format)
RERANK = "rerank"  # the rerank/score API (vLLM, llama.cpp, OpenAI-compatible; Ollama has none)
FEATURES: frozenset[str] = frozenset({STRUCTURED_OUTPUT, RERANK})
# How a refusal says what no backend of the model has, and the request field it is about.
_MISSING: dict[str, tuple[str, str]] = {
    STRUCTURED_OUTPUT: (
        "supports structured output (JSON mode or a JSON schema); send the request without it "
        "or use another model",
        "response_format",
    ),
    RERANK: ("has a rerank API (Ollama has none); use a model served by vLLM", "model"),
}
EMA_ALPHA = 0.2  # weight of the newest sample in the speed averages


@dataclass(slots=True)
class ModelSpec:
    name: str
    context_length: int = DEFAULT_CONTEXT
    capabilities: frozenset[str] = frozenset({"chat"})
    aliases: tuple[str, ...] = ()

    @property
    def is_embedding(self) -> bool:
        return "embedding" in self.capabilities

    @property
    def is_reranker(self) -> bool:
        return "rerank" in self.capabilities


@dataclass(slots=True)
class BackendState:
    """A backend as the router sees it: its configuration (replaced when an admin changes it)
    and what is learnt of it at run time. `in_flight` is this process's count of open requests;
    `others_in_flight` the other gateway processes' (as last exchanged through Redis, 0 without
    it): the configured `max_concurrent` bounds their sum, the backend's whole load."""

    config: BackendConfig
    healthy: bool = True
    draining: bool = False  # set by an admin: finish what runs, take nothing new
    in_flight: int = 0
    others_in_flight: int = 0
    # gateway model name -> the name this backend serves it under
    serves: dict[str, str] = field(default_factory=dict)
    # models resident in GPU memory right now, as the backend last reported (or last served)
    loaded: set[str] = field(default_factory=set)
    breaker: Breaker = field(default_factory=Breaker)
    waiting: float = 0.0  # the engine's own queue, from its metrics
    features: frozenset[str] = FEATURES
    # moving averages of the backend's speed, for scoring: time to first token, per output token
    ttft_ema: float | None = None
    tpot_ema: float | None = None
    last_error: str | None = None

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def status(self) -> str:
        if self.draining:
            return "DRAINING"
        return "HEALTHY" if self.healthy else "UNHEALTHY"

    @property
    def load(self) -> int:
        return self.in_flight + self.others_in_flight

    @property
    def full(self) -> bool:
        return self.load >= self.config.max_concurrent

    def observe_ttft(self, seconds: float) -> None:
        self.ttft_ema = _ema(self.ttft_ema, seconds)

    def observe_tpot(self, seconds: float) -> None:
        """Seconds per output token of a finished stream, after its first token."""
        self.tpot_ema = _ema(self.tpot_ema, seconds)

    def usable(self, now: float) -> bool:
        return self.healthy and not self.draining and self.breaker.allows(now)

    def can_take(self, requires: frozenset[str], now: float) -> bool:
        """Usable, with a free slot, and with every feature the request needs."""
        return self.usable(now) and not self.full and requires <= self.features


def _ema(prev: float | None, sample: float) -> float:
    return sample if prev is None else prev + EMA_ALPHA * (sample - prev)


def required_features(req: AnyRequest) -> frozenset[str]:
    """The backend features `req` cannot be served without."""
    if isinstance(req, RelevanceRequest):
        return frozenset({RERANK})
    if isinstance(req, ChatRequest):
        fmt = req.response_format
        if fmt is not None and fmt.kind != "text":
            return frozenset({STRUCTURED_OUTPUT})
    return frozenset()


def guess_spec(name: str) -> ModelSpec:
    lowered = name.lower()
    if "rerank" in lowered:
        caps = {"rerank"}
    elif "embed" in lowered:
        caps = {"embedding"}
    else:
        caps = {"chat"}
    return ModelSpec(name=name, capabilities=frozenset(caps))


class Catalog:
    def __init__(self, models: list[ModelSpec], backends: list[BackendState]) -> None:
        self.backends: list[BackendState] = []
        self._specs: dict[str, ModelSpec] = {}
        self._alias: dict[str, str] = {}
        self._last_used: dict[str, float] = {}
        self._described: set[str] = set()
        self._retired: frozenset[str] = frozenset()
        self.replace(models, backends)

    def replace(
        self,
        models: list[ModelSpec],
        backends: list[BackendState],
        retired: frozenset[str] = frozenset(),
    ) -> None:
        """The described models and the backends from now on. The list of backends is changed
        in place; a model served but not described keeps what was known of it (discovered
        context length) or gets the guessed defaults. `retired` models (disabled by an admin)
        are served by no backend, whether listed or discovered."""
        before = self._specs
        self._specs, self._alias = {}, {}
        self._retired = retired
        for spec in models:
            self._add(spec)
        self._described = set(self._alias)
        for b in backends:
            b.serves = {m: up for m, up in b.serves.items() if m not in retired}
            for model in b.serves:
                if model not in self._alias:
                    self._add(before.get(model) or guess_spec(model))
        self.backends[:] = backends

    def _add(self, spec: ModelSpec) -> None:
        self._specs[spec.name] = spec
        self._alias[spec.name] = spec.name
        for a in spec.aliases:
            self._alias[a] = spec.name

    def resolve(self, name: str) -> ModelSpec:
        canonical = self._alias.get(name)
        if canonical is None:
            # Ollama treats `x` and `x:latest` as one model; so do we, both ways.
            other = name.removesuffix(":latest") if name.endswith(":latest") else name + ":latest"
            canonical = self._alias.get(other)
        if canonical is None:
            raise ModelNotFound(name)
        return self._specs[canonical]

    def add_discovered(
        self,
        upstream: str,
        context_length: int | None,
        capabilities: frozenset[str] | None = None,
    ) -> str | None:
        """A model a backend reports: the gateway's name for it (None for a retired one). A
        described model (a name or alias of the `models` the admin gave) keeps its description:
        that is how capabilities and context are overridden per model. Otherwise the backend's
        own name, with what the backend says of its context and capabilities, else guessed
        from the name."""
        for name in (upstream, upstream.removesuffix(":latest")):
            if name in self._retired:
                return None
            if name in self._described:
                return self._alias[name]
        spec = guess_spec(upstream)
        if context_length:
            spec.context_length = context_length
        if capabilities:
            spec.capabilities = capabilities
        self._add(spec)
        return spec.name

    def mark_used(self, model: str, now: float) -> None:
        """A backend just served the model, so it is resident in GPU memory somewhere."""
        self._last_used[model] = now

    def last_used(self, model: str) -> float | None:
        return self._last_used.get(model)

    def models(self) -> list[ModelSpec]:
        """Models that at least one backend serves, in config order."""
        served = {m for b in self.backends for m in b.serves}
        return [s for s in self._specs.values() if s.name in served]

    def serving(self, model: str) -> list[tuple[BackendState, str]]:
        return [(b, b.serves[model]) for b in self.backends if model in b.serves]

    def has_room(self, model: str, requires: frozenset[str], now: float) -> bool:
        """Whether a backend that may serve a request for `model` needing `requires` has a free
        slot right now."""
        return any(b.can_take(requires, now) for b in self.backends if model in b.serves)

    def check_features(self, spec: ModelSpec, requires: frozenset[str]) -> None:
        """Refuse a request that no backend serving the model could take, before it waits."""
        if not requires:
            return
        features = [b.features for b, _ in self.serving(spec.name)]
        if any(requires <= have for have in features):
            return
        lacking = [f for f in sorted(requires) if not all(f in have for have in features)]
        what, param = _MISSING[(lacking or sorted(requires))[0]]
        raise InvalidRequest(f"no backend serving model '{spec.name}' {what}", param=param)


# Models that answer without generating, and where requests for them belong.
_POOLING = (
    ("embedding", "an embedding", "embeddings"),
    ("rerank", "a rerank", "rerank or score"),
)


def check_modality(spec: ModelSpec, modality: str) -> None:
    """Refuse requests the model cannot handle, before any backend is asked."""
    if modality == "embedding":
        if not spec.is_embedding:
            raise InvalidRequest(f"model '{spec.name}' is not an embedding model", param="model")
        return
    if modality == "rerank":
        if not spec.is_reranker:
            raise InvalidRequest(
                f"model '{spec.name}' is not a rerank model (it lacks the rerank capability)",
                param="model",
            )
        return
    if "chat" not in spec.capabilities:
        for capability, kind, endpoint in _POOLING:
            if capability in spec.capabilities:
                raise InvalidRequest(
                    f"model '{spec.name}' is {kind} model; use the {endpoint} endpoint",
                    param="model",
                )
    if modality == "multimodal" and "vision" not in spec.capabilities:
        raise InvalidRequest(f"model '{spec.name}' does not accept images", param="messages")
