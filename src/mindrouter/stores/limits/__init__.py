"""Per-user limits: token budget per period, requests per minute, requests in flight.

The pipeline's admit stage calls `admit()` before any GPU work and its account stage calls
`settle_soon()` in its shielded clean-up; a background task writes `dirty()` to the database at
least every 60 s (as absolute values: with several replicas any of them may report a user), and
at shutdown once more before `close()`; `seed()` loads the persisted usage at start.

    MemoryLimitStore      one process (the embedded default, and the fail-open fallback)
    RedisLimitStore       exact across processes and replicas: one Lua script per admit/settle
                          (`redis_wire.py`: error translation, numbers and replies)
    ResilientLimitStore   RedisLimitStore plus the policy for when Redis is unreachable
"""

from mindrouter.stores.limits.memory import MemoryLimitStore
from mindrouter.stores.limits.model import (
    DEFAULT_LEASE_SECONDS,
    Activity,
    Limits,
    LimitStore,
    LimitStoreUnavailable,
    Ticket,
    UsageNotLoaded,
    UsageSnapshot,
)
from mindrouter.stores.limits.redis_store import RedisLimitStore
from mindrouter.stores.limits.resilient import RedisUnavailablePolicy, ResilientLimitStore

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "Activity",
    "LimitStore",
    "LimitStoreUnavailable",
    "Limits",
    "MemoryLimitStore",
    "RedisLimitStore",
    "RedisUnavailablePolicy",
    "ResilientLimitStore",
    "Ticket",
    "UsageNotLoaded",
    "UsageSnapshot",
]
