"""The capacity gate: asyncio waiting around the fair queue, one wake-up per freed slot.

    await gate.acquire(job, has_capacity)   # returns when `job` may take a slot on its model
    backend.in_flight += 1                  # take the slot before the next await (see below)
    ...                                     # stream, calling gate.queue.charge(job, n) per batch
    backend.in_flight -= 1
    gate.finish(job, actual_prompt, actual_output)   # corrects the charges, passes the slot on

Capacity is per model. The caller's `has_capacity(model, requires)` says whether some backend
serving the model, with every feature in `requires` (a job's `requires`; empty: any backend), has
room right now; the gate only asks it for the model whose slot it is handing out, so a model
whose backends are free is never held up by another model's backlog. A job that needs a feature
no free backend has does not hold the slot up either: the best job that can use it takes it.

The priority gate. A slot is handed out by one decision: the fair queue's best waiter for that
model gets it and only that waiter's future is resolved (`wakeups` counts them), so there is no
thundering herd of waiters re-checking capacity. A new arrival goes through the same decision: it
dispatches at once only if capacity is free and it is itself the best job for the model, so it
never jumps ahead of anyone who waits.

Hand-over. After a waiter is woken, no further slot of that model is handed out until the woken
task has run and returned from `acquire` (`_handoff`); the next decision is scheduled right after
it (`call_soon`), which is why the caller must take its backend slot before its next await: the
capacity check must already see it. Without this, two decisions in the same tick would both see
the one free slot. Several free slots are therefore filled one decision per event-loop turn.

A slot that frees without `release` being called (a backend comes back, another process lets
go) is noticed by polling: waiting tasks re-check their model at most once per `poll_interval`.

Several processes. With an `arbiter` (the shared slot board, when gateway processes share
backends through Redis), a free slot is first offered to the deployment: before handing it to its
own best waiter, the gate asks the arbiter whether another process has a more deserving one
waiting for the same model. If so it leaves the slot alone for at most the arbiter's deferral, so
the other process can take it, and decides again when the arbiter has news (`release`) or when the
deferral ends: a slot is never left idle for longer than that, even if the other process vanished.

A waiter gives up after `timeout` seconds (default 150) with `TimeoutError`,
which the pipeline reports as Overloaded. Priorities need no periodic recomputation: every
decision ranks the waiters afresh at the current time.

Work that must finish before a request may use its slot (its audit record, committed before any
GPU work) can run while the request waits, so the job takes its place in the queue at once: the
caller takes its slot when chosen and finishes that work before using it. `acquire(...,
ready=future)` watches the work meanwhile: if it fails while the job waits, the job is withdrawn
and `acquire` raises what it raised.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from typing import Any, Protocol

from mindrouter.scheduling.job import Job
from mindrouter.scheduling.policy import Standing
from mindrouter.scheduling.queue import FairQueue

DEFAULT_TIMEOUT = 150.0
ANY: frozenset[str] = frozenset()  # no feature required: any backend of the model will do
HasCapacity = Callable[[str, frozenset[str]], bool]


class NoLongerServed(LookupError):
    """The job's model lost every backend that served it while the job waited."""


def _succeeded(fut: asyncio.Future[Any]) -> bool:
    return fut.done() and not fut.cancelled() and fut.exception() is None


class Arbiter(Protocol):
    def defer(self, model: str, best_here: Standing, now: float) -> float:
        """Seconds to leave a free slot of `model` for another process's more deserving
        waiter before giving it to `best_here`; 0 to give it now."""
        ...


class CapacityGate:
    def __init__(
        self,
        queue: FairQueue,
        *,
        clock: Callable[[], float] = time.monotonic,
        default_timeout: float = DEFAULT_TIMEOUT,
        poll_interval: float = 1.0,
        arbiter: Arbiter | None = None,
    ) -> None:
        self.queue = queue
        self.arbiter = arbiter
        self.default_timeout = default_timeout
        self.poll_interval = poll_interval
        self.wakeups = 0  # waiters woken by a decision: exactly one per slot handed out
        self.deferrals = 0  # times a free slot was left for a better waiter of another process
        self._clock = clock
        self._waiters: dict[str, asyncio.Future[None]] = {}
        self._checks: dict[str, HasCapacity] = {}
        self._handoff: dict[str, int] = {}
        self._last_poll: dict[str, float] = {}
        self._rechecks: dict[str, asyncio.TimerHandle] = {}

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    # The deadline is part of the fair wait (150 s by default), so it is a
    # parameter; wrapping the call in asyncio.timeout works as well and withdraws the job too.
    async def acquire(
        self,
        job: Job,
        has_capacity: HasCapacity,
        timeout: float | None = None,  # noqa: ASYNC109
        ready: asyncio.Future[Any] | None = None,
        served: Callable[[], bool] | None = None,
    ) -> None:
        """Waits until `job` is the chosen one for a free slot of its model, then returns with
        the job dispatched (its prompt charged). `job.enqueued_at` must come from the same clock
        as the gate's. Raises TimeoutError after `timeout` seconds with the job withdrawn, or
        what `ready` raised if it failed while the job waited (the job withdrawn too), or
        `NoLongerServed` when `served()`, asked at each poll, says no backend serves the model
        any more (an admin disabled or removed them while the job waited)."""
        model = job.model
        self._checks[model] = has_capacity
        self.queue.push(job)
        now = self._clock()
        free = not self._handoff.get(model) and has_capacity(model, ANY)
        best = free and self._choose(model, now, has_capacity) is job
        deferred = best and self._defers(job, now)
        if best and not deferred:
            self.queue.on_dispatch(job, now)
            return
        loop = asyncio.get_running_loop()
        granted: asyncio.Future[None] = loop.create_future()
        self._waiters[job.id] = granted
        if not deferred:
            # Capacity may be free while a better job waits (it appeared without a release):
            # the better job gets it, and this one waits its turn.
            self._grant(model)
        limit = self.default_timeout if timeout is None else timeout
        await self._wait(job, granted, ready, served, limit)
        self._handoff[model] -= 1
        loop.call_soon(self._grant, model)

    async def _wait(
        self,
        job: Job,
        granted: asyncio.Future[None],
        ready: asyncio.Future[Any] | None,
        served: Callable[[], bool] | None,
        limit: float,
    ) -> None:
        """Until `job` is chosen; withdrawn after `limit` seconds, on a cancellation, when
        `ready` fails or when its model is no longer `served`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        try:
            while not granted.done():
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                watched: tuple[asyncio.Future[Any], ...] = (granted,)
                if ready is not None and not ready.done():
                    watched = (granted, ready)
                await asyncio.wait(watched, timeout=min(remaining, self.poll_interval))
                if granted.done():
                    break
                if ready is not None and ready.done() and not _succeeded(ready):
                    await ready  # raises what it raised, or CancelledError
                if served is not None and not served():
                    raise NoLongerServed(f"no backend serves model {job.model!r} any more")
                self._poll(job.model, loop.time())
        except BaseException:
            self._abandon(job, granted)
            raise
        if not granted.done():
            self._abandon(job, granted)
            raise TimeoutError(f"no capacity for model {job.model!r} within {limit:g} s")

    @property
    def handing_over(self) -> bool:
        """Whether a chosen waiter has not yet run to take its backend slot: until it has, the
        backends' in-flight counts miss that slot."""
        return any(self._handoff.values())

    def best_waiting(self) -> dict[str, Standing]:
        """For each model with requests waiting here, where the most deserving one stands."""
        return self.queue.best_waiting(self._clock())

    def release(self, model: str) -> None:
        """A slot of `model` freed (the caller already gave it back): hand it to the best
        waiter, or to nobody if the capacity check says there is still no room."""
        self._grant(model)

    def finish(
        self, job: Job, actual_prompt: int | None = None, actual_output: int | None = None
    ) -> None:
        """The job ended and its backend slot is given back: settle its charges, pass the slot."""
        self.queue.on_complete(job, actual_prompt, actual_output)
        self.release(job.model)

    # -- internals ---------------------------------------------------------------------------

    def _grant(self, model: str) -> None:
        if self._handoff.get(model):
            return
        check = self._checks.get(model)
        if check is None or not check(model, ANY):
            return
        now = self._clock()
        job = self._choose(model, now, check)
        if job is None or self._defers(job, now):
            return
        granted = self._waiters.pop(job.id)
        self.queue.on_dispatch(job, now)
        self._handoff[model] = 1
        self.wakeups += 1
        granted.set_result(None)

    def _choose(self, model: str, now: float, check: HasCapacity) -> Job | None:
        """The best waiter that can use a free slot of `model` (some slot is free). Almost
        always the best waiter; only when it needs a feature that no free backend has, the best
        of those that need nothing more than the free backends have."""
        job = self.queue.pick(model, now)
        if job is None or not job.requires or check(model, job.requires):
            return job
        return self.queue.pick(model, now, lambda j: not j.requires or check(model, j.requires))

    def _defers(self, job: Job, now: float) -> bool:
        """Whether the arbiter keeps the free slot for another process for now; if so, the
        decision is taken again when the deferral ends."""
        if self.arbiter is None:
            return False
        wait = self.arbiter.defer(job.model, self.queue.standing(job, now), now)
        if wait <= 0:
            return False
        model = job.model
        if model not in self._rechecks:
            self.deferrals += 1
            loop = asyncio.get_running_loop()
            self._rechecks[model] = loop.call_later(wait, self._recheck, model)
        return True

    def _recheck(self, model: str) -> None:
        self._rechecks.pop(model, None)
        self._grant(model)

    def _poll(self, model: str, now: float) -> None:
        if now - self._last_poll.get(model, -math.inf) >= self.poll_interval:
            self._last_poll[model] = now
            self._grant(model)

    def _abandon(self, job: Job, granted: asyncio.Future[None]) -> None:
        self._waiters.pop(job.id, None)
        if not granted.done():
            granted.cancel()
            self.queue.remove(job.id)
            return
        # Chosen in the same turn as it gave up: nothing ran, so refund the prompt charge and
        # hand the slot to the next best waiter.
        self._handoff[job.model] -= 1
        self.queue.on_complete(job, 0, 0)
        self._grant(job.model)
