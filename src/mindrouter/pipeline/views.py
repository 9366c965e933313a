"""What the admin API and the console read of routing and scheduling, so that they need not reach
into the pipeline's parts: the clock the views are measured on, the fair queue (whole, or its
depth per model), the recent routing decisions, and what the other processes sharing the
backend slots have waiting."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mindrouter.pipeline.services import Services
from mindrouter.scheduling import QueueSnapshot, Standing, take_snapshot


@dataclass(frozen=True, slots=True)
class Elsewhere:
    best_waiting: dict[str, Standing]  # model -> the other processes' most deserving waiter
    slots_left_for_others: int  # free slots left here for a better waiter elsewhere


class RoutingViews:
    def __init__(self, services: Services, decisions: Iterable[Mapping[str, object]]) -> None:
        self._s = services
        self._decisions = decisions

    def now(self) -> float:
        """The gateway's clock, which the backends' breakers and the queue are measured on."""
        return self._s.clock()

    def queue(self) -> QueueSnapshot:
        return take_snapshot(self._s.gate.queue, self._s.clock())

    def queue_depths(self) -> dict[str, int]:
        """model -> requests waiting for a slot on it."""
        return {m: len(jobs) for m, jobs in self._s.gate.queue.by_model().items()}

    def recent_decisions(self) -> list[Mapping[str, object]]:
        """The last routing decisions, oldest first, with the scores behind them."""
        return list(self._decisions)

    def elsewhere(self) -> Elsewhere | None:
        """With other processes sharing the backend slots, their side of the queue."""
        slots = self._s.slots
        if not slots.shared:
            return None
        return Elsewhere(slots.others_best(), self._s.gate.deferrals)
