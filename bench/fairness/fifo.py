"""The gateway without fair scheduling: the real capacity gate over a queue that serves arrivals
in order (per model), for the real-time comparison. Counters are still charged (the queue's
bookkeeping does it), but no decision reads them."""

from __future__ import annotations

import math
from collections.abc import Callable

from mindrouter.scheduling import FairQueue, Job


class FifoQueue(FairQueue):
    def pick(self, model: str, now: float, fits: Callable[[Job], bool] | None = None) -> Job | None:
        # The first job of each user's FIFO is that user's oldest; the oldest of those is the
        # oldest job of the model. Reaches into the queue's internals: a benchmark baseline only.
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
