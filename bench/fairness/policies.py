"""The scheduling policies the simulator compares, behind one small interface.

`ours` drives the real `mindrouter.scheduling.FairQueue`. The baselines are what a gateway
without fair scheduling would do, each kept per model so that none of them suffers head-of-line
blocking across models (the comparison is about fairness, not about that bug):

- fcfs: one FIFO per model;
- round robin: per model, the users with waiting requests take turns, one request each, weights
  ignored;
- rate limit: FCFS behind a per-user limit of requests per rolling minute (over it: refused).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Protocol

from bench.fairness.workload import Request
from mindrouter.scheduling import FairPolicy, FairQueue, InMemoryFairShareState, Job


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
