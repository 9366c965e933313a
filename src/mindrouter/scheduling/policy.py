"""The knobs of the fair queue and the one function that ranks a waiting job.

A waiting job's score is, in weighted tokens (lower goes first):

    score = counter + pending − wait_bonus_per_s × waited

- `counter` is the account's charged service (prompt at dispatch, output as it streams).
- `pending` is the output this process still expects from the account's jobs in flight (the
  estimate minus what has streamed). Output is charged only as it streams, so without this term a
  user whose streams have just started looks cheaper than they are and collects several slots in
  a row before the charges catch up.
- `waited` runs from the later of the job's arrival and the account's last dispatch on that
  model. A user who is being served regularly therefore gains almost nothing from a long queue;
  the bonus only grows for someone who is really being passed over.

The bonus is bounded: once it would reach `max_wait_bonus` (that is, after
`max_wait_bonus / wait_bonus_per_s` seconds passed over), the job is *starving* and goes ahead of
every job that is not, oldest first. Below the bound the bonus is a small tie-breaker that cannot
overturn a real difference in usage, so it does not bend the shares; the bound is a hard
guarantee that nobody waits forever, whatever their counter, even under a stream of newcomers who
each arrive with a burst allowance.

`burst_allowance` is how far below the model's floor a user who becomes active again is lifted to
(never lowered): enough to be served at the very next free slot ahead of users who are
backlogged, never enough to cash in idle time (it is one allowance, not a rate).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

from mindrouter.scheduling.job import TokenCosts


@dataclass(frozen=True, slots=True)
class FairPolicy:
    burst_allowance: float = 512.0
    wait_bonus_per_s: float = 4.0
    max_wait_bonus: float = 120.0
    costs: TokenCosts = field(default_factory=TokenCosts)

    def __post_init__(self) -> None:
        if self.burst_allowance < 0 or self.wait_bonus_per_s < 0 or self.max_wait_bonus < 0:
            raise ValueError("fair policy knobs must not be negative")

    @property
    def starvation_after(self) -> float:
        """Seconds passed over after which a job outranks every job that is not starving."""
        if self.wait_bonus_per_s == 0:
            return math.inf
        return self.max_wait_bonus / self.wait_bonus_per_s


class Rank(NamedTuple):
    """Sort key of a waiting job; the smallest rank is served first."""

    tier: int  # 0 = starving, 1 = ordinary
    score: float  # ordinary: weighted tokens; starving: minus the seconds passed over
    since: float  # the later of arrival and the account's last dispatch: older first on ties
    seq: int  # arrival order in this queue, so that equal ranks are decided the same way


class Standing(NamedTuple):
    """Where a process's best waiter for a model stands, for comparison with other processes'
    (`CapacityGate`'s arbiter): the rank without the parts that mean nothing elsewhere (this
    process's clock and arrival order), and whose it is."""

    tier: int
    score: float
    user: str

    def outranks(self, other: Standing) -> bool:
        """Whether this waiter should be served before `other` (ties are not)."""
        return (self.tier, self.score) < (other.tier, other.score)


def rank(
    policy: FairPolicy, *, counter: float, pending: float, since: float, now: float, seq: int
) -> Rank:
    waited = max(0.0, now - since)
    if waited >= policy.starvation_after:
        return Rank(0, -waited, since, seq)
    return Rank(1, counter + pending - policy.wait_bonus_per_s * waited, since, seq)
