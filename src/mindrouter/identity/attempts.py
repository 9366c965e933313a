"""Failed key attempts, counted per client address and per key prefix, to slow guessing down.

A wrong key costs the gateway a database query and, when its prefix exists, an Argon2 run; a
client trying keys in a loop would spend both freely. Each address and each prefix gets a bucket
of `per_minute` failures that refills continuously; once one is empty, further attempts from that
address or on that prefix are refused with 429 before anything is looked up, until it refills.

Valid keys are never slowed: the authenticator answers a key it has resolved before from its
cache without asking here, so an attacker hammering a prefix (or sharing a NAT address) does not
lock out the key's owner. Counts are per process and bounded in memory (the oldest buckets are
forgotten first), which is enough to take the speed out of guessing.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

MAX_TRACKED = 50_000


class FailedAttempts:
    def __init__(
        self, per_minute: int, clock: Callable[[], float], max_tracked: int = MAX_TRACKED
    ) -> None:
        self._capacity = float(per_minute)
        self._rate = per_minute / 60.0
        self._clock = clock
        self._max = max_tracked
        # name -> (tokens left, when last updated)
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self._capacity > 0

    def _tokens(self, name: str, now: float) -> float:
        entry = self._buckets.get(name)
        if entry is None:
            return self._capacity
        tokens, at = entry
        return min(self._capacity, tokens + (now - at) * self._rate)

    def retry_after(self, names: list[str]) -> float | None:
        """Seconds until an attempt under every name in `names` is allowed again, or None when
        it is allowed now."""
        if not self.enabled:
            return None
        now = self._clock()
        wait = 0.0
        for name in names:
            tokens = self._tokens(name, now)
            if tokens < 1.0:
                wait = max(wait, (1.0 - tokens) / self._rate)
        return wait or None

    def failed(self, names: list[str]) -> None:
        if not self.enabled:
            return
        now = self._clock()
        for name in names:
            self._buckets[name] = (max(0.0, self._tokens(name, now) - 1.0), now)
            self._buckets.move_to_end(name)
        while len(self._buckets) > self._max:
            self._buckets.popitem(last=False)
