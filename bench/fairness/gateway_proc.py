"""One gateway process for the real-time benchmark, with its capacity gate chosen on the command
line: `python -m bench.fairness.gateway_proc CONFIG.json --queue fair|fifo
--state memory|redis`.

The app is the real one (`build_app`: authentication, limits, audit, routing, streaming); only the
gate is replaced, as the composition root would build it: `CapacityGate(FairQueue(state))` with
`state` in memory or shared through Redis (`RedisFairShareState`), or a FIFO queue for the
baseline. Prints `READY <url>` once it listens; a line `stop` on stdin (or stdin closing) shuts it
down cleanly, after which it prints `STATS <json>` (the Redis exchanges, when shared).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from bench.fairness.fifo import FifoQueue
from mindrouter.app import build_app
from mindrouter.observability.logging import configure_logging
from mindrouter.scheduling import CapacityGate, FairQueue, FairShareState, InMemoryFairShareState
from mindrouter.serving import InLoopServer
from mindrouter.settings import settings_from_dict
from mindrouter.stores.fairshare import RedisFairShareState


async def serve(ns: argparse.Namespace) -> int:
    settings = settings_from_dict(json.loads(Path(ns.config).read_text()))
    configure_logging(settings.log_level)
    app = build_app(settings)
    shared: RedisFairShareState | None = None
    state: FairShareState
    if ns.state == "redis":
        shared = RedisFairShareState.from_url(ns.redis_url, ns.prefix, ns.sync_interval)
        state = shared
    else:
        state = InMemoryFairShareState()
    queues = {"fair": FairQueue, "fifo": FifoQueue}
    queue = queues[ns.queue](state)
    app.state.gateway.s.gate = CapacityGate(queue)
    server = InLoopServer(app, log_level="warning")
    await server.start()
    if shared is not None:
        await shared.start()
    print(f"READY {server.url}", flush=True)
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line or line.strip() == "stop":
            break
    await server.stop()
    stats: dict[str, Any] = {"queue": ns.queue, "state": ns.state}
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
    parser.add_argument("--queue", choices=("fair", "fifo"), default="fair")
    parser.add_argument("--state", choices=("memory", "redis"), default="memory")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--prefix", default="mr:")
    parser.add_argument("--sync-interval", type=float, default=0.05)
    return asyncio.run(serve(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
