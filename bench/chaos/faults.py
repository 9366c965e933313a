"""The fault schedule of the soak, and the time each recovery took.

One cycle of `cycle` seconds, repeated: a replica SIGKILLed mid-stream (the first found with
requests in flight, waiting up to 70 s for one; started again 5 s later),
Redis killed and started again empty, every PostgreSQL connection of the soak's database
terminated, a replica taken out of the proxy's rotation and sent SIGTERM a second later (started
again once it has drained and exited); one backend
fails half its requests for a fifth of the cycle, another hangs for a fifth.
"""

from __future__ import annotations

import asyncio
import signal
import time
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as redis_asyncio
from sqlalchemy import func, select

from bench.chaos.stack import Stack
from bench.harness import stores_at
from mindrouter.stores.sql.schema import audit_records, instances

POLL_S = 0.25
PRE_STOP_S = 1.0


@dataclass
class Fault:
    kind: str
    at: float  # wall clock
    target: str = ""
    detail: dict[str, Any] = field(default_factory=dict)
    recovered_s: float | None = None  # the time the recovery took (see `measure`)
    extra_s: float | None = None


@dataclass
class Schedule:
    stack: Stack
    cycle: float
    faults: list[Fault] = field(default_factory=list)
    kills: list[tuple[float, str]] = field(default_factory=list)  # (time, instance id)
    redis_outages: list[tuple[float, float]] = field(default_factory=list)

    async def run(self, seconds: float, first_decided_after: Any) -> None:
        """Faults until `seconds` from now, none in the last 40 s (recoveries finish)."""
        start = time.time()
        n = 0
        running: list[asyncio.Task[None]] = []
        steps = [
            (0.05, self._backend_fails),
            (0.15, self._kill),
            (0.35, self._redis),
            (0.5, self._backend_hangs),
            (0.6, self._terminate_pg),
            (0.8, self._sigterm),
        ]
        while True:
            base = start + n * self.cycle
            for offset, step in steps:
                at = base + offset * self.cycle
                if at > start + seconds - 40:
                    await asyncio.gather(*running)
                    return
                await asyncio.sleep(max(0.0, at - time.time()))
                running.append(asyncio.create_task(step(n, first_decided_after)))
            n += 1

    # -- backends --------------------------------------------------------------------------------

    async def _backend_fails(self, n: int, _: Any) -> None:
        state = self.stack.states["vllm-a"]
        fault = Fault("backend 50% failing", time.time(), "vllm-a")
        self.faults.append(fault)
        state.config.fail_rate = 0.5
        await asyncio.sleep(0.2 * self.cycle)
        state.config.fail_rate = 0.0
        fault.recovered_s = time.time() - fault.at  # the window's length

    async def _backend_hangs(self, n: int, _: Any) -> None:
        state = self.stack.states["llamacpp"]
        fault = Fault("backend hanging", time.time(), "llamacpp")
        self.faults.append(fault)
        state.config.hang_rate = 1.0
        await asyncio.sleep(0.2 * self.cycle)
        state.config.hang_rate = 0.0
        fault.recovered_s = time.time() - fault.at

    # -- replicas --------------------------------------------------------------------------------

    async def _instance_of(self, pid: int) -> str:
        async with stores_at(self.stack.database_url) as stores, stores.engine.connect() as c:
            found = await c.execute(select(instances.c.id).where(instances.c.pid == pid))
            return str(found.scalar_one())

    async def _pending(self, instance_id: str) -> int:
        async with stores_at(self.stack.database_url) as stores, stores.engine.connect() as c:
            query = select(func.count()).where(
                audit_records.c.instance_id == instance_id, audit_records.c.status == "pending"
            )
            return int((await c.execute(query)).scalar_one())

    async def _live_leases(self, client: redis_asyncio.Redis) -> set[tuple[str, str]]:
        now = time.time()
        held = set()
        async for key in client.scan_iter(match=f"{self.stack.prefix}limits:leases:*"):
            for member in await client.zrangebyscore(key, f"({now}", "+inf"):
                held.add((key.decode(), _text(member)))
        return held

    async def _in_flight(self) -> dict[int, tuple[str, int]]:
        """pid -> (instance, pending records) of every live gateway process, in one query."""
        async with stores_at(self.stack.database_url) as stores, stores.engine.connect() as c:
            pending = (
                select(audit_records.c.instance_id, func.count().label("n"))
                .where(audit_records.c.status == "pending")
                .group_by(audit_records.c.instance_id)
                .subquery()
            )
            rows = await c.execute(
                select(instances.c.pid, instances.c.id, pending.c.n).outerjoin(
                    pending, pending.c.instance_id == instances.c.id
                )
            )
            return {row.pid: (row.id, int(row.n or 0)) for row in rows}

    async def _busy_replica(self, n: int) -> tuple[Any, str, int] | None:
        """Mid-stream: the first replica found with requests in flight, asked for up to 70 s
        (users at their `rpm` are admitted in a burst each minute, then refused until the next
        one, so a replica can be idle for most of a minute); else the n-th."""
        replicas = self.stack.replicas
        for _ in range(int(70 / POLL_S)):
            live = await self._in_flight()
            for i in range(len(replicas)):
                replica = replicas[(n + i) % len(replicas)]
                proc = replica.proc
                if proc is None or replica.address is None:
                    continue  # starting, or out of the rotation for a SIGTERM
                found = live.get(proc.pid)
                if found is not None and found[1]:
                    return replica, found[0], found[1]
            await asyncio.sleep(POLL_S)
        replica = replicas[n % len(replicas)]
        proc = replica.proc
        if proc is None or replica.address is None:
            return None
        return replica, await self._instance_of(proc.pid), 0

    async def _kill(self, n: int, _: Any) -> None:
        found = await self._busy_replica(n)
        if found is None:
            return
        replica, instance, pending_before = found
        assert self.stack.redis is not None
        client = redis_asyncio.Redis.from_url(self.stack.redis.url)
        try:
            leases = await self._live_leases(client)
        except Exception:
            leases = set()
        replica.signal(signal.SIGKILL)
        killed = time.time()
        await asyncio.to_thread(replica.wait, 10)
        self.kills.append((killed, instance))
        fault = Fault(
            "SIGKILL replica",
            killed,
            replica.name,
            {"instance": instance, "pending": pending_before, "leases": len(leases)},
        )
        self.faults.append(fault)
        restart = asyncio.create_task(self._restart_later(replica, 5.0))
        closed = slots = None
        while closed is None or slots is None:
            await asyncio.sleep(POLL_S)
            if closed is None and await self._pending(instance) == 0:
                closed = time.time() - killed
            if slots is None:
                try:
                    still = leases & await self._live_leases(client)
                except Exception:
                    continue  # Redis is being restarted: ask again
                if not still:
                    slots = time.time() - killed
            if time.time() - killed > 120:
                break
        await client.aclose()
        fault.recovered_s, fault.extra_s = closed, slots
        await restart

    async def _restart_later(self, replica: Any, delay: float) -> None:
        await asyncio.sleep(delay)
        await asyncio.to_thread(replica.start)

    async def _sigterm(self, n: int, _: Any) -> None:
        replica = self.stack.replicas[(n + 1) % len(self.stack.replicas)]
        if replica.proc is None:
            return
        # A rolling restart as the shipped manifests do it: out of the load balancer first, a
        # short pause (their preStop), then SIGTERM. A connection the kernel had queued for a
        # listener that then closes is reset unanswered, by any server: only the load balancer
        # can keep new connections away.
        replica.in_rotation = False
        await asyncio.sleep(PRE_STOP_S)
        replica.signal(signal.SIGTERM)
        sent = time.time()
        code = await asyncio.to_thread(replica.wait, 60)
        fault = Fault("SIGTERM replica", sent, replica.name, {"exit": code})
        fault.recovered_s = time.time() - sent  # drained and exited
        self.faults.append(fault)
        await asyncio.to_thread(replica.start)

    # -- shared state ----------------------------------------------------------------------------

    async def _redis(self, n: int, first_decided_after: Any) -> None:
        assert self.stack.redis is not None
        at = time.time()
        await asyncio.to_thread(self.stack.redis.restart_empty)
        back = time.time()
        fault = Fault("Redis killed, restarted empty", at, "redis")
        self.faults.append(fault)
        decided = await first_decided_after(back)
        fault.recovered_s = (decided - at) if decided else None
        self.redis_outages.append((at, (decided or back) + 10.0))

    async def _terminate_pg(self, n: int, first_decided_after: Any) -> None:
        at = time.time()
        count = await asyncio.to_thread(self.stack.terminate_database_connections)
        fault = Fault("PostgreSQL connections terminated", at, "postgres", {"terminated": count})
        self.faults.append(fault)
        decided = await first_decided_after(at)
        fault.recovered_s = (decided - at) if decided else None


def _text(member: object) -> str:
    """A sorted-set member as the client returns it (bytes: no `decode_responses`)."""
    return member.decode() if isinstance(member, bytes) else str(member)
