"""Stage 7: the fair-share gate, where an admitted request waits for its turn and a backend slot.

The request queues as a job of its user, weighted by the user's share and ordered by its
estimates (`scheduling/`); it leaves the queue when a backend serving its model, with every
feature it needs, has room. It waits `capacity_wait_s` at most, then is refused as overloaded;
if meanwhile its model loses every backend (disabled or removed by an admin), it is refused as
not found within a second, as a request sent then would be.
"""

from __future__ import annotations

import asyncio

from mindrouter.canonical import AnyRequest
from mindrouter.errors import ModelNotFound, Overloaded
from mindrouter.pipeline.context import RequestContext
from mindrouter.pipeline.services import Services
from mindrouter.pipeline.usage_sync import limit_key
from mindrouter.routing.catalog import ModelSpec
from mindrouter.scheduling import Job
from mindrouter.scheduling.gate import NoLongerServed


async def schedule(
    s: Services,
    ctx: RequestContext,
    req: AnyRequest,
    spec: ModelSpec,
    *,
    est_input: int,
    est_output: int,
    requires: frozenset[str],
    ready: asyncio.Future[None],
) -> Job:
    """The request's job once the gate let it through; it is not let through before `ready`."""
    p = ctx.principal
    assert p is not None
    modality = req.modality
    job = Job(
        id=ctx.request_id,
        user=limit_key(p.user_id),
        model=spec.name,
        weight=p.scheduler_weight,
        est_prompt_tokens=est_input,
        est_output_tokens=est_output,
        modality="chat" if modality == "completion" else modality,
        enqueued_at=s.clock(),
        requires=requires,
    )

    def has_capacity(model: str, requires: frozenset[str]) -> bool:
        return s.catalog.has_room(model, requires, s.clock())

    def served() -> bool:
        return bool(s.catalog.serving(spec.name))

    try:
        await s.gate.acquire(job, has_capacity, timeout=s.capacity_wait, ready=ready, served=served)
    except NoLongerServed:
        # Its backends were disabled or removed while it waited: the answer a request sent
        # now would get, rather than a wait for capacity that can no longer come.
        raise ModelNotFound(spec.name) from None
    except TimeoutError:
        raise Overloaded(
            f"no backend had room for model '{spec.name}' within "
            f"{s.capacity_wait:g} s; the cluster is busy, try again shortly"
        ) from None
    ctx.queued_s = s.clock() - job.enqueued_at
    return job
