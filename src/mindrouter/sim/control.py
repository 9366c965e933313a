"""Routes every simulator serves for its operator: run-time control and the request log.

`POST /sim/control` takes a JSON object with any of the keys in `CONTROLS` and applies them to
the running server (the next request sees them); the answer is the resulting settings.
`remove_model` takes a model's name: the server stops serving and listing it, as an engine does
when its operator unloads a model (one model must remain).
`GET /sim/requests` returns the request records, oldest first.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from mindrouter.sim.engine import SimState, json_response

# key -> (types accepted, may be null)
CONTROLS: dict[str, tuple[tuple[type, ...], bool]] = {
    "fail_rate": ((int, float), False),
    "fail_status": ((int,), False),
    "hang_rate": ((int, float), False),
    "drop_after": ((int,), True),
    "stall_after": ((int,), True),
    "tokens_per_second": ((int, float), False),
    "ttft_ms": ((int, float), False),
    "default_tokens": ((int,), False),
    "slots": ((int,), False),
    "healthy": ((bool,), False),
    "remove_model": ((str,), False),
}
_RATES = ("fail_rate", "hang_rate")


def settings(state: SimState) -> dict[str, Any]:
    config = state.config
    current: dict[str, Any] = {
        key: getattr(config, key) for key in CONTROLS if key not in ("healthy", "remove_model")
    }
    current["healthy"] = state.healthy
    current["models"] = [m.name for m in config.models]
    return current


def _problem(state: SimState, key: str, value: Any) -> str | None:
    kinds, nullable = CONTROLS[key]
    if key == "remove_model":
        names = [m.name for m in state.config.models]
        if value not in names:
            return f"remove_model: no model named {value!r}; served: {names}"
        if len(names) == 1:
            return "remove_model: the last model cannot be removed"
    if value is None:
        return None if nullable else f"{key} may not be null"
    if isinstance(value, bool) and bool not in kinds:
        return f"{key} must be a number"
    if not isinstance(value, kinds):
        return f"{key} has the wrong type"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if value < 0:
        return f"{key} must not be negative"
    if key in _RATES and value > 1:
        return f"{key} must be between 0 and 1"
    if key == "fail_status" and not 400 <= value <= 599:
        return "fail_status must be an HTTP error status (400-599)"
    if key == "slots" and value < 1:
        return "slots must be at least 1"
    return None


def apply_controls(state: SimState, changes: Any) -> str | None:
    """Validate every change first, then apply them all; the error text, or None."""
    if not isinstance(changes, dict):
        return "expected a JSON object"
    for key, value in changes.items():
        if key not in CONTROLS:
            return f"unknown setting {key!r}; known: {sorted(CONTROLS)}"
        problem = _problem(state, key, value)
        if problem:
            return problem
    for key, value in changes.items():
        if key == "healthy":
            state.healthy = value
        elif key == "remove_model":
            state.config.models = [m for m in state.config.models if m.name != value]
        else:
            setattr(state.config, key, value)
    state.slots.limit_changed()
    return None


def control_routes(state: SimState) -> list[Route]:
    async def control(request: Request) -> Response:
        if request.method == "POST":
            raw = await request.body()
            try:
                changes = orjson.loads(raw) if raw else {}
            except orjson.JSONDecodeError:
                return json_response({"error": "invalid JSON body"}, 400)
            problem = apply_controls(state, changes)
            if problem:
                return json_response({"error": problem}, 400)
        return json_response(settings(state))

    async def requests(request: Request) -> Response:
        return json_response({"requests": [record.to_json() for record in state.records]})

    return [
        Route("/sim/control", control, methods=["GET", "POST"]),
        Route("/sim/requests", requests, methods=["GET"]),
    ]
