"""The local half of the shared fair-share state: a mirror the queue reads without waiting.

The mirror holds, per (model, user) account, the value this process currently believes in (the
last value read from the shared store with this process's later writes applied on top) and the
writes not yet pushed. Per model it holds the floor the same way.

Pending writes are kept per account as one composite operation. A charge (x → x + a) and a lift
(x → max(x, b)) compose, in any number and order, into one operation of the form

    x → max(x + add, at_least)

(charge c after it: max(x + add + c, at_least + c); lift b after it: max(x + add, max(at_least,
b))). So however many chunks a stream charged between two exchanges, the push is one operation
per account, and it replays this process's writes in exactly the order they were made, applied
to the shared value of the moment rather than to this process's possibly stale copy: a lift
raises the real counter to the floor, it does not add the gap this process happened to see.

Reads never wait and never fail. An account this process has not seen yet reads 0.0 (as in
`InMemoryFairShareState`) and is asked for at the next exchange. Accounts nobody here wrote for
`forget_after` seconds are dropped, so the set pulled at each exchange stays the set of users
active around this process, not everyone who ever used the cluster.

Pending output (the weighted output still expected from running jobs) is not a counter: each
process publishes its own part as absolute values, under a key of its own that expires unless
refreshed, and reads the others' parts back. A process that dies mid-stream therefore stops
counting after the expiry instead of leaving its users' pending output behind for ever. The
mirror keeps this process's part (`add_pending`), hands all of it out at each exchange, and
answers `pending_many` with its own part plus the others' as last pulled.

Pure and synchronous; `redis_state.py` does the I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from mindrouter.scheduling.state import PENDING_EPSILON

Account = tuple[str, str]  # (model, user)


@dataclass(slots=True)
class Pending:
    """x → max(x + add, at_least); `at_least` is -inf while no lift is part of it."""

    add: float = 0.0
    at_least: float = -math.inf

    def charge(self, amount: float) -> None:
        self.add += amount
        self.at_least += amount  # -inf stays -inf

    def lift(self, to: float) -> None:
        self.at_least = max(self.at_least, to)

    def apply(self, value: float) -> float:
        return max(value + self.add, self.at_least)

    def then(self, later: Pending) -> Pending:
        """This operation followed by `later`, as one operation."""
        return Pending(self.add + later.add, max(self.at_least + later.add, later.at_least))


@dataclass(slots=True)
class Batch:
    """What one exchange pushes, and which values it asks for in return."""

    ops: dict[Account, Pending]
    floors: dict[str, float]  # model -> raise the shared floor to at least this
    pull: list[Account]
    pull_floors: list[str]  # also the models whose other processes' pending output to read
    # model -> user -> this process's pending output, for every model it has (or just had) some
    publish: dict[str, dict[str, float]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.ops or self.floors or self.pull or self.pull_floors or self.publish)


@dataclass(slots=True)
class Pulled:
    """The shared values after an exchange: None for an account or floor never written."""

    counters: dict[Account, float | None] = field(default_factory=dict)
    floors: dict[str, float | None] = field(default_factory=dict)
    # model -> user -> the other processes' pending output, summed
    pending: dict[str, dict[str, float]] = field(default_factory=dict)


class LocalMirror:
    def __init__(self, forget_after: float = 600.0) -> None:
        if forget_after <= 0:
            raise ValueError("forget_after must be positive")
        self.forget_after = forget_after
        self._view: dict[str, dict[str, float]] = {}  # model -> user -> value read by the queue
        self._ops: dict[Account, Pending] = {}
        self._floor_view: dict[str, float] = {}
        self._floor_ops: dict[str, float] = {}
        self._wanted: set[Account] = set()  # read while unknown: pull at the next exchange
        self._models: set[str] = set()
        # When this process last wrote (or first pulled) each account, stamped at the exchanges
        # (reading a clock on every streamed chunk would cost more than the charge itself).
        self._written: dict[Account, float] = {}
        self._now = 0.0
        self._own_pending: dict[str, dict[str, float]] = {}  # model -> user -> this process's
        self._emptied: set[str] = set()  # models whose pending output here just went to none
        self._others_pending: dict[str, dict[str, float]] = {}

    # -- the FairShareState reads and writes -----------------------------------------------------

    def get(self, model: str, user: str) -> float:
        value = self._view.get(model, {}).get(user)
        if value is None:
            self._want(model, user)
            return 0.0
        return value

    def get_many(self, model: str, users: Iterable[str]) -> dict[str, float]:
        view = self._view.get(model, {})
        out: dict[str, float] = {}
        for user in users:
            value = view.get(user)
            if value is None:
                self._want(model, user)
                value = 0.0
            out[user] = value
        return out

    def charge(self, model: str, user: str, amount: float) -> float:
        acct = (model, user)
        self._pending(acct).charge(amount)
        return self._set(acct, self._current(acct) + amount)

    def lift(self, model: str, user: str, to: float) -> float:
        acct = (model, user)
        self._pending(acct).lift(to)
        return self._set(acct, max(self._current(acct), to))

    def _pending(self, acct: Account) -> Pending:
        """The account's writes not yet pushed, started empty."""
        op = self._ops.get(acct)
        if op is None:
            op = self._ops[acct] = Pending()
        return op

    def floor(self, model: str) -> float:
        value = self._floor_view.get(model)
        if value is None:
            self._models.add(model)
            return 0.0
        return value

    def raise_floor(self, model: str, to: float) -> float:
        self._models.add(model)
        if to > self._floor_ops.get(model, -math.inf):
            self._floor_ops[model] = to
        value = max(self._floor_view.get(model, 0.0), to)
        self._floor_view[model] = value
        return value

    def add_pending(self, model: str, user: str, amount: float) -> None:
        self._models.add(model)
        by_user = self._own_pending.setdefault(model, {})
        value = by_user.get(user, 0.0) + amount
        if value > PENDING_EPSILON:
            by_user[user] = value
            return
        by_user.pop(user, None)
        if not by_user:
            del self._own_pending[model]
            self._emptied.add(model)

    def pending_many(self, model: str, users: Iterable[str]) -> dict[str, float]:
        self._models.add(model)  # read the other processes' part from the next exchange on
        own = self._own_pending.get(model, {})
        others = self._others_pending.get(model, {})
        return {u: own.get(u, 0.0) + others.get(u, 0.0) for u in users}

    def forget_others_pending(self) -> None:
        """The other processes' pending output is too old to believe (no exchange for longer
        than it lives in the shared store): count only this process's until the next one."""
        self._others_pending = {}

    # -- exchanges -------------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Writes (accounts and floors) not yet pushed."""
        return len(self._ops) + len(self._floor_ops)

    @property
    def busy(self) -> bool:
        """Whether the next exchange has something to push or to ask for the first time."""
        return bool(
            self._ops or self._floor_ops or self._own_pending or self._emptied or self._wanted
        )

    @property
    def in_use(self) -> bool:
        """Whether an exchange would pull anything (an account or a model is in use here)."""
        return bool(self._view or self._models)

    def take_batch(self, now: float) -> Batch:
        """Hands out the pending writes (they are no longer pending) and what to pull back.

        Accounts idle here for `forget_after` are dropped first; they are read again from the
        shared store the next time this process asks for them.
        """
        self._now = now
        written = self._written
        for acct in self._ops:  # every write leaves an operation: these were written since
            written[acct] = now
        horizon = now - self.forget_after
        for acct in [a for a, at in written.items() if at < horizon]:
            del written[acct]
            model, user = acct
            view = self._view.get(model)
            if view is not None:
                view.pop(user, None)
                if not view:
                    del self._view[model]
        ops, self._ops = self._ops, {}
        floors, self._floor_ops = self._floor_ops, {}
        pull = [(m, u) for m, users in self._view.items() for u in users]
        pull += [a for a in self._wanted if a[1] not in self._view.get(a[0], {})]
        self._wanted.clear()
        # All of this process's pending output, every time: publishing refreshes its expiry.
        publish = {m: dict(users) for m, users in self._own_pending.items()}
        for model in self._emptied:
            publish.setdefault(model, {})
        self._emptied.clear()
        return Batch(ops, floors, pull, sorted(self._models), publish)

    def merge(self, pulled: Pulled) -> None:
        """An exchange succeeded: takes the shared values, with the writes made since applied."""
        for acct, shared in pulled.counters.items():
            model, user = acct
            value = 0.0 if shared is None else shared
            later = self._ops.get(acct)
            if later is not None:
                value = later.apply(value)
            self._view.setdefault(model, {})[user] = value
            self._written.setdefault(acct, self._now)
        for model, shared_floor in pulled.floors.items():
            value = 0.0 if shared_floor is None else shared_floor
            value = max(value, self._floor_ops.get(model, -math.inf))
            self._floor_view[model] = value
        self._others_pending = pulled.pending

    def snapshot(self) -> Mapping[str, Mapping[str, float]]:
        """This process's current view, model -> user -> counter (for tests and the admin)."""
        return {m: dict(users) for m, users in self._view.items()}

    # -- internals -------------------------------------------------------------------------------

    def _want(self, model: str, user: str) -> None:
        self._models.add(model)
        self._wanted.add((model, user))

    def _current(self, acct: Account) -> float:
        return self._view.get(acct[0], {}).get(acct[1], 0.0)

    def _set(self, acct: Account, value: float) -> float:
        self._models.add(acct[0])
        self._view.setdefault(acct[0], {})[acct[1]] = value
        return value
