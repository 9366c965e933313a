"""Graceful shutdown: what SIGTERM starts, and when streams still open must end.

`begin()` is called on SIGTERM: `/readyz` answers 503 `draining` from then on, the server stops
accepting connections, and requests in flight go on. `grace` seconds later `expired()` turns
true, and every stream still open ends at its next event with the dialect's in-band error
(its audit record completed as `error`, its tokens so far charged), so the process can finish
its clean-up and exit 0 instead of cutting connections.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Drain:
    def __init__(self, grace: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.grace = grace
        self._clock = clock
        self._deadline: float | None = None

    @property
    def started(self) -> bool:
        return self._deadline is not None

    def begin(self) -> None:
        if self._deadline is None:
            self._deadline = self._clock() + self.grace

    def expired(self) -> bool:
        return self._deadline is not None and self._clock() >= self._deadline
