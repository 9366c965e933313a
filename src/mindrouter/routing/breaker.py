"""Circuit breaker per backend: stop sending work to a backend that keeps failing.

closed     requests flow; consecutive failures are counted, a success resets the count
open       after `threshold` consecutive failures: no requests until `cooldown` has passed
half-open  after the cooldown exactly one request (the probe) is let through; its success closes
           the breaker, its failure opens it for another cooldown

Pure and synchronous; the clock comes in as `now`.

Shared between processes. A breaker also keeps what happened to it since its state was last
exchanged with the other gateway processes (`Unsent`: whether a success reset the count, and the
failures counted after that reset, which is all that consecutive-failure counting needs), and
`adopt` takes the merged state back, replaying whatever happened here meanwhile. The exchange
itself lives at the edge (`mindrouter.stores.breakers`); without it these fields are unused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

BreakerState = Literal["closed", "open", "half_open"]


@dataclass(slots=True)
class Unsent:
    """This process's events not yet pushed to the shared state, folded: a reset, then failures."""

    reset: bool = False
    failures: int = 0
    release_probe: bool = False  # this process's probe ended without a verdict

    def __bool__(self) -> bool:
        return self.reset or self.failures > 0 or self.release_probe

    def then(self, later: Unsent) -> Unsent:
        """These events followed by `later` ones, folded the same way. A probe released earlier
        stays released unless a later failure or reset ended the probe anyway."""
        if later.reset:
            return Unsent(True, later.failures, later.release_probe)
        release = later.release_probe or (self.release_probe and not later.failures)
        return Unsent(self.reset, self.failures + later.failures, release)


@dataclass(slots=True)
class Breaker:
    threshold: int = 3
    cooldown: float = 30.0
    failures: int = 0
    open_until: float = 0.0
    probing: bool = False  # a probe is running, here or (when shared) in another process
    opened_total: int = 0
    probe_here: bool = False  # the running probe is this process's
    unsent: Unsent | None = None  # None: not shared, nothing is recorded

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
            self.probe_here = True

    def on_abandoned(self) -> None:
        """An attempt ended without telling anything about the backend (the client left, the
        request was refused before it was sent): give the probe back for another request."""
        if self.probe_here and self.unsent is not None:
            self.unsent.release_probe = True
        self.probing = self.probe_here = False

    def on_success(self) -> None:
        if self.unsent is not None and (self.failures or self.probing or self.unsent):
            # Only a success that changes something is worth telling the other processes.
            self.unsent = Unsent(reset=True)
        self.failures = 0
        self.open_until = 0.0
        self.probing = self.probe_here = False

    def on_failure(self, now: float) -> None:
        if self.unsent is not None:
            self.unsent.failures += 1
            self.unsent.release_probe = False
        self._count_failures(1, now)
        self.probing = self.probe_here = False

    def _count_failures(self, n: int, now: float) -> None:
        before = self.failures
        self.failures += n
        if self.failures >= self.threshold:
            if before < self.threshold or now >= self.open_until:
                self.opened_total += 1
            self.open_until = now + self.cooldown

    # -- shared state -----------------------------------------------------------------------------

    def share(self) -> None:
        """Start recording events for an exchange with other processes."""
        if self.unsent is None:
            self.unsent = Unsent()

    def take_unsent(self) -> Unsent:
        """The events to push now; recording starts afresh."""
        taken = self.unsent or Unsent()
        self.unsent = Unsent()
        return taken

    def give_back(self, taken: Unsent) -> None:
        """An exchange failed: its events go out again, before the ones recorded since."""
        self.unsent = taken.then(self.unsent or Unsent())

    def adopt(
        self, failures: int, open_in: float, probing: bool, opened_total: int, now: float
    ) -> None:
        """The merged state as the exchange returned it (`open_in`: seconds until the cooldown
        ends, relative to the shared clock), then the events recorded here since it was sent."""
        self.failures = failures
        self.open_until = now + open_in if open_in > 0 else now
        self.opened_total = opened_total
        self.probing = probing or self.probe_here
        later = self.unsent
        if later is None:
            return
        if later.reset:
            self.failures = 0
            self.open_until = 0.0
            self.probing = self.probe_here
        if later.failures:
            self._count_failures(later.failures, now)
            self.probing = self.probe_here = False
