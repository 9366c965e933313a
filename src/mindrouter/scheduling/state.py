"""Where the fair-share counters live: a small port and the in-process implementation.

Counters are kept per fair-share account, the pair (model, user). Capacity is per model (the
gate is told per model whether a backend has room), so a counter only arbitrates the capacity of
one model: heavy use of one model's backends neither delays a user on another model nor lets a
user who idled on one model bank credit there while busy elsewhere.

A counter holds weighted service: tokens × token cost ÷ the job's weight. Each model also has a
floor, the "virtual time" of that model: the highest value ever seen of the lowest counter among
its active users. A user who becomes active again is lifted relative to it (see `queue.py`).

Each account also has its *pending* output: the weighted output still expected from its jobs
running now (the queue ranks by counter + pending, see `policy.py`). Each process changes its
own part (`add_pending`); `pending_many` reads the sum over every process, so a replica sees
that another has just given a user a slot before that stream's tokens are charged.

Every counter write is commutative: `charge` adds (corrections may add a negative amount),
`lift` and `raise_floor` take a maximum. That is what lets a shared implementation (Redis: one
exchange script) apply writes from several gateway processes in any order and still agree. The
port is synchronous on purpose: a decision reads one counter per waiting user and must stay well
under a millisecond, so a networked implementation is expected to read from a local mirror it
keeps fresh and to push its writes through.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

# Floats drift: an account whose pending output is this close to zero owes nothing.
PENDING_EPSILON = 1e-9


class FairShareState(Protocol):
    def get(self, model: str, user: str) -> float:
        """The account's counter; 0.0 for an account never seen."""
        ...

    def get_many(self, model: str, users: Iterable[str]) -> dict[str, float]:
        """Counters of several users of one model, in one round trip where that matters."""
        ...

    def charge(self, model: str, user: str, amount: float) -> float:
        """Adds `amount` (weighted service; negative for a refund) and returns the new value."""
        ...

    def lift(self, model: str, user: str, to: float) -> float:
        """Raises the counter to at least `to` (never lowers it) and returns the new value."""
        ...

    def floor(self, model: str) -> float:
        """The model's virtual time; 0.0 before anyone was active on it."""
        ...

    def raise_floor(self, model: str, to: float) -> float:
        """Raises the model's virtual time to at least `to` and returns the new value."""
        ...

    def add_pending(self, model: str, user: str, amount: float) -> None:
        """Changes this process's pending output for the account by `amount` (positive when a
        job is dispatched, negative as it streams and when it ends); a total that drifts to
        within `PENDING_EPSILON` of zero is zero."""
        ...

    def pending_many(self, model: str, users: Iterable[str]) -> dict[str, float]:
        """Pending output of several accounts of one model, summed over every process."""
        ...


class InMemoryFairShareState:
    """One process's counters: plain dictionaries, nothing ever expires.

    An account that stops being used keeps its last value, which is harmless: when it comes back
    it is lifted to the floor of its model, so an old value can only be too low (and is lifted)
    or higher than everyone's (and is fair to keep, it reflects recent heavy use).
    """

    def __init__(self) -> None:
        self._counters: dict[str, dict[str, float]] = {}  # model -> user -> counter
        self._floors: dict[str, float] = {}
        self._pending: dict[str, dict[str, float]] = {}  # model -> user -> pending output

    def get(self, model: str, user: str) -> float:
        return self._counters.get(model, {}).get(user, 0.0)

    def get_many(self, model: str, users: Iterable[str]) -> dict[str, float]:
        counters = self._counters.get(model, {})
        return {u: counters.get(u, 0.0) for u in users}

    def charge(self, model: str, user: str, amount: float) -> float:
        counters = self._counters.setdefault(model, {})
        value = counters.get(user, 0.0) + amount
        counters[user] = value
        return value

    def lift(self, model: str, user: str, to: float) -> float:
        counters = self._counters.setdefault(model, {})
        value = max(counters.get(user, 0.0), to)
        counters[user] = value
        return value

    def floor(self, model: str) -> float:
        return self._floors.get(model, 0.0)

    def raise_floor(self, model: str, to: float) -> float:
        value = max(self._floors.get(model, 0.0), to)
        self._floors[model] = value
        return value

    def add_pending(self, model: str, user: str, amount: float) -> None:
        by_user = self._pending.setdefault(model, {})
        value = by_user.get(user, 0.0) + amount
        if value > PENDING_EPSILON:
            by_user[user] = value
        else:
            by_user.pop(user, None)

    def pending_many(self, model: str, users: Iterable[str]) -> dict[str, float]:
        by_user = self._pending.get(model, {})
        return {u: by_user.get(u, 0.0) for u in users}
