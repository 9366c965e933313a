"""API keys: the `mr2_` format, generation, parsing from request headers, and hashing.

A key is `mr2_` + `secrets.token_urlsafe(32)` (32 random bytes, 43 URL-safe characters). The
database keeps three things derived from it, never the key itself:

- the prefix: the 8 characters after `mr2_`, indexed, to find the row and to name the key;
- a SHA-256 digest (hex): compared in constant time on lookup, and the cache key in memory;
- an Argon2 hash: the at-rest protection asked for by the design; checked once per process.

Error messages say what kind of failure it was, never which keys exist.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

from mindrouter.errors import Unauthenticated

KEY_SCHEME = "mr2_"
PREFIX_LENGTH = 8
SECRET_BYTES = 32
# token_urlsafe(32) gives 43 characters; longer keys are accepted, absurd ones are not hashed.
_MIN_BODY, _MAX_BODY = 43, 256
_BODY = re.compile(r"[A-Za-z0-9_-]+")
_DISPLAY_PREFIX = re.compile(r"mr2_[A-Za-z0-9_-]{8}")

MISSING = "missing API key: send 'Authorization: Bearer mr2_…' or 'X-API-Key: mr2_…'"
MALFORMED = "malformed API key: expected 'mr2_' followed by the key's characters"
INVALID = "invalid API key"


@dataclass(frozen=True, slots=True)
class NewKey:
    key: str  # the full key, shown once
    prefix: str  # the 8 characters after "mr2_"
    digest: str


def digest_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def generate_key() -> NewKey:
    key = KEY_SCHEME + secrets.token_urlsafe(SECRET_BYTES)
    return NewKey(
        key=key,
        prefix=key[len(KEY_SCHEME) : len(KEY_SCHEME) + PREFIX_LENGTH],
        digest=digest_key(key),
    )


def key_prefix(key: str) -> str:
    """The stored prefix of a well-formed key; raises Unauthenticated(MALFORMED) otherwise."""
    body = key[len(KEY_SCHEME) :]
    if (
        not key.startswith(KEY_SCHEME)
        or not _MIN_BODY <= len(body) <= _MAX_BODY
        or not _BODY.fullmatch(body)
    ):
        raise Unauthenticated(MALFORMED)
    return body[:PREFIX_LENGTH]


def display_prefix(prefix: str) -> str:
    return KEY_SCHEME + prefix


def is_display_prefix(text: str) -> bool:
    """True for `mr2_` + exactly 8 key characters: how a key is named without its secret."""
    return _DISPLAY_PREFIX.fullmatch(text) is not None


def key_from_headers(headers: Mapping[str, str]) -> str:
    """The key sent as `Authorization: Bearer …` or `X-API-Key: …`.

    Works with case-insensitive header objects (Starlette's) and with plain dicts in the
    spellings clients use.
    """
    auth = headers.get("authorization") or headers.get("Authorization")
    if auth:
        scheme, _, token = auth.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthenticated(MALFORMED)
        return token
    key = headers.get("x-api-key") or headers.get("X-API-Key") or headers.get("X-Api-Key")
    if key:
        return key.strip()
    raise Unauthenticated(MISSING)


class KeyHasher:
    """Argon2id for keys at rest. The defaults are argon2-cffi's (RFC 9106 low-memory profile);
    tests pass cheaper parameters so that a suite creating many keys stays fast."""

    def __init__(
        self, *, time_cost: int = 3, memory_cost: int = 65536, parallelism: int = 4
    ) -> None:
        self._hasher = PasswordHasher(
            time_cost=time_cost, memory_cost=memory_cost, parallelism=parallelism
        )

    def hash(self, key: str) -> str:
        return self._hasher.hash(key)

    def verify(self, secret_hash: str, key: str) -> bool:
        try:
            return self._hasher.verify(secret_hash, key)
        except (VerifyMismatchError, VerificationError, InvalidHashError):
            return False
