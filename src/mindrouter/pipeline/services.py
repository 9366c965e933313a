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
from mindrouter.routing.catalog import Catalog
from mindrouter.routing.select import DEFAULT_WEIGHTS, ScoreWeights
from mindrouter.scheduling import CapacityGate
from mindrouter.stores.limits import LimitStore
from mindrouter.stores.ports import AuditSink, BreakerBoard, SlotBoard


class Authenticate(Protocol):
    async def authenticate(self, headers: Mapping[str, str]) -> Principal: ...


@dataclass(slots=True)
class Services:
    catalog: Catalog
    adapters: dict[str, EngineAdapter]
    authenticator: Authenticate
    limits: LimitStore
    audit: AuditSink
    gate: CapacityGate
    usage: UsageSync
    breakers: BreakerBoard  # shared with the other processes (a stand-in with one)
    slots: SlotBoard  # shared with the other processes (a stand-in with one)
    metrics: Metrics = field(default_factory=Metrics)
    max_attempts: int = 3
    score_weights: ScoreWeights = DEFAULT_WEIGHTS
    capacity_wait: float = 150.0
    leases: LeaseKeeper | None = None  # renews the limit leases of requests in flight
    recovery: Recovery | None = None  # heartbeat and checkpoints of requests in flight
    draining: Callable[[], bool] = field(default=lambda: False)  # shutting down: end streams
    clock: Callable[[], float] = field(default=time.monotonic)
    wall: Callable[[], float] = field(default=time.time)
