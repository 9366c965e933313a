"""The ports the pipeline stages talk to, gathered once by the composition root."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from mindrouter.backends.base import EngineAdapter
from mindrouter.identity.principal import Principal
from mindrouter.observability.metrics import Metrics
from mindrouter.pipeline.leases import LeaseKeeper
from mindrouter.pipeline.recovery import Recovery
from mindrouter.pipeline.usage_sync import UsageSync
from mindrouter.routing.catalog import BackendState, Catalog
from mindrouter.routing.select import DEFAULT_WEIGHTS, ScoreWeights
from mindrouter.scheduling import CapacityGate, Standing
from mindrouter.stores.limits import LimitStore
from mindrouter.stores.ports import AuditSink


class Authenticate(Protocol):
    async def authenticate(self, headers: Mapping[str, str]) -> Principal: ...


class SharedBreakers(Protocol):
    """The circuit breakers' link to the other gateway processes (absent with one process)."""

    async def claim_probe(self, backend: BackendState) -> bool: ...

    def changed(self) -> None: ...


class SharedSlots(Protocol):
    """The backend slot board shared with the other gateway processes (absent with one)."""

    def changed(self, backend: BackendState) -> None: ...

    def others_best(self) -> dict[str, Standing]: ...


@dataclass(slots=True)
class Services:
    catalog: Catalog
    adapters: dict[str, EngineAdapter]
    authenticator: Authenticate
    limits: LimitStore
    audit: AuditSink
    gate: CapacityGate
    usage: UsageSync
    metrics: Metrics = field(default_factory=Metrics)
    max_attempts: int = 3
    score_weights: ScoreWeights = DEFAULT_WEIGHTS
    capacity_wait: float = 150.0
    breakers: SharedBreakers | None = None
    slots: SharedSlots | None = None
    leases: LeaseKeeper | None = None  # renews the limit leases of requests in flight
    recovery: Recovery | None = None  # heartbeat and checkpoints of requests in flight
    draining: Callable[[], bool] = field(default=lambda: False)  # shutting down: end streams
    clock: Callable[[], float] = field(default=time.monotonic)
    wall: Callable[[], float] = field(default=time.time)
