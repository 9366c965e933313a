"""Prometheus exposition for the simulators, written by hand.

Many simulators run in one process (the demo, the tests), so nothing here touches a global
registry: every number comes from the app's own `SimState`.

`RequestCounter` is the ASGI middleware behind `mindrouter_sim_requests_total{route,status}`. It
counts every request the app receives, refused ones included, when the response status is sent.
A request that ends without any response (a hang the client gave up on) counts as status 499.
Paths that match no route are counted under `route="unmatched"` to keep label values bounded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mindrouter.sim.engine import SimState

Sample = tuple[Mapping[str, str], float]

CLIENT_CLOSED = 499


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    return repr(float(value))


class Exposition:
    def __init__(self) -> None:
        self._lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str, samples: Iterable[Sample]) -> None:
        self._lines.append(f"# HELP {name} {help_text}")
        self._lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            if labels:
                rendered = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
                self._lines.append(f"{name}{{{rendered}}} {_number(value)}")
            else:
                self._lines.append(f"{name} {_number(value)}")

    def text(self) -> str:
        return "\n".join(self._lines) + "\n"


def add_sim_families(out: Exposition, state: SimState) -> None:
    out.family(
        "mindrouter_sim_requests_total",
        "counter",
        "Requests received by the simulator, by route and response status.",
        (
            ({"route": route, "status": status}, count)
            for (route, status), count in sorted(state.requests_total.items())
        ),
    )
    out.family(
        "mindrouter_sim_cancelled_total",
        "counter",
        "Requests whose client disconnected before the response was complete.",
        [({}, state.cancelled_total)],
    )


class RequestCounter:
    def __init__(self, app: ASGIApp, state: SimState, paths: frozenset[str]) -> None:
        self.app = app
        self.state = state
        self.paths = paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        route = path if path in self.paths else "unmatched"
        counted = False

        async def counting_send(message: Message) -> None:
            nonlocal counted
            if not counted and message["type"] == "http.response.start":
                counted = True
                self.state.requests_total[(route, str(message["status"]))] += 1
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        except BaseException:
            if not counted:
                counted = True
                self.state.requests_total[(route, "500")] += 1
            raise
        finally:
            if not counted:
                self.state.requests_total[(route, str(CLIENT_CLOSED))] += 1
