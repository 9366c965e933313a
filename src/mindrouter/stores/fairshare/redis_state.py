"""Fair-share counters shared through Redis by every gateway process: a local mirror, synced.

The scheduler's port (`mindrouter.scheduling.FairShareState`) is synchronous: a decision reads one
counter per waiting user and must stay well under a millisecond, so it cannot wait for a network.
`RedisFairShareState` therefore answers every call from a local mirror (`mirror.py`) and a
background task exchanges with Redis every `sync_interval` seconds (default 50 ms; every 10 ms,
and at once after a dispatch, while requests wait for slots in the deployment, as `contended`
says), in one round trip (one Lua script, `lua.py`): it pushes this process's pending writes and
pulls back the merged value of every account and floor this process uses.

Quiet spells. A process whose mirror nobody read or wrote during a whole pause, with nothing to
push and no output pending, exchanges every `idle_interval` (1 s) instead, and not at all while
it has never used an account (there is nothing to pull). Its first read or write after such a
pause exchanges at once, so the values it decides on are as fresh as with the short interval
from its second decision on; the first one may see values up to `idle_interval` older, which
can only swap two users whose counters are within a second of the cluster's service of each
other (~320 units on the testbed below: about one request's cost, which the VTC bound already
allows), and only when several requests wait at once.

Merging. Writes are pushed as operations, never as values: a charge adds, a lift and a floor raise
take a maximum, applied in Redis to the shared value of the moment. Charges from any number of
processes therefore add up to the same total in any order (up to float rounding), and lifts and
floors are max-merges. The one place where order matters is a lift racing a charge of the same
account in another process; the difference is at most that charge, i.e. at most one sync
interval of one account's service. After each exchange, every process reads the same values:
Redis is the single point where the operations are serialised.

Staleness bound. With interval I and round trip r, a write is in Redis at most I + 2r after it
was made, and in every other process's mirror at most 2·(I + 2r) after it was made (~105 ms
with the defaults on a local network). Until then the other processes decide on a counter that
misses at most the service delivered to that account in that time. On the benchmark testbed (4
slots × 40 tokens/s, output tokens cost 2) the whole cluster delivers ~32 units in 100 ms, while
one request costs several hundred and a 60 s window ~19,000: a stale read can only swap the order
of two users whose counters are within ~32 units of each other (a near tie, which the VTC bound of
about one request's cost already allows), and it moves a share by at most ~0.2 points per window,
far inside the 5% target. The same holds per model at any scale, since service per interval and
service per window grow together.

Redis unreachable. Nothing on the request path ever waits for Redis or sees its errors: reads and
writes keep working on the mirror, so the process schedules fairly among its own users (per
process, as without Redis) and keeps every write pending. Redis errors are translated once, into
`FairShareUnavailable`, in the exchange; the background task logs a warning when the outage
starts and when it ends, calls `on_degraded(reason)` for each failed exchange (a metric hook),
and retries every `retry_after` seconds. A batch whose outcome is unknown (a timeout after the
script may have run) is re-sent with the same sequence number and applied at most once; the
writes made meanwhile follow in the next exchange. When Redis answers again every process pulls
the merged counters and they agree again.

Give an injected client short socket timeouts and no retries (`RedisLink.from_url` builds
one): each exchange is bounded by `timeout` anyway, and redis-py's own retry of a script would
bypass the sequence check. Targets a single Redis server (or a primary behind Sentinel): the
script touches keys of several models, which Redis Cluster would reject.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

from mindrouter.observability.logging import log
from mindrouter.stores.fairshare import lua
from mindrouter.stores.fairshare.mirror import Account, Batch, LocalMirror, Pulled
from mindrouter.stores.redis_client import text_of
from mindrouter.stores.redis_pipe import Script
from mindrouter.stores.shared import RedisLink, SharedStore, StoreWords

DEFAULT_SYNC_INTERVAL = 0.05
# While requests wait for slots somewhere, decisions follow each other closely: exchange this
# often, and at once (at most every BUSY_MIN_GAP) after a dispatch here, so that another process
# sees a user's new stream before it decides again.
DEFAULT_BUSY_INTERVAL = 0.01
BUSY_MIN_GAP = 0.005
DEFAULT_IDLE_INTERVAL = 1.0
_SENDER_TTL_S = 86_400
_EXCHANGE = Script(lua.EXCHANGE)


class FairShareUnavailable(Exception):
    """Redis did not complete an exchange (unreachable, timed out, or refused the script)."""


def _num(value: float) -> str:
    return repr(float(value))


class RedisFairShareState(SharedStore):
    """`FairShareState` shared through Redis; see the module docstring for the design."""

    words = StoreWords("fairshare:", "fair-share", "fair-share counters", "kept locally")
    scripts = (_EXCHANGE,)

    def __init__(
        self,
        link: RedisLink,
        sync_interval: float = DEFAULT_SYNC_INTERVAL,
        *,
        idle_interval: float = DEFAULT_IDLE_INTERVAL,
        forget_after: float = 600.0,
        on_degraded: Callable[[str], None] | None = None,
    ) -> None:
        if not sync_interval > 0:
            raise ValueError("sync_interval must be positive")
        super().__init__(link, interval=sync_interval, min_gap=min(BUSY_MIN_GAP, sync_interval))
        self.sync_interval = sync_interval
        self.busy_interval = min(DEFAULT_BUSY_INTERVAL, sync_interval)
        self.idle_interval = max(sync_interval, idle_interval)
        self._touched = False  # the mirror was read or written during the current pause
        self._quiet = False  # the pause running now is the idle one: the next touch ends it
        self._on_degraded = on_degraded
        self._sender_key = f"{self._prefix}sent:{self._me}"
        # A process's pending output outlives it by this much at most (and survives this many
        # missed exchanges): long against the exchange interval, short against a stream.
        self._pending_ttl_ms = max(2000, int(sync_interval * 40_000))
        self._mirror = LocalMirror(forget_after)
        self._seq = 0
        self._in_doubt: tuple[int, Batch] | None = None  # sent, outcome unknown
        # Whether requests wait for slots in the deployment (set by the composition root).
        self.contended: Callable[[], bool] = lambda: False
        self.failures = 0

    # -- FairShareState: answered from the mirror, never waits -----------------------------------

    def get(self, model: str, user: str) -> float:
        self._touch()
        return self._mirror.get(model, user)

    def get_many(self, model: str, users: Iterable[str]) -> dict[str, float]:
        self._touch()
        return self._mirror.get_many(model, users)

    def charge(self, model: str, user: str, amount: float) -> float:
        if not math.isfinite(amount):
            raise ValueError(f"a charge must be finite, got {amount}")
        self._touch()
        return self._mirror.charge(model, user, amount)

    def lift(self, model: str, user: str, to: float) -> float:
        if not math.isfinite(to):
            raise ValueError(f"a lift must be finite, got {to}")
        self._touch()
        return self._mirror.lift(model, user, to)

    def floor(self, model: str) -> float:
        self._touch()
        return self._mirror.floor(model)

    def raise_floor(self, model: str, to: float) -> float:
        if not math.isfinite(to):
            raise ValueError(f"a floor must be finite, got {to}")
        self._touch()
        return self._mirror.raise_floor(model, to)

    def add_pending(self, model: str, user: str, amount: float) -> None:
        self._touch()
        self._mirror.add_pending(model, user, amount)
        if amount > 0 and self.contended():
            self._loop.poke()  # a dispatch while others wait: tell them now

    def pending_many(self, model: str, users: Iterable[str]) -> dict[str, float]:
        self._touch()
        return self._mirror.pending_many(model, users)

    # -- the exchange ----------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Accounts and floors with writes not yet known to be in Redis."""
        doubt = self._in_doubt[1] if self._in_doubt else None
        return self._mirror.pending + (len(doubt.ops) + len(doubt.floors) if doubt else 0)

    def snapshot(self) -> Mapping[str, Mapping[str, float]]:
        """The counters this process currently sees, model -> user -> counter."""
        return self._mirror.snapshot()

    async def _leave(self) -> None:
        """Pushes what is pending (logged if Redis cannot take it); a batch still in doubt when
        its exchange was cancelled is re-sent."""
        await self.flush()

    async def flush(self) -> bool:
        """Exchanges until nothing is pending; False (logged) if Redis could not take it all."""
        for _ in range(3):  # a batch in doubt, then what is pending, then what came meanwhile
            if not await self.sync():
                left = self.pending
                if left:
                    log.warning("fair-share writes not pushed to Redis", pending=left)
                return False
            if not self.pending:
                return True
        return not self.pending

    async def sync(self) -> bool:
        """One exchange with Redis: pushes the pending writes (or re-sends a batch in doubt) and
        pulls the merged values. True if Redis answered; errors are logged, never raised."""
        async with self._lock:
            if self._in_doubt is None:
                batch = self._mirror.take_batch(self._clock())
                if not batch:
                    return True
                self._seq += 1
                self._in_doubt = (self._seq, batch)
            seq, batch = self._in_doubt
            try:
                pulled = await self._exchange(seq, batch)
            except FairShareUnavailable as exc:
                self._degraded(str(exc))
                if self._silent_for() > self._pending_ttl_ms / 1000:
                    # In Redis the other processes' parts have expired by now: so here.
                    self._mirror.forget_others_pending()
                return False
            self._in_doubt = None
            self._mirror.merge(pulled)
            self._answered()
            return True

    # -- internals ------------------------------------------------------------------------------

    def _touch(self) -> None:
        self._touched = True
        if self._quiet:
            self._quiet = False
            self._loop.poke()  # the first touch after a quiet spell: fresh values at once

    def _pause(self) -> float:
        """How long the exchange loop rests after an exchange (see Quiet spells)."""
        if self.contended():
            return self.busy_interval
        if self._touched or self._in_doubt is not None or self._mirror.busy:
            self._touched = False
            return self.sync_interval
        self._quiet = True
        return self.idle_interval if self._mirror.in_use else math.inf

    def _degraded(self, reason: str) -> None:
        self.failures += 1
        self._outage.failed(reason, pending=self.pending)
        if self._on_degraded is not None:
            self._on_degraded(reason)

    async def _exchange(self, seq: int, batch: Batch) -> Pulled:
        keys = [f"{self._prefix}floors", self._sender_key]
        index: dict[str, int] = {}

        def key_of(model: str) -> int:
            k = index.get(model)
            if k is None:
                keys.append(f"{self._prefix}counters:{model}")
                k = index[model] = len(keys)  # Lua's KEYS are 1-based
            return k

        args: list[str | int] = [seq, _SENDER_TTL_S, len(batch.ops)]
        for (model, user), op in batch.ops.items():
            at_least = "" if op.at_least == -math.inf else _num(op.at_least)
            args += [key_of(model), user, _num(op.add), at_least]
        args.append(len(batch.floors))
        for model, to in batch.floors.items():
            args += [model, _num(to)]
        args.append(len(batch.pull))
        for model, user in batch.pull:
            args += [key_of(model), user]
        args.append(len(batch.pull_floors))
        args += batch.pull_floors
        args += [self._pending_ttl_ms, self._prefix, self._me]
        args.append(len(batch.publish))
        for model, by_user in batch.publish.items():
            args += [model, len(by_user)]
            for user, value in by_user.items():
                args += [user, _num(value)]
        async with self._round_trip(FairShareUnavailable):
            reply = await _EXCHANGE.call(self._pipe, keys, args)
        return _parse(batch.pull, batch.pull_floors, reply)


def _parse(pull: list[Account], pull_floors: list[str], reply: Sequence[object]) -> Pulled:
    values = [text_of(v) for v in reply]
    head = len(pull) + len(pull_floors)
    if len(values) < head + len(pull_floors):
        raise FairShareUnavailable(f"unexpected reply of {len(reply)} values from the script")
    counters = {acct: float(v) if v else None for acct, v in zip(pull, values, strict=False)}
    floors = {
        model: float(v) if v else None
        for model, v in zip(pull_floors, values[len(pull) : head], strict=True)
    }
    pending: dict[str, dict[str, float]] = {}
    i = head
    for model in pull_floors:
        k = int(values[i])
        by_user: dict[str, float] = {}
        for j in range(i + 1, i + 1 + 2 * k, 2):
            by_user[values[j]] = by_user.get(values[j], 0.0) + float(values[j + 1])
        if by_user:
            pending[model] = by_user
        i += 1 + 2 * k
    if i != len(values):
        raise FairShareUnavailable(f"unexpected reply of {len(reply)} values from the script")
    return Pulled(counters, floors, pending)
