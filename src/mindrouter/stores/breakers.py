"""Circuit breakers shared through Redis by every gateway process and replica.

The breaker (`mindrouter.routing.breaker`) is read synchronously on every request, so it cannot
wait for a network: each process keeps its own copy of every backend's breaker and a background
task exchanges with Redis every `interval` (default 100 ms), at once after a failure; every
`idle_interval` (0.5 s) while this process has no request open on any backend, so an idle
gateway learns of a breaker opened elsewhere within half a second, and its first request after
the pause may find one a backend another process has just opened on. One Lua
script per exchange pushes what happened here since the last one (a success's reset, then the
failures counted after it) and returns the merged state of every backend. Pushing events, not
values, lets failures from several processes add up: three failures spread over three replicas
open the breaker everywhere, and a success anywhere closes it everywhere.

The probe. In half-open state exactly one request in the whole deployment may go to the
backend. That one moment waits for Redis: `claim_probe` sets a lease on the backend's state
(`probe_until`, default 190 s: longer than an attempt may take) atomically; every other process
sees the probe running and keeps out. The probe's verdict (a success resets, a failure reopens)
or its abandonment (the client left) clears the lease; a process that dies while probing leaves
it to expire.

Times are Redis's own (`TIME` inside the scripts), so processes with different clocks agree on
when a cooldown ends; each process turns "open for another N s" into its own monotonic clock.

Redis unreachable: the breakers work per process, as without Redis; events are kept and pushed
when Redis answers again, and a probe is claimed locally. An exchange whose reply was lost may
have been applied: its events are pushed again, so a failure may count twice (the breaker opens
one failure early). A success is pushed when the breaker this process sees has failures or a
probe; one that lands within an exchange interval of another process's first failures is not,
so "consecutive" is exact up to that interval.

The probe lease names its owner (this process's id), and only the owner's release clears it: a
release from a process whose claim was refused, or sent twice, cannot free another's probe.

Keys: `{prefix}breaker:{backend}`, a hash (failures, open_until, probe_until, probe_owner,
opened), kept for a day after its last change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mindrouter.routing.breaker import Unsent
from mindrouter.routing.catalog import BackendState
from mindrouter.stores.redis_client import text_of
from mindrouter.stores.redis_pipe import Script
from mindrouter.stores.shared import RedisLink, SharedStore, StoreWords

_TTL_S = 86_400

# KEYS: one hash per backend. ARGV: threshold, cooldown, ttl, owner, then per key (reset,
# failures, release). Reply: per key failures, seconds until the cooldown ends, probing (0/1),
# openings, as strings (Lua numbers would be truncated to integers).
_EXCHANGE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local threshold, cooldown, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local owner = ARGV[4]
local out = {}
for i, key in ipairs(KEYS) do
  local a = 4 + (i - 1) * 3
  local reset, fails, release = ARGV[a + 1] == '1', tonumber(ARGV[a + 2]), ARGV[a + 3] == '1'
  local h = redis.call('HMGET', key, 'failures', 'open_until', 'probe_until', 'opened',
    'probe_owner')
  local failures, open_until = tonumber(h[1]) or 0, tonumber(h[2]) or 0
  local probe_until, opened = tonumber(h[3]) or 0, tonumber(h[4]) or 0
  if reset then failures, open_until, probe_until = 0, 0, 0 end
  if release and h[5] == owner then probe_until = 0 end
  if fails > 0 then
    local before = failures
    failures = failures + fails
    probe_until = 0
    if failures >= threshold then
      if before < threshold or now >= open_until then opened = opened + 1 end
      open_until = now + cooldown
    end
  end
  if reset or release or fails > 0 then
    redis.call('HSET', key, 'failures', failures, 'open_until', string.format('%.6f', open_until),
      'probe_until', string.format('%.6f', probe_until), 'opened', opened)
    redis.call('EXPIRE', key, ttl)
  end
  local probing = 0
  if probe_until > now then probing = 1 end
  out[#out + 1] = tostring(failures)
  out[#out + 1] = string.format('%.6f', open_until - now)
  out[#out + 1] = tostring(probing)
  out[#out + 1] = tostring(opened)
end
return out
"""

# KEYS[1]: the backend's hash. ARGV: threshold, lease, ttl, owner. Reply 1: the caller may send
# (the probe is its own, or the breaker is closed after all); 0: open, or another probe runs.
_CLAIM = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local h = redis.call('HMGET', KEYS[1], 'failures', 'open_until', 'probe_until')
local failures, open_until = tonumber(h[1]) or 0, tonumber(h[2]) or 0
local probe_until = tonumber(h[3]) or 0
if failures < tonumber(ARGV[1]) then return 1 end
if now < open_until or probe_until > now then return 0 end
redis.call('HSET', KEYS[1], 'probe_until', string.format('%.6f', now + tonumber(ARGV[2])),
  'probe_owner', ARGV[4])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3]))
return 1
"""


@dataclass(frozen=True, slots=True)
class BreakerTiming:
    """How often the breakers exchange with Redis, and how long a probe's claim holds (s)."""

    interval: float = 0.1  # between exchanges while a breaker is open here
    idle_interval: float = 0.5  # while no breaker is open here
    # How long the process that claimed a half-open backend's probe holds the claim.
    probe_lease: float = 190.0

    def __post_init__(self) -> None:
        if not self.interval > 0 or not self.probe_lease > 0:
            raise ValueError("interval and probe_lease must be positive")


_EXCHANGE_SCRIPT = Script(_EXCHANGE)
_CLAIM_SCRIPT = Script(_CLAIM)


class BreakersUnavailable(Exception):
    """Redis did not complete an exchange or a claim."""


class SharedBreakers(SharedStore):
    """The breakers of `backends`, kept in step with every other process through Redis."""

    words = StoreWords("breaker:", "breaker", "circuit breakers", "kept locally")
    scripts = (_EXCHANGE_SCRIPT, _CLAIM_SCRIPT)

    def __init__(
        self,
        link: RedisLink,
        backends: Sequence[BackendState],
        timing: BreakerTiming = BreakerTiming(),
    ) -> None:
        super().__init__(link, interval=timing.interval)
        self._backends: list[BackendState] = []
        self._keys: list[str] = []
        self._key_of: dict[str, str] = {}
        self._set_backends(backends)
        self.idle_interval = max(timing.interval, timing.idle_interval)
        self.probe_lease = timing.probe_lease

    def _set_backends(self, backends: Sequence[BackendState]) -> None:
        self._backends = list(backends)
        self._keys = [f"{self._prefix}{b.name}" for b in self._backends]
        self._key_of = dict(zip((b.name for b in self._backends), self._keys, strict=True))
        for b in self._backends:
            b.breaker.share()

    async def track(self, backends: Sequence[BackendState]) -> None:
        """Shares the breakers of `backends` from now on (the catalog changed); between two
        exchanges, so that no exchange mixes the old list with the new."""
        async with self._lock:
            self._set_backends(backends)

    def _pause(self) -> float:
        busy = any(b.in_flight for b in self._backends)
        return self.interval if busy else self.idle_interval

    # -- the request path ---------------------------------------------------------------------

    def changed(self) -> None:
        """Something worth telling the other processes happened (a failure): exchange now."""
        self._loop.poke()

    async def claim_probe(self, backend: BackendState) -> bool:
        """Whether this process may send the half-open probe it has just claimed locally
        (`Breaker.on_attempt`) to `backend`: True for exactly one caller in the deployment until
        the probe ends. While Redis is unreachable the local claim stands."""
        b = backend.breaker
        try:
            async with self._round_trip(BreakersUnavailable):
                granted = await _CLAIM_SCRIPT.call(
                    self._pipe,
                    [self._key_of[backend.name]],
                    [b.threshold, repr(self.probe_lease), _TTL_S, self._me],
                )
        except BreakersUnavailable as exc:
            self._outage.failed(str(exc))
            return True
        except BaseException:
            b.on_abandoned()  # cancelled while asking: the lease, if set, is given back
            raise
        if not int(granted):
            # Another process probes (or the breaker reopened there): keep out until the next
            # exchange says otherwise.
            b.probe_here = False
            b.probing = True
            return False
        return True

    # -- the exchange ----------------------------------------------------------------------------

    async def _leave(self) -> None:
        """Pushes what is left."""
        await self.sync()

    async def sync(self) -> bool:
        """One exchange: push every breaker's events, adopt the merged state. True if Redis
        answered; errors are logged, never raised."""
        async with self._lock:
            taken = [b.breaker.take_unsent() for b in self._backends]
            try:
                reply = await self._exchange(taken)
            except BreakersUnavailable as exc:
                self._give_back(taken)
                self._outage.failed(str(exc))
                return False
            except BaseException:
                self._give_back(taken)  # cancelled (stop): the final sync pushes them
                raise
            now = self._clock()
            for i, b in enumerate(self._backends):
                failures, open_in, probing, opened = reply[4 * i : 4 * i + 4]
                b.breaker.adopt(int(failures), float(open_in), probing == "1", int(opened), now)
            self._answered()
            return True

    # -- internals ------------------------------------------------------------------------------

    async def _exchange(self, taken: Sequence[Unsent]) -> list[str]:
        if not self._backends:
            return []
        first = self._backends[0].breaker
        args: list[str | int] = [first.threshold, repr(first.cooldown), _TTL_S, self._me]
        for events in taken:
            args += [int(events.reset), events.failures, int(events.release_probe)]
        async with self._round_trip(BreakersUnavailable):
            reply = await _EXCHANGE_SCRIPT.call(self._pipe, self._keys, args)
        values = [text_of(v) for v in reply]
        if len(values) != 4 * len(self._backends):
            raise BreakersUnavailable(f"unexpected reply of {len(values)} values from the script")
        return values

    def _give_back(self, taken: Sequence[Unsent]) -> None:
        for b, events in zip(self._backends, taken, strict=True):
            b.breaker.give_back(events)
