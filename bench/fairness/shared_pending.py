"""A diagnostic variant of the fair queue for the two-replica runs: the output still expected from
running streams (`pending` in the rank, see `mindrouter.scheduling.policy`) is kept in the shared
fair-share state too, so that each replica also sees what the others have just dispatched.

The real queue keeps `pending` per process: with several replicas, one replica does not see that
another has just given a user a slot until that stream's tokens are charged. Whether that matters
is what this variant measures; it reaches into the queue's internals and lives in bench/ only.
Pending amounts are stored as charges (adds) on a separate account per model, `MODEL#pending`.
"""

from __future__ import annotations

from mindrouter.scheduling import FairQueue, Job


def _pending_model(model: str) -> str:
    return f"{model}#pending"


class SharedPendingQueue(FairQueue):
    def on_dispatch(self, job: Job, now: float) -> None:
        super().on_dispatch(job, now)
        expected = self._flights[job.id].pending
        if expected:
            self.state.charge(_pending_model(job.model), job.user, expected)

    def charge(self, job: Job, output_tokens: int) -> None:
        flight = self._flights.get(job.id)
        before = flight.pending if flight is not None else 0.0
        super().charge(job, output_tokens)
        after = flight.pending if flight is not None else 0.0
        if after != before:
            self.state.charge(_pending_model(job.model), job.user, after - before)

    def on_complete(
        self, job: Job, actual_prompt: int | None = None, actual_output: int | None = None
    ) -> None:
        flight = self._flights.get(job.id)
        left = flight.pending if flight is not None else 0.0
        super().on_complete(job, actual_prompt, actual_output)
        if left:
            self.state.charge(_pending_model(job.model), job.user, -left)

    def pick(self, model: str, now: float) -> Job | None:
        waiting = self._waiting.get(model)
        if not waiting:
            return None
        shared = self.state.get_many(_pending_model(model), waiting)
        own = self._pending.get(model)
        self._pending[model] = {u: max(0.0, v) for u, v in shared.items()}
        try:
            return super().pick(model, now)
        finally:
            if own is None:
                del self._pending[model]
            else:
                self._pending[model] = own
