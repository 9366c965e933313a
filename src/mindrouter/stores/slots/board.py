"""Backend slots shared by every gateway process and replica, and the arbiter of free slots.

Without this, each process counts only its own requests against a backend's `max_concurrent`:
two replicas would each fill every backend, and each would hand its free slots to its own best
waiter even when a more deserving user waits at the other replica, which bends the fair shares.

The board. Every process publishes, in one hash in Redis that expires `ttl` after its last
exchange, that it is alive, its open requests per backend and, for each model it has requests
waiting for, where its most deserving waiter stands (`Standing`: tier and score of the fair
queue's rank, and whose it is). One Lua script per exchange replaces this process's hash and
returns every other live process's. A process that dies stops counting after `ttl` (2 s); one
that stops withdraws at once.

Free slots. After each exchange every process divides each backend's free slots between the
live processes in the same way, from the same published views: one slot each in turn, first
among the processes with requests waiting for one of the backend's models (best waiter first),
among all of them (by id) when nobody waits. `BackendState.others_in_flight` holds the others'
open requests plus the free slots that are theirs until the next exchange, so the capacity
check and the backend score count the whole load, and two processes do not fill the same free
slot at the same moment. A process that uses up its part of a backend exchanges at once. For
one `interval` after requests start waiting at a process, it leaves a process that nobody waits
at its part of the division by id (that process exchanges every `interval` and may take it
meanwhile); a process that waits while free slots go elsewhere takes one after `defer_limit`
(views that disagree, or a process that stopped taking anything).

The arbiter. A slot given back here is this process's to hand on, at once. Before the gate gives
it to its own best waiter it calls `defer`: when another process's best waiter for that model
comes first (it outranks this one, or ties with it and that process has the smaller id), the
slot is left for up to `defer_limit` (50 ms); at the next exchange it is free, and as the best
waiter's process gets it first, that process takes it, its gate deciding again after every
exchange. Each side compares the standings both published (the live one only for a waiter not
yet published), so both agree on who comes first. Ranks are comparable across processes because
the counters and the pending output they are made of are shared (the fair-share state); the
wait bonus is a duration, whoever measures it. If the other process does not take the slot in
time (it is gone, or its view differs), the slot goes to the local waiter: a slot is never held
for longer than the deferral.

Freshness. While any process has requests waiting, exchanges run every `busy_interval` (5 ms)
and at once when a slot is taken or given back here (never closer than `min_gap`); with nobody
waiting they run every `interval` (50 ms), and a taken slot wakes them only when it fills a
backend: a deployment with room to spare costs no Redis traffic per request. A process with no
request open and nobody waiting anywhere exchanges every `idle_interval` (0.5 s: well inside
`ttl`, so it stays on the board), and its first slot taken once such a pause has outlasted
`interval` exchanges at once (at most one exchange per `interval`, as without the pause);
an idle gateway thus costs two Redis round trips a second here, not twenty. Views are that
stale, so when two processes' views disagree (one exchanged just before the other changed) both
may take a backend's last slot: it then runs one request above its limit for as long as that
takes (its engine queues it), and no further slot is handed out until the load is back under
the limit (`overfull` counts the exchanges that saw a backend above its limit).

Redis unreachable: each process keeps the other processes' last counts for `ttl`, then counts
only its own requests (each process may then fill every backend, as without Redis) and decides
alone; exchanges resume when Redis answers.

Keys and the script: `lua.py`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mindrouter.routing.catalog import BackendState
from mindrouter.scheduling import Standing
from mindrouter.stores.ports import Gate
from mindrouter.stores.redis_client import text_of
from mindrouter.stores.redis_pipe import Script
from mindrouter.stores.shared import RedisLink, SharedStore, StoreWords
from mindrouter.stores.slots import lua
from mindrouter.stores.slots.division import best_by_model, order, part, turns

_HANDOVER_TURNS = 8  # event-loop turns an exchange waits for a chosen waiter to take its slot
_EXCHANGE = Script(lua.EXCHANGE)


@dataclass(frozen=True, slots=True)
class SlotTiming:
    """How often the slot board exchanges with Redis and how long what it publishes holds, in
    seconds."""

    interval: float = 0.05  # between exchanges while requests run here
    busy_interval: float = 0.005  # while some process has requests waiting for a slot
    idle_interval: float = 0.5  # while nothing runs or waits here
    min_gap: float = 0.002  # the least time between two exchanges
    # How long a free slot is left to a more deserving waiter of another process.
    defer_limit: float = 0.05
    ttl: float = 2.0  # a process's entry outlives its last exchange by this much

    def __post_init__(self) -> None:
        knobs = (self.interval, self.busy_interval, self.idle_interval, self.defer_limit, self.ttl)
        if not all(k > 0 for k in knobs) or self.min_gap < 0:
            raise ValueError("the slot board's intervals and limits must be positive")


class SlotsUnavailable(Exception):
    """Redis did not complete an exchange."""


class SharedSlots(SharedStore):
    """The slot board of `backends`, kept in step with every other process through Redis."""

    shared = True
    words = StoreWords("slots:", "slot board", "backend slots", "counted per process")
    scripts = (_EXCHANGE,)

    def __init__(
        self, link: RedisLink, backends: Sequence[BackendState], timing: SlotTiming = SlotTiming()
    ) -> None:
        super().__init__(link, interval=timing.interval, min_gap=timing.min_gap)
        self._backends = list(backends)
        self.busy_interval = timing.busy_interval
        # Never so long that this process's entry on the board expires between two exchanges.
        self.idle_interval = max(timing.interval, min(timing.idle_interval, timing.ttl / 3))
        self._idle = False  # the pause running now is the idle one
        self.min_gap = timing.min_gap
        self.defer_limit = timing.defer_limit
        self.ttl = timing.ttl
        self._gate: Gate | None = None
        self._others_best: dict[str, tuple[Standing, str]] = {}  # model -> (best, whose)
        self._mine_best: dict[str, Standing] = {}
        self._deferring: dict[str, float] = {}  # model -> when its free slot was first left
        self._passed_over: dict[str, float] = {}  # backend -> since when free slots go elsewhere
        self._waiting_since = -float("inf")  # when requests last began waiting here
        self.overfull = 0  # backends seen above their max_concurrent, summed over exchanges

    async def track(self, backends: Sequence[BackendState]) -> None:
        """Counts the slots of `backends` from now on (the catalog changed)."""
        async with self._lock:
            self._backends = list(backends)

    def attach(self, gate: Gate) -> None:
        """The gate whose waiters this process publishes and which decides after exchanges."""
        self._gate = gate

    @property
    def contended(self) -> bool:
        """Whether some process, this one included, has requests waiting for a slot."""
        return bool(self._others_best or self._mine_best or self._deferring)

    def _pause(self) -> float:
        if self.contended:
            self._idle = False
            return self.busy_interval
        self._idle = not any(b.in_flight for b in self._backends)
        return self.idle_interval if self._idle else self.interval

    def others_best(self) -> dict[str, Standing]:
        """model -> the most deserving waiter of the other processes, as last exchanged."""
        return {model: standing for model, (standing, _) in self._others_best.items()}

    # -- the request path ---------------------------------------------------------------------

    def changed(self, backend: BackendState) -> None:
        """A slot of `backend` was taken or given back here: tell the others at once if anyone
        waits, if the backend is full (the others must not fill it further), or if this is the
        first slot taken during an idle pause that has outlasted `interval` (the others have not
        heard from here as lately as they would have without the pause)."""
        stale = self._idle and self._silent_for() >= self.interval
        if self.contended or backend.full or stale:
            self._idle = False
            self._loop.poke()

    def defer(self, model: str, best_here: Standing, now: float) -> float:
        entry = self._others_best.get(model)
        published = self._mine_best.get(model)
        if published is not None and published.user == best_here.user:
            # Compare what both sides published: the other process compares the same pair, so
            # exactly one of the two takes the slot (their live scores drift between exchanges).
            best_here = published
        since = self._deferring.get(model)
        # A slot once left for the others stays theirs until the deferral ends, whoever arrives
        # here meanwhile: the other process may be taking it right now.
        kept = since is not None and entry is not None
        if not kept and (entry is None or order(best_here, self._me) <= order(*entry)):
            self._deferring.pop(model, None)
            return 0.0
        if since is None:
            since = self._deferring[model] = now
            self._loop.poke()  # the others learn at once that the slot is free
        left = since + self.defer_limit - now
        if left <= 0:
            del self._deferring[model]
            return 0.0
        return left

    # -- the exchange ----------------------------------------------------------------------------

    async def _leave(self) -> None:
        """Withdraws this process from the board: its slots are free for the others at once."""
        try:
            async with self._lock:
                await self._exchange({}, {}, publish=False)
        except SlotsUnavailable as exc:
            self._outage.failed(str(exc))

    async def sync(self) -> bool:
        """One exchange: publish this process's slots and best waiters, adopt the others'. True
        if Redis answered; errors are logged, never raised."""
        async with self._lock:
            gate = self._gate
            if gate is not None:
                await _handover(gate)
            best = gate.best_waiting() if gate is not None else {}
            slots = {b.name: b.in_flight for b in self._backends if b.in_flight > 0}
            try:
                others = await self._exchange(slots, best)
            except SlotsUnavailable as exc:
                self._outage.failed(str(exc))
                if self._silent_for() > self.ttl:
                    self._forget_others()  # in Redis their entries have expired by now too
                return False
            self._adopt(others, best)
            self._answered()
        if gate is not None:
            # Capacity may have freed elsewhere, or the others' best waiters changed.
            for model in best:
                gate.release(model)
        return True

    # -- internals ------------------------------------------------------------------------------

    def _adopt(self, others: Mapping[str, lua.Seen], best: dict[str, Standing]) -> None:
        """Takes in an exchange's answer: the others' slots and best waiters."""
        if best and not self._mine_best:
            self._waiting_since = self._clock()
        for b in self._backends:
            b.others_in_flight = self._others_share(b, others, best)
            if b.load > b.config.max_concurrent:
                self.overfull += 1
        self._others_best = best_by_model({p: seen.best for p, seen in others.items()})
        self._mine_best = best
        # A deferral whose window has passed is over, taken or not: it no longer makes this
        # process contended, nor dates the next one.
        now = self._clock()
        for model, since in list(self._deferring.items()):
            if now - since >= self.defer_limit or model not in self._others_best:
                del self._deferring[model]

    def _forget_others(self) -> None:
        for b in self._backends:
            b.others_in_flight = 0
        self._others_best = {}
        self._deferring.clear()
        self._passed_over.clear()

    def _others_share(
        self, b: BackendState, others: Mapping[str, lua.Seen], best: Mapping[str, Standing]
    ) -> int:
        """What `b`'s load is, for this process, without its own requests: the others' open
        requests, plus the free slots that go to the others until the next exchange (divided
        as `division.py` says)."""
        taken = sum(seen.slots.get(b.name, 0) for seen in others.values())
        free = b.config.max_concurrent - taken - b.in_flight
        if free <= 0 or not others:
            self._passed_over.pop(b.name, None)
            return taken
        views: dict[str, Mapping[str, Standing]] = {p: seen.best for p, seen in others.items()}
        views[self._me] = best
        waiting, by_id = turns(views, b.serves)
        me = self._me
        if me not in waiting:
            self._passed_over.pop(b.name, None)
            return taken + free - (part(free, by_id, me) if not waiting else 0)
        mine = part(free, waiting, me)
        if self._clock() - self._waiting_since < self.interval and any(
            part(free, by_id, p) for p in by_id if p not in waiting
        ):
            # Waiting only just began here, and a process nobody waits at may still take its
            # part of the division by id until its next exchange (within one `interval`):
            # leave those parts alone until then.
            mine = min(mine, part(free, by_id, me))
        if mine:
            self._passed_over.pop(b.name, None)
        else:
            # Waiting here, slots free, none of them ours: the views may disagree (a near tie
            # seen in two orders). Past the deferral limit, take one anyway.
            since = self._passed_over.setdefault(b.name, self._clock())
            if self._clock() - since >= self.defer_limit:
                mine = 1
        return taken + free - mine

    async def _exchange(
        self, slots: dict[str, int], best: dict[str, Standing], publish: bool = True
    ) -> dict[str, lua.Seen]:
        args = lua.arguments(
            self._prefix,
            self._me,
            ttl_ms=int(self.ttl * 1000),
            slots=slots,
            best=best,
            publish=publish,
        )
        async with self._round_trip(SlotsUnavailable, lua.UnreadableReply):
            reply = await _EXCHANGE.call(self._pipe, [], args)
            return lua.parse([text_of(v) for v in reply])


async def _handover(gate: Gate) -> None:
    """Lets a slot given back here reach its local waiter first. It is usually handed over at
    once, but the waiter takes it on its next turn: publishing before then would show the slot
    free to the others, and two would take it."""
    for _ in range(_HANDOVER_TURNS):
        if not gate.handing_over:
            break
        await asyncio.sleep(0)
