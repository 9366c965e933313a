"""API key -> Principal, fast on the request path and quick to forget revoked keys.

The first time a process sees a key it looks up the prefix (one indexed query), compares the
SHA-256 digest in constant time, checks status, and verifies the Argon2 hash in a worker thread.
After that the key is a dict lookup: the digest maps to its Principal in a bounded LRU, and
only the expiry is re-checked against the clock.

Freshness across workers and replicas: every change that can invalidate a key (revoke, expiry,
user deactivation, group or user limits) bumps a one-row `auth_epoch` counter in the same
transaction. Each process polls it every `poll_interval` seconds (one tiny query per process,
not per request) and clears its cache when it moves. Cached answers are trusted only for
`max_staleness` seconds after the start of the last successful poll, so a change reaches every
process within that bound even when the poller is late or the database is unreachable (then
requests fall back to the database, which fails closed).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from mindrouter.errors import RateLimited, Unauthenticated
from mindrouter.identity.attempts import FailedAttempts
from mindrouter.identity.key_cache import CachedPrincipal, KeyCache
from mindrouter.identity.keys import (
    INVALID,
    KeyHasher,
    display_prefix,
    key_from_headers,
    key_prefix,
)
from mindrouter.identity.principal import Principal, principal_for
from mindrouter.observability.logging import log
from mindrouter.stores.ports import KeyLookup
from mindrouter.stores.records import KeyRecord
from mindrouter.tasks import stop_task

REVOKED = "API key revoked"
EXPIRED = "API key expired"
INACTIVE = "the user account of this API key is inactive"


@dataclass(frozen=True)
class AuthTuning:
    """How long answers are cached and trusted, how often the epoch is polled and last uses
    written, and how many failed attempts a minute a client or key prefix may make (0: any)."""

    cache_size: int = 10_000
    cache_ttl: float = 30.0
    poll_interval: float = 0.5
    max_staleness: float = 1.0
    touch_interval: float = 30.0
    failures_per_minute: int = 0

    def __post_init__(self) -> None:
        if self.poll_interval >= self.max_staleness:
            raise ValueError("poll_interval must be shorter than max_staleness")


class Authenticator:
    def __init__(
        self,
        store: KeyLookup,
        *,
        hasher: KeyHasher | None = None,
        tuning: AuthTuning | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        tuning = tuning or AuthTuning()
        self._store = store
        self._hasher = hasher or KeyHasher()
        self._cache = KeyCache(tuning.cache_size, tuning.cache_ttl)
        self._tuning = tuning
        self._clock = clock
        self._monotonic = monotonic
        self._epoch: int | None = None
        self._fresh_until = float("-inf")
        self._uses: dict[int, float] = {}
        self._inflight: dict[str, asyncio.Task[Principal]] = {}
        self._poller: asyncio.Task[None] | None = None
        # The poller reads the epoch only while requests come (`_asked`); the first request
        # after a quiet spell reads it itself (`_catch_up`), once for all that arrive meanwhile.
        self._asked = False
        self._catching_up: asyncio.Future[None] | None = None
        self._failures = FailedAttempts(tuning.failures_per_minute, monotonic)

    # -- the request path ----------------------------------------------------------------------

    async def authenticate(
        self, headers: Mapping[str, str], source: str | None = None
    ) -> Principal:
        """The principal for the request's key; raises Unauthenticated saying why in general.

        `source` is the client's address: failures are counted against it and against the key's
        prefix, and past `failures_per_minute` further attempts get RateLimited. Only well-formed
        keys count (only they cost a lookup), and a key this process has verified before is
        never held up by the counts."""
        key = key_from_headers(headers)
        digest = hashlib.sha256(key.encode()).hexdigest()
        self._asked = True
        now = self._monotonic()
        if now > self._fresh_until and self._poller is not None:
            await self._catch_up()
            now = self._monotonic()
        entry = self._cache.get(digest, now) if now <= self._fresh_until else None
        if entry is None:
            return await self._resolve_checked(key, digest, source)
        wall = self._clock()
        if entry.expires_ts is not None and wall >= entry.expires_ts:
            self._cache.discard(digest)
            raise Unauthenticated(EXPIRED)
        self._uses[entry.principal.key_id] = wall
        return entry.principal

    async def _resolve_checked(self, key: str, digest: str, source: str | None) -> Principal:
        if self._cache.knows(digest):
            return await self._resolve_once(key, key_prefix(key), digest)
        prefix = key_prefix(key)
        names = [f"prefix:{prefix}", *([f"ip:{source}"] if source else [])]
        wait = self._failures.retry_after(names)
        if wait is not None:
            raise RateLimited("too many failed API key attempts; retry later", retry_after=wait)
        try:
            return await self._resolve_once(key, prefix, digest)
        except Unauthenticated as exc:
            # A revoked or expired key is one its holder knew; only wrong secrets are guesses.
            if exc.message == INVALID:
                self._failures.failed(names)
            raise

    def invalidate(self) -> None:
        """Forget every cached principal now (this process only; others follow the epoch)."""
        self._cache.clear()

    async def _resolve_once(self, key: str, prefix: str, digest: str) -> Principal:
        # Concurrent first requests with one key share a single lookup and Argon2 run. It runs as
        # its own task so that the client which started it going away does not fail the others.
        task = self._inflight.get(digest)
        if task is None:
            task = asyncio.create_task(self._resolve(key, prefix, digest))
            self._inflight[digest] = task
            task.add_done_callback(lambda done: self._resolved(digest, done))
        return await asyncio.shield(task)

    def _resolved(self, digest: str, task: asyncio.Task[Principal]) -> None:
        self._inflight.pop(digest, None)
        if not task.cancelled():
            task.exception()  # marks it retrieved: a failure nobody awaited is not logged again

    async def _resolve(self, key: str, prefix: str, digest: str) -> Principal:
        generation = self._cache.generation
        record = _matching(await self._store.find_keys(prefix), digest)
        if record is None:
            raise Unauthenticated(INVALID)
        wall = self._clock()
        expires_ts = record.expires_at.timestamp() if record.expires_at is not None else None
        if record.revoked_at is not None:
            raise Unauthenticated(REVOKED)
        if expires_ts is not None and wall >= expires_ts:
            raise Unauthenticated(EXPIRED)
        if not record.user_active:
            raise Unauthenticated(INACTIVE)
        if not self._cache.was_verified(digest, record.secret_hash):
            ok = await asyncio.to_thread(self._hasher.verify, record.secret_hash, key)
            if not ok:
                raise Unauthenticated(INVALID)
            self._cache.remember_verified(digest, record.secret_hash)
        principal = principal_for(record, display_prefix(prefix))
        entry = CachedPrincipal(principal, expires_ts, self._monotonic())
        self._cache.put(digest, entry, generation)
        self._uses[record.key_id] = wall
        return principal

    # -- the epoch poller ------------------------------------------------------------------------

    async def start(self) -> None:
        """Reads the epoch once (so the cache is usable at once), then polls in the background."""
        if self._poller is not None:
            return
        await self._poll_safely()
        self._poller = asyncio.create_task(self._poll_forever(), name="auth-epoch-poller")

    async def stop(self) -> None:
        task, self._poller = self._poller, None
        if task is not None:
            await stop_task(task)
        await self._flush_uses()
        self._fresh_until = float("-inf")

    async def poll(self) -> None:
        """One poll: read the epoch, clear the cache if it moved, extend the trust window."""
        started = self._monotonic()
        epoch = await self._store.auth_epoch()
        if epoch != self._epoch:
            self._epoch = epoch
            self._cache.clear()
        self._fresh_until = started + self._tuning.max_staleness

    async def _poll_safely(self) -> None:
        try:
            await self.poll()
        except Exception as exc:
            # The loop must outlive a database outage; meanwhile the trust window runs out and
            # requests go to the database themselves.
            log.warning("auth epoch poll failed", error=str(exc))

    async def _catch_up(self) -> None:
        pending = self._catching_up
        if pending is None or pending.done():
            pending = self._catching_up = asyncio.ensure_future(self._poll_safely())
        await asyncio.shield(pending)

    async def _poll_forever(self) -> None:
        last_flush = self._monotonic()
        while True:
            await asyncio.sleep(self._tuning.poll_interval)
            # Idle: no query; the trust window runs out and the next request catches up.
            if self._asked:
                self._asked = False
                await self._poll_safely()
            if self._monotonic() - last_flush >= self._tuning.touch_interval:
                last_flush = self._monotonic()
                await self._flush_uses()

    async def _flush_uses(self) -> None:
        uses, self._uses = self._uses, {}
        if not uses:
            return
        stamped = {key_id: datetime.fromtimestamp(ts, UTC) for key_id, ts in uses.items()}
        try:
            await self._store.record_key_use(stamped)
        except Exception as exc:
            # Last-used times are informational; losing one batch is better than stalling.
            log.warning("could not record key use", error=str(exc), keys=len(stamped))


def _matching(records: Sequence[KeyRecord], digest: str) -> KeyRecord | None:
    # Every candidate is compared, in constant time, so timing does not tell how many there were
    # or which one matched.
    found: KeyRecord | None = None
    for record in records:
        if hmac.compare_digest(record.digest, digest):
            found = record
    return found
