"""Scheduler decision time on the real code, with wall-clock timing.

A FairQueue holds 500 waiting jobs for one model; each sample times one full decision on a freed
slot: `pick` (ranks every waiting user's first job) plus `on_dispatch` (charges the prompt). The
chosen job is then completed and a fresh job pushed outside the timed region, so the queue stays
at 500. Two shapes: 500 users with one job each (the worst case for the linear scan over users)
and 50 users with ten jobs each.
"""

from __future__ import annotations

import random
import time

from mindrouter.scheduling import FairQueue, InMemoryFairShareState, Job

QUEUED = 500


def _job(rng: random.Random, n: int, user: str, now: float) -> Job:
    return Job(
        id=f"j{n}",
        user=user,
        model="chat",
        weight=rng.choice((1.0, 3.0)),
        est_prompt_tokens=rng.randint(100, 400),
        est_output_tokens=rng.randint(100, 500),
        modality="chat",
        enqueued_at=now,
    )


WARM_UP = 200  # decisions run before timing starts: first-touch costs are not the steady state


def decision_times(users: int, samples: int, seed: int = 7) -> tuple[list[float], list[float]]:
    """Wall-clock (perf_counter) and CPU (thread_time) seconds of each timed decision. On a
    loaded machine the wall-clock tail is mostly the process being preempted; CPU time is not."""
    rng = random.Random(seed)
    queue = FairQueue(InMemoryFairShareState())
    names = [f"user-{i}" for i in range(users)]
    now, n = 0.0, 0
    for i in range(QUEUED):
        queue.push(_job(rng, n, names[i % users], now))
        n += 1
        now += 0.01
    times: list[float] = []
    cpu: list[float] = []
    for i in range(WARM_UP + samples):
        now += 0.05
        c0, t0 = time.thread_time(), time.perf_counter()
        job = queue.pick("chat", now)
        assert job is not None
        queue.on_dispatch(job, now)
        t1, c1 = time.perf_counter(), time.thread_time()
        if i >= WARM_UP:
            times.append(t1 - t0)
            cpu.append(c1 - c0)
        queue.charge(job, 50)
        queue.on_complete(job, job.est_prompt_tokens, 50)
        queue.push(_job(rng, n, job.user, now))
        n += 1
    return times, cpu
