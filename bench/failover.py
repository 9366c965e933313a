"""`python -m bench.failover`: how many requests succeed when part of the fleet fails.

Three simulated vLLM engines serve one model behind one gateway (SQLite); `--failing` of them
fail `--fail-rate` of their requests with a 500. `--requests` chat requests (half streamed) are
sent `--concurrency` at a time; the script prints the share that succeeded, the statuses of the
others and the attempts the audit trail recorded.

    .venv/bin/python -m bench.failover                      # 2 of 3 failing 50%, 1,000 × 10
    .venv/bin/python -m bench.failover --failing 3 --requests 300
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import tempfile
import time
from typing import Any

import httpx

from mindrouter.app import build_app
from mindrouter.serving import ThreadServer
from mindrouter.settings import settings_from_dict
from mindrouter.sim import build_sim_app
from mindrouter.sim.config import SimConfig, SimModel
from mindrouter.stores.sql import apply_config, open_stores
from mindrouter.stores.sql.migrate import upgrade

MODEL = "m"


async def _key(settings: Any) -> str:
    stores = open_stores(settings.database_url)
    try:
        await upgrade(stores.engine)
        await apply_config(stores, settings)
        created = await stores.keys.create_key("bench", admin=True)
        key: str = created.key
        return key
    finally:
        await stores.aclose()


async def _run(url: str, key: str, requests: int, concurrency: int) -> collections.Counter[int]:
    statuses: collections.Counter[int] = collections.Counter()
    todo = iter(range(requests))
    headers = {"Authorization": f"Bearer {key}"}

    async def worker(client: httpx.AsyncClient) -> None:
        for i in todo:
            body = {
                "model": MODEL,
                "messages": [{"role": "user", "content": f"question {i}"}],
                "max_tokens": 8,
                "stream": i % 2 == 1,
            }
            r = await client.post("/v1/chat/completions", json=body, headers=headers)
            ok = r.status_code == 200 and (not body["stream"] or '"error"' not in r.text)
            statuses[200 if ok else (r.status_code if r.status_code != 200 else 0)] += 1

    async with httpx.AsyncClient(base_url=url, timeout=300) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    return statuses


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.failover")
    p.add_argument("--failing", type=int, default=2, help="how many of the 3 backends fail")
    p.add_argument("--fail-rate", type=float, default=0.5)
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--concurrency", type=int, default=10)
    p.add_argument("--cooldown", type=float, default=30.0, help="breaker_cooldown_s")
    p.add_argument("--capacity-wait", type=float, default=150.0, help="capacity_wait_s")
    ns = p.parse_args()
    sims = []
    backends = []
    for i in range(3):
        rate = ns.fail_rate if i < ns.failing else 0.0
        config = SimConfig(
            engine="vllm", models=[SimModel(MODEL)], fail_rate=rate, seed=i + 1, slots=8
        )
        sim = ThreadServer(build_sim_app(config)).start()
        sims.append(sim)
        # The failing backends rank first, so that every request meets them.
        backends.append(
            {
                "name": f"b{i}",
                "engine": "vllm",
                "url": sim.url,
                "models": [MODEL],
                "priority": 3 if rate else 0,
            }
        )
    db = f"sqlite+aiosqlite:///{tempfile.mkdtemp(prefix='mr-bench-')}/mindrouter.db"
    settings = settings_from_dict(
        {
            "database_url": db,
            "log_level": "ERROR",
            "users": [{"name": "bench", "group": "default"}],
            "backends": backends,
            "breaker_cooldown_s": ns.cooldown,
            "capacity_wait_s": ns.capacity_wait,
        }
    )
    key = asyncio.run(_key(settings))
    gateway = ThreadServer(build_app(settings)).start()
    try:
        started = time.monotonic()
        statuses = asyncio.run(_run(gateway.url, key, ns.requests, ns.concurrency))
        elapsed = time.monotonic() - started
        rows = httpx.get(
            gateway.url + "/admin/audit",
            params={"limit": min(ns.requests, 1000)},
            headers={"Authorization": f"Bearer {key}"},
        ).json()
    finally:
        gateway.stop()
        for sim in sims:
            sim.stop()
    ok = statuses[200]
    print(
        f"{ns.failing} of 3 backends failing {ns.fail_rate:.0%}, {ns.requests} requests at "
        f"concurrency {ns.concurrency}: {ok / ns.requests:.1%} succeeded in {elapsed:.1f} s"
    )
    print("statuses:", dict(sorted(statuses.items())))
    print(
        "attempts per request:",
        dict(sorted(collections.Counter(r["attempts"] for r in rows).items())),
    )


if __name__ == "__main__":
    main()
