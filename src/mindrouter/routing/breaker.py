"""Circuit breaker per backend: stop sending work to a backend that keeps failing.

closed     requests flow; consecutive failures are counted, a success resets the count
open       after `threshold` consecutive failures: no requests until `cooldown` has passed
half-open  after the cooldown exactly one request (the probe) is let through; its success closes
           the breaker, its failure opens it for another cooldown

Pure and synchronous; the clock comes in as `now`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

BreakerState = Literal["closed", "open", "half_open"]


@dataclass(slots=True)
class Breaker:
    threshold: int = 3
    cooldown: float = 30.0
    failures: int = 0
    open_until: float = 0.0
    probing: bool = False
    opened_total: int = 0

    def state(self, now: float) -> BreakerState:
        if self.failures < self.threshold:
            return "closed"
        return "open" if now < self.open_until or self.probing else "half_open"

    def allows(self, now: float) -> bool:
        """Whether a new request may go to this backend now (does not claim the probe)."""
        return self.state(now) != "open"

    def on_attempt(self, now: float) -> None:
        """A request is about to be sent; in half-open state it is the one probe."""
        if self.state(now) == "half_open":
            self.probing = True

    def on_abandoned(self) -> None:
        """An attempt ended without telling anything about the backend (the client left, the
        request was refused before it was sent): give the probe back for another request."""
        self.probing = False

    def on_success(self) -> None:
        self.failures = 0
        self.open_until = 0.0
        self.probing = False

    def on_failure(self, now: float) -> None:
        self.failures += 1
        self.probing = False
        if self.failures >= self.threshold:
            if now >= self.open_until:
                self.opened_total += 1
            self.open_until = now + self.cooldown
