"""Stage 5: the caller's limits (tokens per period, requests per minute, concurrent requests).

A request is admitted against its estimate before it is queued, holding a ticket on the limit
counters (renewed by the lease keeper while it runs, `leases.py`): with Redis, one round trip.
Its clean-up settles the ticket with what was really used without waiting for Redis to answer:
the settlement is on its way (ahead of anything this process sends Redis later) before the
clean-up goes on, so before the answer's ending is sent (a stream's last event comes after the
clean-up, `relay.stream`), and a client that sends its next request when it has the answer finds
its slot free. The counters are seeded from the durable usage the first time a process sees a
user (`usage_sync.py`).
"""

from __future__ import annotations

from mindrouter.identity.principal import Principal
from mindrouter.observability.logging import log
from mindrouter.pipeline.services import Services
from mindrouter.pipeline.usage_sync import limit_key
from mindrouter.stores.limits import Limits, Ticket, UsageNotLoaded, UsageSnapshot


async def admit(s: Services, p: Principal, estimate: int) -> Ticket:
    """The caller's ticket for a request of `estimate` tokens (RateLimited when over)."""
    if not s.usage.seeded(p.user_id):
        await s.usage.ensure_seeded(p.user_id)
    limits = Limits(p.token_budget, p.rpm, p.max_concurrent, p.budget_period_days)
    try:
        ticket = await s.limits.admit(limit_key(p.user_id), limits, estimate, s.wall())
    except UsageNotLoaded:
        await s.usage.reload(p.user_id)
        ticket = await s.limits.admit(limit_key(p.user_id), limits, estimate, s.wall())
    if s.leases is not None:
        s.leases.hold(ticket)
    return ticket


def settle(s: Services, ticket: Ticket, used: int) -> None:
    """The request is over and used `used` tokens: its ticket is given back with that charge
    (sent when this returns; the store deals with a failure itself)."""
    if s.leases is not None:
        s.leases.release(ticket)
    try:
        s.limits.settle_soon(ticket, used, s.wall())
    except Exception as exc:
        log.error("settling limits failed", error=str(exc), tokens=used)


async def usage_of(s: Services, user_id: int, limits: Limits) -> UsageSnapshot:
    """A user's counters as the limit store sees them (loaded from the database first, and
    again when the store lost them: a usage view never shows counters started from zero)."""
    await s.usage.ensure_seeded(user_id)
    try:
        return await s.limits.snapshot(limit_key(user_id), limits, s.wall())
    except UsageNotLoaded:
        await s.usage.reload(user_id)
        return await s.limits.snapshot(limit_key(user_id), limits, s.wall())
