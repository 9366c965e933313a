"""The scheduling policies the simulator compares, behind one small interface.

`ours` drives the real `mindrouter.scheduling.FairQueue`. The baselines are what a gateway
without fair scheduling would do, each kept per model so that none of them suffers head-of-line
blocking across models (the comparison is about fairness, not about that bug):

- fcfs: one FIFO per model;
- round robin: per model, the users with waiting requests take turns, one request each, weights
  ignored;
- rate limit: FCFS behind a per-user limit of requests per rolling minute (over it: refused).

`clairvoyant` is not a baseline but a reference for what scheduling can reach at all: a fair
queue told every request's true size, which no gateway knows (see its docstring).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Protocol

from bench.fairness.workload import Request
from mindrouter.scheduling import FairPolicy, FairQueue, InMemoryFairShareState, Job, TokenCosts


class Policy(Protocol):
    name: str

    def push(self, req: Request, now: float) -> bool: ...  # False: refused outright
    def remove(self, req: Request) -> None: ...  # timed out while waiting
    def pick(self, model: str, now: float) -> Request | None: ...  # chosen and dispatched
    def on_chunk(self, req: Request, tokens: int) -> None: ...
    def on_finish(self, req: Request) -> None: ...


class Ours:
    name = "ours"

    def __init__(self, policy: FairPolicy | None = None) -> None:
        self.queue = FairQueue(InMemoryFairShareState(), policy)
        self._jobs: dict[str, tuple[Job, Request]] = {}

    def push(self, req: Request, now: float) -> bool:
        job = Job(
            id=req.id,
            user=req.user,
            model=req.model,
            weight=req.weight,
            est_prompt_tokens=req.prompt_tokens,
            est_output_tokens=req.est_output_tokens,
            modality="chat",
            enqueued_at=now,
        )
        self._jobs[req.id] = (job, req)
        self.queue.push(job)
        return True

    def remove(self, req: Request) -> None:
        self.queue.remove(req.id)
        del self._jobs[req.id]

    def pick(self, model: str, now: float) -> Request | None:
        job = self.queue.pick(model, now)
        if job is None:
            return None
        self.queue.on_dispatch(job, now)
        return self._jobs[job.id][1]

    def on_chunk(self, req: Request, tokens: int) -> None:
        self.queue.charge(self._jobs[req.id][0], tokens)

    def on_finish(self, req: Request) -> None:
        job, _ = self._jobs.pop(req.id)
        self.queue.on_complete(job, req.prompt_tokens, req.output_tokens)


class Fcfs:
    name = "fcfs"

    def __init__(self) -> None:
        self._fifo: dict[str, OrderedDict[str, Request]] = {}

    def push(self, req: Request, now: float) -> bool:
        self._fifo.setdefault(req.model, OrderedDict())[req.id] = req
        return True

    def remove(self, req: Request) -> None:
        del self._fifo[req.model][req.id]

    def pick(self, model: str, now: float) -> Request | None:
        fifo = self._fifo.get(model)
        if not fifo:
            return None
        return fifo.popitem(last=False)[1]

    def on_chunk(self, req: Request, tokens: int) -> None:
        pass

    def on_finish(self, req: Request) -> None:
        pass


class RoundRobin:
    name = "round robin"

    def __init__(self) -> None:
        # model -> user -> that user's waiting requests; dict order is the turn order
        self._turns: dict[str, dict[str, OrderedDict[str, Request]]] = {}

    def push(self, req: Request, now: float) -> bool:
        users = self._turns.setdefault(req.model, {})
        users.setdefault(req.user, OrderedDict())[req.id] = req
        return True

    def remove(self, req: Request) -> None:
        users = self._turns[req.model]
        del users[req.user][req.id]
        if not users[req.user]:
            del users[req.user]

    def pick(self, model: str, now: float) -> Request | None:
        users = self._turns.get(model)
        if not users:
            return None
        user = next(iter(users))
        fifo = users.pop(user)
        req = fifo.popitem(last=False)[1]
        if fifo:
            users[user] = fifo  # back of the line
        return req

    def on_chunk(self, req: Request, tokens: int) -> None:
        pass

    def on_finish(self, req: Request) -> None:
        pass


class RateLimited(Fcfs):
    name = "rate limit"

    def __init__(self, per_minute: int) -> None:
        super().__init__()
        self.per_minute = per_minute
        self._recent: dict[str, deque[float]] = {}

    def push(self, req: Request, now: float) -> bool:
        recent = self._recent.setdefault(req.user, deque())
        while recent and recent[0] <= now - 60.0:
            recent.popleft()
        if len(recent) >= self.per_minute:
            return False
        recent.append(now)
        return super().push(req, now)


class Clairvoyant:
    """Start-time fair queueing told each request's true prompt and output length.

    At dispatch a user's counter is charged the request's whole true cost (prompt × 1 + output
    × 2, over the weight); a freed slot goes to the waiting user with the lowest counter, each
    user's requests in arrival order; a user who becomes active is lifted to the lowest counter
    among the active ones. Nothing is estimated, nothing is charged late, there is no wait bonus.
    So whatever share error it still shows comes from the requests themselves: a slot is held for
    a whole request, and a request is a lump of service against a user's share of a window. It is
    the floor our scheduler's figures are read against (ours knows only `max_tokens`).
    """

    name = "clairvoyant"

    def __init__(self, costs: TokenCosts | None = None) -> None:
        self.costs = costs if costs is not None else TokenCosts()
        # model -> user -> that user's waiting requests in arrival order
        self._waiting: dict[str, dict[str, OrderedDict[str, Request]]] = {}
        self._counter: dict[str, float] = {}
        self._active: dict[str, int] = {}  # user -> requests waiting or running
        self._floor = 0.0

    def _raise_floor(self, also: str | None = None) -> None:
        users = [u for u, n in self._active.items() if n or u == also]
        if users:
            self._floor = max(self._floor, min(self._counter[u] for u in users))

    def push(self, req: Request, now: float) -> bool:
        if not self._active.get(req.user):
            self._raise_floor()
            self._counter[req.user] = max(self._counter.get(req.user, 0.0), self._floor)
        self._active[req.user] = self._active.get(req.user, 0) + 1
        users = self._waiting.setdefault(req.model, {})
        users.setdefault(req.user, OrderedDict())[req.id] = req
        return True

    def _release(self, req: Request) -> None:
        self._active[req.user] -= 1
        if not self._active[req.user]:
            self._raise_floor(also=req.user)

    def remove(self, req: Request) -> None:
        users = self._waiting[req.model]
        del users[req.user][req.id]
        if not users[req.user]:
            del users[req.user]
        self._release(req)

    def pick(self, model: str, now: float) -> Request | None:
        users = self._waiting.get(model)
        if not users:
            return None
        user = min(users, key=lambda u: self._counter[u])
        fifo = users[user]
        req = fifo.popitem(last=False)[1]
        if not fifo:
            del users[user]
        self._counter[user] += self.costs.of(req.prompt_tokens, req.output_tokens) / req.weight
        return req

    def on_chunk(self, req: Request, tokens: int) -> None:
        pass

    def on_finish(self, req: Request) -> None:
        self._release(req)
