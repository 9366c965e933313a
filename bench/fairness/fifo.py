"""The gateway without fair scheduling, for the real-time comparison: the real capacity gate over
a queue that serves arrivals in order (FifoQueue), or that lets the users with waiting requests
take turns, one request each, weights ignored (RoundRobinQueue); both per model. Counters are
still charged (the queue's bookkeeping does it), but no decision reads them. Both reach into the
fair queue's internals: benchmark baselines only."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from mindrouter.scheduling import FairQueue, Job


class FifoQueue(FairQueue):
    def pick(self, model: str, now: float, fits: Callable[[Job], bool] | None = None) -> Job | None:
        # The first job of each user's FIFO is that user's oldest; the oldest of those is the
        # oldest job of the model.
        per_user = self._waiting.get(model)
        if not per_user:
            return None
        best: Job | None = None
        best_seq = math.inf
        for fifo in per_user.values():
            job = next((j for j in fifo.values() if fits is None or fits(j)), None)
            if job is None:
                continue
            seq = self._seq[job.id]
            if seq < best_seq:
                best, best_seq = job, seq
        return best


class RoundRobinQueue(FairQueue):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._turns = 0
        self._last_turn: dict[tuple[str, str], int] = {}  # (model, user) -> turn last served

    def pick(self, model: str, now: float, fits: Callable[[Job], bool] | None = None) -> Job | None:
        # The user served longest ago goes next (never served: first, in arrival order).
        per_user = self._waiting.get(model)
        if not per_user:
            return None
        best: Job | None = None
        best_key = (math.inf, math.inf)
        for user, fifo in per_user.items():
            job = next((j for j in fifo.values() if fits is None or fits(j)), None)
            if job is None:
                continue
            key = (float(self._last_turn.get((model, user), -1)), float(self._seq[job.id]))
            if key < best_key:
                best, best_key = job, key
        return best

    def on_dispatch(self, job: Job, now: float) -> None:
        super().on_dispatch(job, now)
        self._turns += 1
        self._last_turn[(job.model, job.user)] = self._turns
