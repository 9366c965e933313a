"""A point-in-time picture of the fair queue for the admin API and for metrics.

Plain frozen dataclasses, so the HTTP layer can serialise them without knowing the queue. Per
model: the waiting jobs in the order they would be served. Per account: the counter, the load, the
share the account is entitled to among the model's active accounts (its weight over their total
weight), and the share of the model's running jobs it holds right now.
"""

from __future__ import annotations

from dataclasses import dataclass

from mindrouter.scheduling.queue import FairQueue


@dataclass(frozen=True, slots=True)
class WaitingJob:
    id: str
    user: str
    modality: str
    est_prompt_tokens: int
    est_output_tokens: int
    waited_s: float
    priority: float  # weighted tokens, lower goes first
    starving: bool  # passed over long enough to go ahead of every job that is not
    requires: tuple[str, ...]  # backend features it waits for (structured_output)


@dataclass(frozen=True, slots=True)
class AccountView:
    model: str
    user: str
    weight: float
    counter: float
    pending: float
    queued: int
    in_flight: int
    entitled_share: float  # weight ÷ total weight of the model's active accounts
    running_share: float  # this account's running jobs ÷ the model's running jobs


@dataclass(frozen=True, slots=True)
class QueueSnapshot:
    taken_at: float
    waiting: int
    running: int
    floors: dict[str, float]
    models: dict[str, list[WaitingJob]]
    accounts: list[AccountView]


def take_snapshot(queue: FairQueue, now: float) -> QueueSnapshot:
    models: dict[str, list[WaitingJob]] = {}
    for model in queue.by_model():
        models[model] = [
            WaitingJob(
                id=job.id,
                user=job.user,
                modality=job.modality,
                est_prompt_tokens=job.est_prompt_tokens,
                est_output_tokens=job.est_output_tokens,
                waited_s=max(0.0, now - job.enqueued_at),
                priority=queue.priority(job, now),
                starving=r.tier == 0,
                requires=tuple(sorted(job.requires)),
            )
            for r, job in queue.ranked(model, now)
        ]
    statuses = queue.accounts()
    weight_total: dict[str, float] = {}
    running_total: dict[str, int] = {}
    for s in statuses:
        weight_total[s.model] = weight_total.get(s.model, 0.0) + s.weight
        running_total[s.model] = running_total.get(s.model, 0) + s.in_flight
    accounts = [
        AccountView(
            model=s.model,
            user=s.user,
            weight=s.weight,
            counter=s.counter,
            pending=s.pending,
            queued=s.queued,
            in_flight=s.in_flight,
            entitled_share=s.weight / weight_total[s.model],
            running_share=s.in_flight / running_total[s.model] if running_total[s.model] else 0.0,
        )
        for s in sorted(statuses, key=lambda s: (s.model, s.user))
    ]
    floors = {model: queue.state.floor(model) for model in sorted({s.model for s in statuses})}
    return QueueSnapshot(
        taken_at=now,
        waiting=len(queue),
        running=sum(running_total.values()),
        floors=floors,
        models=models,
        accounts=accounts,
    )
