"""What the gateway processes share through Redis besides the limits, built on one scaffold.

    RedisLink    how a shared store reaches Redis: connection settings, key prefix, timeouts, clock
    SharedStore  the scaffold of each such store: its link, its id among the processes, the
                 background exchange (`ExchangeLoop`) and the pipelined connection its scripts
                 run on, the outage log, start and stop
    LocalSlots, LocalBreakers
                 a single process's slot board and breakers: nobody to share with, so they
                 do nothing (their answers are what the process decides alone)
    Sharing      what the composition root hands out: the fair-share state, the slot board and
                 the breakers, and the exchanges to start and stop (none with one process)

The stores built on the scaffold are `fairshare.RedisFairShareState`, `breakers.SharedBreakers`
and `slots.SharedSlots`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from redis import exceptions as redis_errors
from redis.asyncio import Redis

from mindrouter.routing.catalog import BackendState
from mindrouter.scheduling import FairShareState, Standing
from mindrouter.stores.outage import ExchangeLoop, Outage
from mindrouter.stores.ports import BreakerBoard, Gate, SlotBoard
from mindrouter.stores.redis_client import short_timeout_client
from mindrouter.stores.redis_pipe import PipedRedis, Script

# What a round trip to Redis may raise: the server's refusals, the network's, a timeout.
_REDIS_ERRORS: tuple[type[Exception], ...] = (redis_errors.RedisError, OSError, TimeoutError)


# Lua functions for the exchange scripts that keep a set of live processes, each publishing a
# hash of its own that expires unless renewed (prepended to those scripts). `present` renews
# this process's hash and its place in the set; `others` returns {id, fields} for every other
# live process, `key_of(id)` naming its hash, and drops from the set those whose hash expired.
PRESENCE_LUA = """
local function present(key, senders, me, ttl_ms)
  redis.call('PEXPIRE', key, ttl_ms)
  redis.call('SADD', senders, me)
  redis.call('PEXPIRE', senders, ttl_ms)
end
local function others(senders, me, key_of)
  local found = {}
  for _, other in ipairs(redis.call('SMEMBERS', senders)) do
    if other ~= me then
      local kv = redis.call('HGETALL', key_of(other))
      if #kv == 0 then
        redis.call('SREM', senders, other)
      else
        found[#found + 1] = {other, kv}
      end
    end
  end
  return found
end
"""


@dataclass(frozen=True, slots=True)
class RedisLink:
    """How a shared store reaches Redis: its pipelined connection connects as `client` does
    (address, TLS, credentials, database); `client` itself sends nothing. A script is never
    retried on that connection: it would push its writes twice."""

    client: Redis
    prefix: str = "mr:"  # of every key the store writes
    timeout: float = 2.0  # bounds each round trip
    retry_after: float = 1.0  # the pause after an exchange that failed
    owns_client: bool = False  # closed when the store stops
    clock: Callable[[], float] = time.monotonic

    @classmethod
    def from_url(cls, url: str, prefix: str = "mr:", *, timeout_seconds: float = 1.0) -> RedisLink:
        """A link owning a client with short timeouts."""
        client = short_timeout_client(url, max_connections=1, timeout_seconds=timeout_seconds)
        return cls(client, prefix, timeout=2 * timeout_seconds, owns_client=True)


@dataclass(frozen=True, slots=True)
class StoreWords:
    """What a shared store is called: the prefix of its keys (after the link's), its name in
    the logs, what it shares and what becomes of that while Redis is away, for the lines
    logged when Redis goes away and when it comes back."""

    keys: str
    what: str
    shares: str
    meanwhile: str

    @property
    def down(self) -> str:
        return f"{self.shares} {self.meanwhile}: Redis unreachable"

    @property
    def back(self) -> str:
        return f"{self.shares} shared through Redis again"


class SharedStore:
    """A store kept in step with the other gateway processes by a background exchange with
    Redis: `sync` is one exchange (True if Redis answered; errors are logged, never raised),
    run every `_pause()` seconds by the loop `start` starts; `stop` stops it, lets the store
    take its leave (`_leave`: push what is left, withdraw), and closes its connection (and an
    owned client). Each store names itself in `words` and lists its Lua `scripts`.

    The scripts run on a pipelined connection of the store's own (`PipedRedis`, opened as the
    link's client connects), not through the client's pool: under traffic a store exchanges
    tens of times a second, and a command through redis-py's client costs about three times as
    much CPU (its socket timeout starts a task per command)."""

    words: ClassVar[StoreWords]
    scripts: ClassVar[tuple[Script, ...]]

    def __init__(self, link: RedisLink, *, interval: float, min_gap: float = 0.0) -> None:
        words = self.words
        if not link.timeout > 0 or not link.retry_after > 0:
            raise ValueError(f"the {words.what}'s timeout and retry_after must be positive")
        self._client = link.client
        self._owns_client = link.owns_client
        self._pipe = PipedRedis.like(link.client, timeout=link.timeout, scripts=self.scripts)
        self._prefix = f"{link.prefix}{words.keys}"
        self._clock = link.clock
        self._me = uuid.uuid4().hex  # this process among the others
        self.interval = interval
        self.timeout = link.timeout
        self.retry_after = link.retry_after
        self._lock = asyncio.Lock()  # one exchange at a time
        self._loop = ExchangeLoop(
            self.sync,
            interval=self._pause,
            retry_after=link.retry_after,
            what=words.what,
            min_gap=min_gap,
        )
        self._outage = Outage(words.down, words.back, link.clock)
        self._last_ok = link.clock()  # when an exchange last reached Redis
        self.exchanges = 0

    @property
    def healthy(self) -> bool:
        """Whether the last exchange reached Redis."""
        return not self._outage.ongoing

    def _answered(self) -> None:
        """An exchange reached Redis."""
        self._last_ok = self._clock()
        self.exchanges += 1
        self._outage.succeeded()

    def _silent_for(self) -> float:
        """Seconds since an exchange last reached Redis."""
        return self._clock() - self._last_ok

    async def start(self) -> None:
        """Starts the background exchanges (a first one right away)."""
        self._loop.start()

    async def stop(self) -> None:
        # An exchange in progress may finish: cancelling it could leave its writes in doubt.
        await self._loop.stop(self.timeout + self.interval)
        try:
            await self._leave()
        finally:
            await self._pipe.aclose()
            if self._owns_client:
                await self._client.aclose()

    def _pause(self) -> float:
        """Seconds from one exchange to the next."""
        return self.interval

    async def sync(self) -> bool:
        raise NotImplementedError

    async def _leave(self) -> None:
        raise NotImplementedError

    @contextlib.asynccontextmanager
    async def _round_trip(
        self, error: type[Exception], *also: type[Exception]
    ) -> AsyncIterator[None]:
        """Translates what Redis raised (and `also`) into the store's own `error`, once."""
        try:
            yield
        except (*_REDIS_ERRORS, *also) as exc:
            raise error(f"{type(exc).__name__}: {exc}") from exc


class LocalBreakers:
    """The breakers of a single process: each backend's breaker decides alone."""

    async def claim_probe(self, backend: BackendState) -> bool:
        return True

    def changed(self) -> None:
        pass

    async def track(self, backends: Sequence[BackendState]) -> None:
        pass


class LocalSlots:
    """The slots of a single process: its own requests are the whole load, and every free slot
    is its own to hand out."""

    shared = False

    def attach(self, gate: Gate) -> None:
        pass

    async def track(self, backends: Sequence[BackendState]) -> None:
        pass

    def changed(self, backend: BackendState) -> None:
        pass

    def others_best(self) -> dict[str, Standing]:
        return {}

    def defer(self, model: str, best_here: Standing, now: float) -> float:
        return 0.0


@dataclass(frozen=True, slots=True)
class Sharing:
    """What this process shares with the others (or their stand-ins, with one process)."""

    fairshare: FairShareState
    slots: SlotBoard
    breakers: BreakerBoard
    exchanges: Sequence[SharedStore] = ()  # started in this order, and stopped

    async def start(self) -> None:
        for store in self.exchanges:
            await store.start()
