"""An outage of a shared store, as a background exchange sees it: logged when it starts and when
it ends, not once per failed attempt in between."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from mindrouter.observability.logging import log


class Outage:
    def __init__(self, down: str, back: str, clock: Callable[[], float] = time.monotonic) -> None:
        self._down_message = down  # logged as a warning when exchanges start failing
        self._back_message = back  # logged when one succeeds again
        self._clock = clock
        self.since: float | None = None

    @property
    def ongoing(self) -> bool:
        return self.since is not None

    def failed(self, reason: str, **context: Any) -> None:
        if self.since is None:
            self.since = self._clock()
            log.warning(self._down_message, reason=reason, **context)

    def succeeded(self) -> None:
        if self.since is not None:
            log.info(self._back_message, after_s=round(self._clock() - self.since, 3))
            self.since = None
