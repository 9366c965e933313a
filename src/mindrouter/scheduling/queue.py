"""The fair queue: a pure, synchronous Virtual-Token-Counter scheduler with an explicit clock.

Each (model, user) account has a counter of weighted service in the state store (`state.py`).
When a slot frees for a model, `pick` returns the waiting job with the smallest rank
(`policy.py`): in short, the account with the least counted service, with output still expected
from its running streams added, minus a small bounded bonus for being passed over; a job passed
over for too long outranks everyone. Within one account jobs leave in arrival order, except that a
job needing a backend feature that no free backend has (`Job.requires`) lets the account's next
job that can use the free slot go first (`pick(..., fits)`).

Charging follows the request's life: `on_dispatch` charges the estimated prompt, `charge` is
called by the pipeline with each streamed batch of output tokens, and `on_complete` corrects the
prompt estimate and any output that was not reported as it streamed.

Idle time is never banked. An account is active while it has a job waiting or in flight. Just
before the set of active accounts of a model changes, the model's floor is raised to the lowest
counter among them; an account that becomes active is lifted to at least `floor −
burst_allowance`. So a returning user starts at most one allowance ahead of the least-served user
who stayed, and a user alone on a model is lifted to where they left off. The queue itself never
refuses or delays work: whenever the caller has a free slot and someone waits for that model,
`pick` names a job (work-conserving), so a lone user gets every slot.

Nothing here reads a clock or settings: time comes in as `now` (and `Job.enqueued_at`), knobs as
a `FairPolicy`.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from mindrouter.scheduling.job import Job
from mindrouter.scheduling.policy import FairPolicy, Rank, Standing, rank
from mindrouter.scheduling.state import FairShareState

Account = tuple[str, str]  # (model, user)


@dataclass(slots=True)
class _Flight:
    job: Job
    streamed: int = 0
    pending: float = 0.0  # weighted output still expected from this job


@dataclass(frozen=True, slots=True)
class AccountStatus:
    model: str
    user: str
    weight: float
    counter: float
    pending: float
    queued: int
    in_flight: int


class FairQueue:
    def __init__(self, state: FairShareState, policy: FairPolicy | None = None) -> None:
        self.state = state
        self.policy = policy if policy is not None else FairPolicy()
        # model -> user -> that account's waiting jobs in arrival order
        self._waiting: dict[str, dict[str, OrderedDict[str, Job]]] = {}
        self._jobs: dict[str, Job] = {}
        self._seq: dict[str, int] = {}
        self._next_seq = 0
        self._flights: dict[str, _Flight] = {}
        # model -> user -> jobs waiting or in flight; an account is active while present
        self._active: dict[str, dict[str, int]] = {}
        # model -> user -> time of the account's last dispatch. The output still expected from
        # running jobs lives in the state (`add_pending`), which sums it over every process.
        self._last_served: dict[str, dict[str, float]] = {}
        self._weights: dict[Account, float] = {}

    # -- entering and leaving the queue ---------------------------------------------------------

    def push(self, job: Job) -> None:
        """Adds a waiting job. Jobs are pushed as they arrive, `enqueued_at` from one clock."""
        if job.id in self._jobs or job.id in self._flights:
            raise ValueError(f"job {job.id} is already queued or running")
        active = self._active.setdefault(job.model, {})
        if job.user not in active:
            self._activate(job.model, job.user)
        active[job.user] = active.get(job.user, 0) + 1
        self._weights[(job.model, job.user)] = job.weight
        per_user = self._waiting.setdefault(job.model, {})
        per_user.setdefault(job.user, OrderedDict())[job.id] = job
        self._jobs[job.id] = job
        self._seq[job.id] = self._next_seq
        self._next_seq += 1

    def remove(self, job_id: str) -> Job | None:
        """Takes a waiting job out (timed out, cancelled); None if it is not waiting."""
        job = self._unlink(job_id)
        if job is not None:
            self._release_activity(job)
        return job

    # -- deciding ----------------------------------------------------------------------------

    def pick(self, model: str, now: float, fits: Callable[[Job], bool] | None = None) -> Job | None:
        """The most deserving waiting job for `model`, left in the queue; None if none waits.
        With `fits`, only jobs it accepts compete, each user's first accepted job standing for
        the user (a free slot that the best job cannot use goes to the best job that can)."""
        per_user = self._waiting.get(model)
        if not per_user:
            return None
        # The formula of `policy.rank`, inlined and compared field by field without building
        # tuples: this loop over every waiting user is the whole cost of a decision, and
        # allocating nothing in it (the two reads below are its only dicts) keeps the garbage
        # collector out of it (tests check that both agree).
        counters = self.state.get_many(model, per_user)
        pending = self.state.pending_many(model, per_user)
        served = self._last_served.get(model, {})
        rate, starving_after = self.policy.wait_bonus_per_s, self.policy.starvation_after
        seq = self._seq
        best: Job | None = None
        best_tier, best_score, best_since, best_seq = 2, math.inf, math.inf, -1
        for user, fifo in per_user.items():
            job = fifo[next(iter(fifo))]
            if fits is not None and not fits(job):
                found = next((j for j in fifo.values() if fits(j)), None)
                if found is None:
                    continue
                job = found
            since = job.enqueued_at
            last = served.get(user)
            if last is not None and last > since:
                since = last
            waited = now - since
            if waited >= starving_after:
                tier, score = 0, -waited
            else:
                bonus = rate * waited if waited > 0 else 0.0
                tier, score = 1, counters[user] + pending.get(user, 0.0) - bonus
            n = seq[job.id]
            if tier != best_tier:
                better = tier < best_tier
            elif score != best_score:
                better = score < best_score
            elif since != best_since:
                better = since < best_since
            else:
                better = n < best_seq
            if better:
                best, best_tier, best_score, best_since, best_seq = job, tier, score, since, n
        return best

    def rank_of(self, job: Job, now: float) -> Rank:
        since = self._since(job)
        counter = self.state.get(job.model, job.user)
        pending = self._pending_of(job.model, job.user)
        seq = self._seq.get(job.id, -1)
        return rank(self.policy, counter=counter, pending=pending, since=since, now=now, seq=seq)

    def standing(self, job: Job, now: float) -> Standing:
        r = self.rank_of(job, now)
        return Standing(r.tier, r.score, job.user)

    def best_waiting(self, now: float) -> dict[str, Standing]:
        """For each model with waiting jobs, where its most deserving one stands."""
        out: dict[str, Standing] = {}
        for model in self._waiting:
            job = self.pick(model, now)
            if job is not None:
                out[model] = self.standing(job, now)
        return out

    def priority(self, job: Job, now: float) -> float:
        """The job's score in weighted tokens, lower first, with the wait bonus capped at
        `max_wait_bonus` (`rank_of` also tells whether it is starving and so goes first)."""
        policy = self.policy
        waited = max(0.0, now - self._since(job))
        bonus = min(policy.wait_bonus_per_s * waited, policy.max_wait_bonus)
        counter = self.state.get(job.model, job.user)
        return counter + self._pending_of(job.model, job.user) - bonus

    def ranked(self, model: str, now: float) -> list[tuple[Rank, Job]]:
        """Every waiting job of `model` in the order they would be served if nothing changed."""
        jobs = [j for fifo in self._waiting.get(model, {}).values() for j in fifo.values()]
        return sorted(((self.rank_of(j, now), j) for j in jobs), key=lambda pair: pair[0])

    # -- charging ----------------------------------------------------------------------------

    def on_dispatch(self, job: Job, now: float) -> None:
        """The job got a slot: it stops waiting, and its estimated prompt is charged."""
        if self._unlink(job.id) is None:
            raise KeyError(f"job {job.id} is not waiting")
        costs = self.policy.costs
        self.state.charge(job.model, job.user, costs.prompt * job.est_prompt_tokens / job.weight)
        pending = costs.output * job.est_output_tokens / job.weight
        self._flights[job.id] = _Flight(job, pending=pending)
        self.state.add_pending(job.model, job.user, pending)
        self._last_served.setdefault(job.model, {})[job.user] = now

    def charge(self, job: Job, output_tokens: int) -> None:
        """Charges output tokens as they stream (per chunk or per batch)."""
        flight = self._flights.get(job.id)
        if flight is None:
            raise KeyError(f"job {job.id} is not running")
        flight.streamed += output_tokens
        amount = self.policy.costs.output * output_tokens / job.weight
        self.state.charge(job.model, job.user, amount)
        covered = min(flight.pending, amount)
        if covered:
            flight.pending -= covered
            self.state.add_pending(job.model, job.user, -covered)

    def on_complete(
        self, job: Job, actual_prompt: int | None = None, actual_output: int | None = None
    ) -> None:
        """The job ended (normally, failed or abandoned). Known actual counts correct what was
        charged: the prompt estimate, and output that was never reported as it streamed (or
        was reported beyond the final count). A job that never ran can pass 0 and 0."""
        flight = self._flights.pop(job.id, None)
        if flight is None:
            raise KeyError(f"job {job.id} is not running")
        costs = self.policy.costs
        correction = 0.0
        if actual_prompt is not None:
            correction += costs.prompt * (actual_prompt - job.est_prompt_tokens)
        if actual_output is not None:
            correction += costs.output * (actual_output - flight.streamed)
        if correction:
            self.state.charge(job.model, job.user, correction / job.weight)
        if flight.pending:
            # What it was still expected to produce; the state snaps a drifted total to zero.
            self.state.add_pending(job.model, job.user, -flight.pending)
        self._release_activity(job)

    # -- views -------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._jobs)

    def waiting(self, model: str) -> int:
        return sum(len(fifo) for fifo in self._waiting.get(model, {}).values())

    def queued(self) -> list[Job]:
        """The global view: every waiting job, in arrival order."""
        return sorted(self._jobs.values(), key=lambda j: self._seq[j.id])

    def by_user(self) -> dict[str, list[Job]]:
        out: dict[str, list[Job]] = {}
        for job in self.queued():
            out.setdefault(job.user, []).append(job)
        return out

    def by_model(self) -> dict[str, list[Job]]:
        out: dict[str, list[Job]] = {}
        for job in self.queued():
            out.setdefault(job.model, []).append(job)
        return out

    def running(self) -> list[Job]:
        return [f.job for f in self._flights.values()]

    def accounts(self) -> list[AccountStatus]:
        """Every active account with its counter and load."""
        queued: dict[Account, int] = {}
        for job in self._jobs.values():
            queued[(job.model, job.user)] = queued.get((job.model, job.user), 0) + 1
        out = []
        for model, users in self._active.items():
            counters = self.state.get_many(model, users)
            pending = self.state.pending_many(model, users)
            for user, count in users.items():
                acct = (model, user)
                n_queued = queued.get(acct, 0)
                out.append(
                    AccountStatus(
                        model, user, self._weights.get(acct, 1.0), counters[user],
                        pending[user], n_queued, count - n_queued,
                    )
                )  # fmt: skip
        return out

    # -- internals ---------------------------------------------------------------------------

    def _pending_of(self, model: str, user: str) -> float:
        return self.state.pending_many(model, (user,))[user]

    def _since(self, job: Job) -> float:
        """When the job started being passed over: its arrival or its account's last dispatch."""
        last = self._last_served.get(job.model, {}).get(job.user, -math.inf)
        return max(job.enqueued_at, last)

    def _unlink(self, job_id: str) -> Job | None:
        job = self._jobs.pop(job_id, None)
        if job is None:
            return None
        self._seq.pop(job_id, None)
        per_user = self._waiting[job.model]
        fifo = per_user[job.user]
        del fifo[job_id]
        if not fifo:
            del per_user[job.user]
            if not per_user:
                del self._waiting[job.model]
        return job

    def _activate(self, model: str, user: str) -> None:
        floor = self._advance_floor(model)
        self.state.lift(model, user, floor - self.policy.burst_allowance)

    def _release_activity(self, job: Job) -> None:
        active = self._active[job.model]
        left = active[job.user] - 1
        if left:
            active[job.user] = left
            return
        # Raise the floor while the departing account still counts: if it was the last one,
        # the floor keeps its counter, and whoever comes next is lifted from there.
        self._advance_floor(job.model)
        del active[job.user]
        if not active:
            del self._active[job.model]

    def _advance_floor(self, model: str) -> float:
        users = self._active.get(model)
        if not users:
            return self.state.floor(model)
        lowest = min(self.state.get_many(model, users).values())
        return self.state.raise_floor(model, lowest)
