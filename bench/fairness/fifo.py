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


class _BaselineQueue(FairQueue):
    """A queue that ranks each user's first job (the first `fits` accepts) by its own key."""

    def _key(self, model: str, user: str, job: Job) -> tuple[float, ...]:
        raise NotImplementedError

    def pick(self, model: str, now: float, fits: Callable[[Job], bool] | None = None) -> Job | None:
        per_user = self._waiting.get(model)
        if not per_user:
            return None
        best: Job | None = None
        best_key: tuple[float, ...] = (math.inf,)
        for user, fifo in per_user.items():
            job = next((j for j in fifo.values() if fits is None or fits(j)), None)
            if job is None:
                continue
            key = self._key(model, user, job)
            if key < best_key:
                best, best_key = job, key
        return best


class FifoQueue(_BaselineQueue):
    def _key(self, model: str, user: str, job: Job) -> tuple[float, ...]:
        # The oldest of the users' first jobs is the oldest job of the model.
        return (float(self._seq[job.id]),)


class RoundRobinQueue(_BaselineQueue):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._turns = 0
        self._last_turn: dict[tuple[str, str], int] = {}  # (model, user) -> turn last served

    def _key(self, model: str, user: str, job: Job) -> tuple[float, ...]:
        # The user served longest ago goes next (never served: first, in arrival order).
        return (float(self._last_turn.get((model, user), -1)), float(self._seq[job.id]))

    def on_dispatch(self, job: Job, now: float) -> None:
        super().on_dispatch(job, now)
        self._turns += 1
        self._last_turn[(job.model, job.user)] = self._turns
