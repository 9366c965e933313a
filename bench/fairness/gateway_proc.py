"""One gateway process for the real-time benchmark, with its capacity gate chosen on the command
line: `python -m bench.fairness.gateway_proc CONFIG.json --queue fair|fifo|rr
--state memory|redis`.

The app is the real one (`build_app`: authentication, limits, audit, routing, streaming); only the
gate is replaced, as the composition root would build it: `CapacityGate(FairQueue(state))` with
`state` in memory or shared through Redis (`RedisFairShareState`), or a FIFO queue for the
baseline; with `--shared-slots`, the backend slots and the arbiter of free slots shared too
(`SharedSlots`, as the app does whenever Redis is configured). Prints `READY <url>` once it
listens; a line `stop` on stdin (or stdin closing) shuts it down cleanly, after which it prints
`STATS <json>` (the Redis exchanges, when shared).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from bench.fairness.fifo import FifoQueue, RoundRobinQueue
from mindrouter.app import build_app
from mindrouter.observability.logging import configure_logging
from mindrouter.scheduling import CapacityGate, FairQueue, FairShareState, InMemoryFairShareState
from mindrouter.serving import InLoopServer
from mindrouter.settings import settings_from_dict
from mindrouter.stores.fairshare import RedisFairShareState
from mindrouter.stores.shared import LocalSlots, RedisLink
from mindrouter.stores.slots import SharedSlots


async def serve(ns: argparse.Namespace) -> int:
    settings = settings_from_dict(json.loads(Path(ns.config).read_text()))
    configure_logging(settings.log_level)
    app = build_app(settings)
    shared: RedisFairShareState | None = None
    state: FairShareState

    def link() -> RedisLink:
        return RedisLink.from_url(ns.redis_url, ns.prefix)

    if ns.state == "redis":
        shared = RedisFairShareState(link(), ns.sync_interval)
        state = shared
    else:
        state = InMemoryFairShareState()
    queues = {"fair": FairQueue, "fifo": FifoQueue, "rr": RoundRobinQueue}
    queue = queues[ns.queue](state)
    services = app.state.gateway.s
    slots: SharedSlots | None = None
    if ns.shared_slots:
        slots = SharedSlots(link(), services.catalog.backends)
    services.gate = CapacityGate(queue, arbiter=slots)
    services.slots = slots if slots is not None else LocalSlots()
    server = InLoopServer(app, log_level="warning")
    await server.start()
    if shared is not None:
        await shared.start()
    if slots is not None:
        slots.attach(services.gate)
        await slots.start()
        if shared is not None:
            board = slots
            shared.contended = lambda: board.contended
    print(f"READY {server.url}", flush=True)
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line or line.strip() == "stop":
            break
    await server.stop()
    stats: dict[str, Any] = {"queue": ns.queue, "state": ns.state}
    if slots is not None:
        await slots.stop()
        stats.update(
            slot_exchanges=slots.exchanges,
            deferrals=services.gate.deferrals,
            overfull=slots.overfull,
        )
    if shared is not None:
        await shared.stop()
        stats.update(
            exchanges=shared.exchanges, failures=shared.failures, pending_at_exit=shared.pending
        )
    print(f"STATS {json.dumps(stats)}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fairness.gateway_proc")
    parser.add_argument("config", help="gateway settings as JSON")
    parser.add_argument("--queue", choices=("fair", "fifo", "rr"), default="fair")
    parser.add_argument("--state", choices=("memory", "redis"), default="memory")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--prefix", default="mr:")
    parser.add_argument("--sync-interval", type=float, default=0.05)
    parser.add_argument("--shared-slots", action="store_true")
    return asyncio.run(serve(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
