"""A fixed-step simulation of slots around the real FairQueue, for the property tests.

Every `DT` seconds of simulated time: each running job streams `DT × TPS` output tokens (charged
as they stream), finished jobs complete and free their slot, new jobs arrive, and every free
slot is filled with `pick` (work-conserving, as the gate is). Service is recorded per user in
the queue's own unit (prompt × 1 + output × 2, not divided by the weight) per step, so shares
over any interval can be read back.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from mindrouter.scheduling import FairPolicy, FairQueue, InMemoryFairShareState, Job

DT = 0.25
TPS = 40.0

Arrivals = Callable[[float], list[Job]]


@dataclass
class Running:
    job: Job
    left: int


@dataclass
class Sim:
    slots: dict[str, int]
    policy: FairPolicy = field(default_factory=FairPolicy)
    now: float = 0.0
    queue: FairQueue = field(init=False)
    running: list[Running] = field(default_factory=list)
    started: dict[str, float] = field(default_factory=dict)  # job id -> dispatch time
    arrived: dict[str, float] = field(default_factory=dict)
    busy_steps: int = 0  # slot-steps spent serving
    steps: int = 0
    log: list[tuple[float, str, float]] = field(default_factory=list)  # (t, user, service)
    output: dict[str, int] = field(default_factory=dict)  # job id -> output tokens it will make
    deadline: float | None = None  # withdraw jobs that waited this long (the gate's timeout)
    dropped: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.queue = FairQueue(InMemoryFairShareState(), self.policy)

    def submit(self, job: Job, output_tokens: int) -> None:
        self.output[job.id] = output_tokens
        self.arrived[job.id] = job.enqueued_at
        self.queue.push(job)

    def run(self, until: float, arrivals: Arrivals | None = None) -> None:
        while self.now < until - 1e-9:
            self._step(arrivals)

    def _step(self, arrivals: Arrivals | None) -> None:
        per_step = int(DT * TPS)
        still: list[Running] = []
        for r in self.running:
            n = min(per_step, r.left)
            if n:
                self.queue.charge(r.job, n)
                self.log.append((self.now, r.job.user, 2.0 * n))
            r.left -= n
            if r.left > 0:
                still.append(r)
            else:
                self.queue.on_complete(r.job, r.job.est_prompt_tokens, self.output[r.job.id])
                self.slots[r.job.model] += 1
        self.running = still
        self.now += DT
        for job in arrivals(self.now) if arrivals else []:
            self.submit(job, job.est_output_tokens)
        if self.deadline is not None:
            for waiting in self.queue.queued():
                if self.now - waiting.enqueued_at >= self.deadline:
                    self.queue.remove(waiting.id)
                    self.dropped.add(waiting.id)
        for model in self.slots:
            while self.slots[model] > 0:
                picked = self.queue.pick(model, self.now)
                if picked is None:
                    break
                self.queue.on_dispatch(picked, self.now)
                self.started[picked.id] = self.now
                self.slots[model] -= 1
                self.running.append(Running(picked, self.output[picked.id]))
                self.log.append((self.now, picked.user, float(picked.est_prompt_tokens)))
        self.busy_steps += len(self.running)
        self.steps += 1

    def service(self, start: float, end: float) -> dict[str, float]:
        out: dict[str, float] = {}
        for t, user, amount in self.log:
            if start <= t < end:
                out[user] = out.get(user, 0.0) + amount
        return out

    def waits(self) -> dict[str, float]:
        return {j: self.started[j] - self.arrived[j] for j in self.started}


_ids = itertools.count()


def job(
    user: str,
    at: float,
    *,
    weight: float = 1.0,
    model: str = "m",
    prompt: int = 100,
    output: int = 200,
) -> Job:
    return Job(
        id=f"{user}-{next(_ids)}",
        user=user,
        model=model,
        weight=weight,
        est_prompt_tokens=prompt,
        est_output_tokens=output,
        modality="chat",
        enqueued_at=at,
    )


def keep_backlogged(
    sim: Sim, users: dict[str, float], depth: int = 3, *, model: str = "m", output: int = 200
) -> Arrivals:
    """Arrivals that keep each user (name -> weight) with `depth` jobs waiting at all times."""

    def arrivals(now: float) -> list[Job]:
        waiting = {u: len(js) for u, js in sim.queue.by_user().items()}
        return [
            job(u, now, weight=w, model=model, output=output)
            for u, w in users.items()
            for _ in range(depth - waiting.get(u, 0))
        ]

    return arrivals
