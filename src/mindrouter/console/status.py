"""The public status page: each model up or down, where it is loaded, how many requests wait
for it and roughly how long a new one would wait. No sign-in and nothing private: no users, no
keys, no prompts, not even the backends' addresses. Also as JSON at /console/status.json.

Only the models every group may use are listed: a model kept for some groups (a licensed one,
a large one for faculty) is not revealed to the public, as the API listings reveal no model a
caller may not use.

The wait estimate is the queue ahead divided by the slots of the usable backends serving the
model, times the mean duration of the model's successful requests over the last 15 minutes.
Those durations and the groups' model rules are read at most every 15 seconds, so the page
costs the database almost nothing however often it is loaded.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mindrouter.console.deps import Console
from mindrouter.console.guard import console_of, current_account
from mindrouter.console.render import page
from mindrouter.identity.access import ModelAccess, access_from, may_use

DATABASE_TTL_S = 15.0
DURATIONS_WINDOW = timedelta(minutes=15)


@dataclass(frozen=True, slots=True)
class ModelStatus:
    model: str
    up: bool
    loaded_on: list[str]
    serving_backends: int
    queue_depth: int
    wait_estimate_s: float | None


class FromDatabase:
    """What the page reads from the database, at most every DATABASE_TTL_S: the mean request
    duration per model, and each group's rule of model access."""

    def __init__(self) -> None:
        self._at = -math.inf
        self.durations: dict[str, float] = {}
        self.rules: list[ModelAccess] = []

    async def refresh(self, console: Console) -> FromDatabase:
        now = time.monotonic()
        if now - self._at > DATABASE_TTL_S:
            since = datetime.now(UTC) - DURATIONS_WINDOW
            self.durations = await console.stores.reports.mean_durations(since)
            groups = await console.stores.directory.list_groups()
            self.rules = [access_from(g.models) for g in groups]
            self._at = now
        return self


async def model_statuses(console: Console, stored: FromDatabase) -> list[ModelStatus]:
    gateway = console.gateway
    now = gateway.views.now()
    depth = gateway.views.queue_depths()
    known = await stored.refresh(console)
    means = known.durations
    out = []
    for spec in gateway.catalog.models():
        if not may_use(known.rules, spec):
            continue
        serving = [b for b, _ in gateway.catalog.serving(spec.name)]
        usable = [b for b in serving if b.usable(now)]
        waiting = depth.get(spec.name, 0)
        slots = sum(b.config.max_concurrent for b in usable)
        mean = means.get(spec.name)
        # Nothing ahead: no wait. Requests ahead but no recent duration to go by: unknown.
        estimate: float | None = None
        if usable and not waiting:
            estimate = 0.0
        elif usable and mean is not None:
            estimate = round(math.ceil(waiting / slots) * mean, 1)
        out.append(
            ModelStatus(
                model=spec.name,
                up=bool(usable),
                loaded_on=sorted(b.name for b in serving if spec.name in b.loaded),
                serving_backends=len(usable),
                queue_depth=waiting,
                wait_estimate_s=estimate,
            )
        )
    return out


def status_routes() -> list[Route]:
    stored = FromDatabase()

    async def html(request: Request) -> Response:
        console = console_of(request)
        models = await model_statuses(console, stored)
        account = await current_account(request)
        return page(request, "status.html", account, models=models)

    async def as_json(request: Request) -> Response:
        models = await model_statuses(console_of(request), stored)
        return JSONResponse(
            {
                "object": "status",
                "taken_at": datetime.now(UTC).isoformat(),
                "models": [asdict(m) for m in models],
            }
        )

    return [
        Route("/status", html, methods=["GET"]),
        Route("/status.json", as_json, methods=["GET"]),
    ]
