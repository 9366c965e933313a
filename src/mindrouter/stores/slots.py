"""Backend slots shared by every gateway process and replica, and the arbiter of free slots.

Without this, each process counts only its own requests against a backend's `max_concurrent`:
two replicas would each fill every backend, and each would hand its free slots to its own best
waiter even when a more deserving user waits at the other replica, which bends the fair shares.

The board. Every process publishes, in one hash in Redis that expires `ttl` after its last
exchange, its open requests per backend and, for each model it has requests waiting for, where
its most deserving waiter stands (`Standing`: tier and score of the fair queue's rank, and whose
it is). One Lua script per exchange replaces this process's hash and returns every other live
process's; `BackendState.others_in_flight` then holds their sum per backend, so the capacity
check and the backend score count the whole load. A process that dies stops counting after
`ttl` (2 s).

The arbiter. Before the gate gives a free slot to its own best waiter it calls `defer`: when
another process's best waiter for that model outranks it (and is another user), the slot is
left for up to `defer_limit` (50 ms) so that the other process takes it: it sees the slot free
at its next exchange, and its gate decides again after every exchange. Ranks are comparable
across processes because the counters and the pending output they are made of are shared (the
fair-share state); the wait bonus is a duration, whoever measures it. If the other process
does not take the slot in time (it is gone, or its own view differs), the slot goes to the
local waiter: a slot is never held for longer than the deferral.

Freshness. While any process has requests waiting, exchanges run every `busy_interval` (5 ms)
and at once when a slot is taken or given back here (never closer than `min_gap`), so a freed
slot reaches the deployment's best waiter within a few milliseconds. With nobody waiting they
run every `interval` (50 ms) and a taken slot wakes nothing: an uncontended deployment costs no
Redis traffic per request. The counts may be that stale, so two processes may both take the
last free slot of a backend at the same moment: the backend runs one request above its limit
for as long as it takes (its engine queues it), and no further slot is handed out until the
load is below the limit again.

Redis unreachable: each process keeps the other processes' last counts for `ttl`, then counts
only its own requests (each process may then fill every backend, as without Redis) and decides
alone; exchanges resume when Redis answers.

Keys: `{prefix}slots:of:{process}`, a hash (`b:{backend}` -> open requests, `m:{model}` -> a
standing), and `{prefix}slots:senders`, the set of processes that published one.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Protocol

from redis import exceptions as redis_errors
from redis.asyncio import Redis

from mindrouter.routing.catalog import BackendState
from mindrouter.scheduling import Standing
from mindrouter.stores.outage import Outage, exchange_forever
from mindrouter.stores.redis_client import short_timeout_client, text_of

DEFAULT_INTERVAL = 0.05
DEFAULT_BUSY_INTERVAL = 0.005
DEFAULT_MIN_GAP = 0.002
DEFAULT_DEFER_LIMIT = 0.05
DEFAULT_TTL = 2.0

# ARGV: key prefix ({prefix}slots:), this process's id, ttl in ms, then nb and nb × (backend,
# open requests), nm and nm × (model, standing). Reply: the other live processes' fields and
# values, flattened.
_EXCHANGE = """
local prefix, me, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local senders, mine = prefix .. 'senders', prefix .. 'of:' .. ARGV[2]
redis.call('DEL', mine)
local i = 4
local written = 0
for _, kind in ipairs({'b:', 'm:'}) do
  local n = tonumber(ARGV[i]); i = i + 1
  for _ = 1, n do
    redis.call('HSET', mine, kind .. ARGV[i], ARGV[i + 1])
    i = i + 2
  end
  written = written + n
end
if written > 0 then
  redis.call('PEXPIRE', mine, ttl)
  redis.call('SADD', senders, me)
  redis.call('PEXPIRE', senders, ttl)
else
  redis.call('SREM', senders, me)
end
local out = {}
for _, other in ipairs(redis.call('SMEMBERS', senders)) do
  if other ~= me then
    local kv = redis.call('HGETALL', prefix .. 'of:' .. other)
    if #kv == 0 then redis.call('SREM', senders, other) end
    for j = 1, #kv do out[#out + 1] = kv[j] end
  end
end
return out
"""


class SlotsUnavailable(Exception):
    """Redis did not complete an exchange."""


class Gate(Protocol):
    """What the board needs of the capacity gate: its best waiters, and a nudge to decide."""

    def best_waiting(self) -> dict[str, Standing]: ...

    def release(self, model: str) -> None: ...


class SharedSlots:
    """The slot board of `backends`, kept in step with every other process through Redis."""

    def __init__(
        self,
        client: Redis,
        backends: Sequence[BackendState],
        prefix: str = "mr:",
        *,
        interval: float = DEFAULT_INTERVAL,
        busy_interval: float = DEFAULT_BUSY_INTERVAL,
        min_gap: float = DEFAULT_MIN_GAP,
        defer_limit: float = DEFAULT_DEFER_LIMIT,
        ttl: float = DEFAULT_TTL,
        timeout: float = 1.0,
        retry_after: float = 1.0,
        owns_client: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        knobs = (interval, busy_interval, defer_limit, ttl, timeout, retry_after)
        if not all(k > 0 for k in knobs) or min_gap < 0:
            raise ValueError("the slot board's intervals and limits must be positive")
        self._client = client
        self._owns_client = owns_client
        self._backends = list(backends)
        self._prefix = f"{prefix}slots:"
        self._me = uuid.uuid4().hex
        self.interval = interval
        self.busy_interval = busy_interval
        self.min_gap = min_gap
        self.defer_limit = defer_limit
        self.ttl = ttl
        self.timeout = timeout
        self.retry_after = retry_after
        self._clock = clock
        self._script = client.register_script(_EXCHANGE)
        self._gate: Gate | None = None
        self._others_best: dict[str, Standing] = {}
        self._mine_best: dict[str, Standing] = {}
        self._deferring: dict[str, float] = {}  # model -> when its free slot was first left
        self._last_ok = clock()
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._outage = Outage(
            "backend slots counted per process: Redis unreachable",
            "backend slots shared through Redis again",
            clock,
        )
        self.exchanges = 0

    @classmethod
    def from_url(
        cls,
        url: str,
        backends: Sequence[BackendState],
        prefix: str = "mr:",
        *,
        timeout_seconds: float = 1.0,
    ) -> SharedSlots:
        # One connection for the exchange and one for stop()'s last one.
        client = short_timeout_client(url, max_connections=2, timeout_seconds=timeout_seconds)
        return cls(client, backends, prefix, timeout=2 * timeout_seconds, owns_client=True)

    def attach(self, gate: Gate) -> None:
        """The gate whose waiters this process publishes and which decides after exchanges."""
        self._gate = gate

    @property
    def healthy(self) -> bool:
        """Whether the last exchange reached Redis."""
        return not self._outage.ongoing

    @property
    def contended(self) -> bool:
        """Whether some process, this one included, has requests waiting for a slot."""
        return bool(self._others_best or self._mine_best or self._deferring)

    def others_best(self) -> dict[str, Standing]:
        """model -> the most deserving waiter of the other processes, as last exchanged."""
        return dict(self._others_best)

    # -- the request path ---------------------------------------------------------------------

    def changed(self) -> None:
        """A slot was taken or given back here: tell the others at once if anyone waits."""
        if self.contended:
            self._wake.set()

    def defer(self, model: str, best_here: Standing, now: float) -> float:
        other = self._others_best.get(model)
        if other is None or other.user == best_here.user or not other.outranks(best_here):
            self._deferring.pop(model, None)
            return 0.0
        since = self._deferring.get(model)
        if since is None:
            since = self._deferring[model] = now
            self._wake.set()  # the others learn at once that the slot is free
        left = since + self.defer_limit - now
        if left <= 0:
            del self._deferring[model]
            return 0.0
        return left

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._task is None:
            self._stopping.clear()
            run = exchange_forever(
                self.sync,
                self._stopping,
                interval=lambda: self.busy_interval if self.contended else self.interval,
                retry_after=self.retry_after,
                what="slot board",
                wake=self._wake,
                min_gap=self.min_gap,
            )
            self._task = asyncio.create_task(run, name="slots-sync")

    async def stop(self) -> None:
        """Stops the exchanges and withdraws this process from the board (its slots are free
        for the others at once), then closes an owned client."""
        task, self._task = self._task, None
        if task is not None:
            self._stopping.set()
            self._wake.set()
            _, running = await asyncio.wait({task}, timeout=self.timeout + self.interval)
            if running:
                task.cancel()
                await asyncio.wait({task})
        try:
            async with self._lock:
                await self._exchange({}, {})
        except SlotsUnavailable as exc:
            self._outage.failed(str(exc))
        finally:
            if self._owns_client:
                await self._client.aclose()

    async def sync(self) -> bool:
        """One exchange: publish this process's slots and best waiters, adopt the others'. True
        if Redis answered; errors are logged, never raised."""
        async with self._lock:
            gate = self._gate
            best = gate.best_waiting() if gate is not None else {}
            slots = {b.name: b.in_flight for b in self._backends if b.in_flight > 0}
            try:
                others_slots, others_best = _parse(await self._exchange(slots, best))
            except SlotsUnavailable as exc:
                self._outage.failed(str(exc))
                if self._clock() - self._last_ok > self.ttl:
                    self._forget_others()  # in Redis their entries have expired by now too
                return False
            for b in self._backends:
                b.others_in_flight = others_slots.get(b.name, 0)
            self._others_best = others_best
            self._mine_best = best
            self._last_ok = self._clock()
            self.exchanges += 1
            self._outage.succeeded()
        if gate is not None:
            # Capacity may have freed elsewhere, or the others' best waiters changed.
            for model in best:
                gate.release(model)
        return True

    # -- internals ------------------------------------------------------------------------------

    def _forget_others(self) -> None:
        for b in self._backends:
            b.others_in_flight = 0
        self._others_best = {}

    async def _exchange(self, slots: dict[str, int], best: dict[str, Standing]) -> list[str]:
        args: list[str | int] = [self._prefix, self._me, int(self.ttl * 1000), len(slots)]
        for name, n in slots.items():
            args += [name, n]
        args.append(len(best))
        for model, s in best.items():
            args += [model, f"{s.tier} {s.score!r} {s.user}"]
        try:
            async with asyncio.timeout(self.timeout):
                reply = await self._script(keys=[], args=args)
        except (redis_errors.RedisError, OSError, TimeoutError) as exc:
            raise SlotsUnavailable(f"{type(exc).__name__}: {exc}") from exc
        return [text_of(v) for v in reply]


def _parse(values: list[str]) -> tuple[dict[str, int], dict[str, Standing]]:
    if len(values) % 2:
        raise SlotsUnavailable(f"unexpected reply of {len(values)} values from the script")
    slots: dict[str, int] = {}
    best: dict[str, Standing] = {}
    for field, value in zip(values[::2], values[1::2], strict=True):
        kind, name = field[:2], field[2:]
        try:
            if kind == "b:":
                slots[name] = slots.get(name, 0) + int(value)
                continue
            tier, score, user = value.split(" ", 2)
            standing = Standing(int(tier), float(score), user)
        except ValueError:
            raise SlotsUnavailable(f"unreadable entry {field!r} on the slot board") from None
        if kind == "m:":
            held = best.get(name)
            if held is None or standing.outranks(held):
                best[name] = standing
    return slots, best
