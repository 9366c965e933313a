"""Pure fair scheduling: the Virtual-Token-Counter fair queue and the async capacity gate.

    job.py      Job (user, model, weight, token estimates, modality, arrival) and TokenCosts
    state.py    FairShareState, the port for counters and floors; InMemoryFairShareState
    policy.py   FairPolicy (burst allowance, wait bonus) and the rank of a waiting job
    queue.py    FairQueue: push / remove / pick, charging, global / per-user / per-model views
    views.py    QueueSnapshot for the admin API
    gate.py     CapacityGate: waits fairly for a slot, one wake-up per freed slot, timeouts

Standard library only (asyncio for the gate); the clock is always passed in.
"""

from mindrouter.scheduling.gate import DEFAULT_TIMEOUT, Arbiter, CapacityGate
from mindrouter.scheduling.job import Job, Modality, TokenCosts
from mindrouter.scheduling.policy import FairPolicy, Rank, Standing
from mindrouter.scheduling.queue import AccountStatus, FairQueue
from mindrouter.scheduling.state import FairShareState, InMemoryFairShareState
from mindrouter.scheduling.views import AccountView, QueueSnapshot, WaitingJob, take_snapshot

__all__ = [
    "DEFAULT_TIMEOUT",
    "AccountStatus",
    "AccountView",
    "Arbiter",
    "CapacityGate",
    "FairPolicy",
    "FairQueue",
    "FairShareState",
    "InMemoryFairShareState",
    "Job",
    "Modality",
    "QueueSnapshot",
    "Rank",
    "Standing",
    "TokenCosts",
    "WaitingJob",
    "take_snapshot",
]
