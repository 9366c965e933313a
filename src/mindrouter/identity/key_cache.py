"""The in-process memory of verified keys, so the request path does not pay Argon2 or a query.

Two bounded LRU maps, both keyed by the key's SHA-256 digest:

- principals: digest -> the Principal it resolved to, trusted for `ttl` seconds and dropped
  whenever the authenticator learns that the auth epoch moved (`clear`);
- verified: digest -> the Argon2 hash it was checked against. This survives `clear`, because a
  change of limits or status does not change whether the secret matches its hash: re-resolving
  a key after an epoch bump then costs one indexed query, not an Argon2 run per user per worker.

`clear` bumps a generation number; a resolution that started before a clear cannot store its
(possibly stale) answer after it.
"""

from __future__ import annotations

import hmac
from collections import OrderedDict
from dataclasses import dataclass

from mindrouter.identity.principal import Principal


@dataclass(frozen=True, slots=True)
class CachedPrincipal:
    principal: Principal
    expires_ts: float | None  # wall-clock seconds; checked on every hit
    loaded_at: float  # monotonic seconds


class KeyCache:
    def __init__(self, max_entries: int = 10_000, ttl: float = 30.0) -> None:
        self.max_entries = max_entries
        self.ttl = ttl
        self.generation = 0
        self._principals: OrderedDict[str, CachedPrincipal] = OrderedDict()
        self._verified: OrderedDict[str, str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._principals)

    def get(self, digest: str, now: float) -> CachedPrincipal | None:
        entry = self._principals.get(digest)
        if entry is None:
            return None
        if now - entry.loaded_at > self.ttl:
            del self._principals[digest]
            return None
        self._principals.move_to_end(digest)
        return entry

    def put(self, digest: str, entry: CachedPrincipal, generation: int) -> None:
        if generation != self.generation:
            return
        self._principals[digest] = entry
        self._principals.move_to_end(digest)
        while len(self._principals) > self.max_entries:
            self._principals.popitem(last=False)

    def discard(self, digest: str) -> None:
        self._principals.pop(digest, None)

    def clear(self) -> None:
        self.generation += 1
        self._principals.clear()

    def was_verified(self, digest: str, secret_hash: str) -> bool:
        known = self._verified.get(digest)
        return known is not None and hmac.compare_digest(known, secret_hash)

    def knows(self, digest: str) -> bool:
        """Whether this digest matched its stored hash before (its owner holds the real key)."""
        return digest in self._verified

    def remember_verified(self, digest: str, secret_hash: str) -> None:
        self._verified[digest] = secret_hash
        self._verified.move_to_end(digest)
        while len(self._verified) > self.max_entries:
            self._verified.popitem(last=False)
