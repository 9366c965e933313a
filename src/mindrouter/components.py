"""The parts the app is built from, each made from the settings: the routing catalog, one engine
adapter per backend, the limit store (in-process, or Redis with its outage policy), and what the
processes share besides (through Redis, or the single process's counterparts)."""

from __future__ import annotations

from mindrouter.backends import build_adapter
from mindrouter.backends.base import EngineAdapter
from mindrouter.observability.logging import log
from mindrouter.observability.metrics import Metrics
from mindrouter.routing.backend_config import BackendConfig
from mindrouter.routing.breaker import Breaker
from mindrouter.routing.catalog import (
    FEATURES,
    RERANK,
    STRUCTURED_OUTPUT,
    BackendState,
    Catalog,
    ModelSpec,
)
from mindrouter.scheduling import InMemoryFairShareState
from mindrouter.settings import ModelSettings, Settings
from mindrouter.stores.breakers import BreakerTiming, SharedBreakers
from mindrouter.stores.fairshare import RedisFairShareState
from mindrouter.stores.limits import (
    LimitStore,
    MemoryLimitStore,
    RedisLimitStore,
    RedisUnavailablePolicy,
    ResilientLimitStore,
)
from mindrouter.stores.shared import LocalBreakers, LocalSlots, RedisLink, Sharing
from mindrouter.stores.slots import SharedSlots


def backend_features(b: BackendConfig) -> frozenset[str]:
    """What the backend can do besides serving its models: structured output unless the config
    says otherwise; reranking on every engine but Ollama, which has no such API."""
    features = FEATURES
    if not b.structured_output:
        features -= {STRUCTURED_OUTPUT}
    if b.engine == "ollama":
        features -= {RERANK}
    return features


def model_specs(models: list[ModelSettings]) -> list[ModelSpec]:
    return [
        ModelSpec(
            name=m.name,
            context_length=m.context_length,
            capabilities=frozenset(m.capabilities),
            aliases=tuple(m.aliases),
        )
        for m in models
    ]


def backend_state(b: BackendConfig, specs: list[ModelSpec], settings: Settings) -> BackendState:
    # Without an explicit list, a backend is taken to serve every described model until its
    # first health check says what it serves.
    serves = (
        {m.name: m.upstream for m in b.models}
        if b.models is not None
        else {s.name: s.name for s in specs}
    )
    return BackendState(
        b,
        serves=serves,
        features=backend_features(b),
        breaker=Breaker(settings.breaker_threshold, settings.breaker_cooldown_s),
    )


def build_catalog(settings: Settings) -> Catalog:
    specs = model_specs(settings.models)
    return Catalog(specs, [backend_state(b, specs, settings) for b in settings.backends])


def backend_adapter(state: BackendState, catalog: Catalog, settings: Settings) -> EngineAdapter:
    # Ollama loads a model with the context window it is asked for; send the described one.
    contexts = {
        upstream: catalog.resolve(model).context_length for model, upstream in state.serves.items()
    }
    b = state.config
    return build_adapter(
        b.engine,
        b.url,
        timeouts=settings.timeouts,
        api_key=b.api_key,
        name=b.name,
        context_lengths=contexts,
    )


def build_adapters(settings: Settings, catalog: Catalog) -> dict[str, EngineAdapter]:
    return {s.name: backend_adapter(s, catalog, settings) for s in catalog.backends}


def build_limits(settings: Settings, metrics: Metrics) -> LimitStore:
    if not settings.redis_url:
        return MemoryLimitStore(settings.lease_s)

    def degraded(reason: str) -> None:
        metrics.limits_degraded.inc()
        log.warning("limits answered locally: Redis unreachable", reason=reason)

    primary = RedisLimitStore.from_url(
        settings.redis_url, prefix=settings.redis_prefix, lease_seconds=settings.lease_s
    )
    policy = (
        RedisUnavailablePolicy.FAIL_OPEN_LOCAL
        if settings.redis_unavailable == "fail_open"
        else RedisUnavailablePolicy.FAIL_CLOSED
    )
    return ResilientLimitStore(
        primary, policy=policy, fallback=MemoryLimitStore(settings.lease_s), on_degraded=degraded
    )


def build_sharing(settings: Settings, catalog: Catalog) -> Sharing:
    """With Redis, what every process and replica shares: the fair-share counters; the backends'
    slots (`max_concurrent` bounds the load of every process together, and a free slot goes to
    the best waiter of the whole deployment); the circuit breakers. Without, each process's own."""
    url = settings.redis_url
    if not url:
        return Sharing(InMemoryFairShareState(), LocalSlots(), LocalBreakers())

    def link() -> RedisLink:
        return RedisLink.from_url(url, settings.redis_prefix)

    fairshare = RedisFairShareState(link(), settings.fairshare_sync_s)
    slots = SharedSlots(link(), catalog.backends)
    fairshare.contended = lambda: slots.contended
    # The half-open probe may outlast the longest attempt.
    probe_lease = settings.timeouts.total + 10.0
    breakers = SharedBreakers(link(), catalog.backends, BreakerTiming(probe_lease=probe_lease))
    return Sharing(fairshare, slots, breakers, (fairshare, breakers, slots))
