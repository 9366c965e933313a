"""Fair-share counters shared by several gateway processes (the scheduler's `FairShareState`).

    mirror.py       LocalMirror: the counters the queue reads synchronously, and the writes not
                    yet pushed, each account's folded into one operation max(x + add, at_least)
    lua.py          the exchange script: push every pending write, pull every value, once
    redis_state.py  RedisFairShareState: the mirror plus a background task that exchanges with
                    Redis every ~50 ms; works locally (and logs) while Redis is unreachable

Each process keeps its own waiting queue and capacity gate; only the per-(model, user) counters
and the per-model floors are shared.
"""

from mindrouter.stores.fairshare.mirror import LocalMirror, Pending
from mindrouter.stores.fairshare.redis_state import (
    DEFAULT_SYNC_INTERVAL,
    FairShareUnavailable,
    RedisFairShareState,
)

__all__ = [
    "DEFAULT_SYNC_INTERVAL",
    "FairShareUnavailable",
    "LocalMirror",
    "Pending",
    "RedisFairShareState",
]
