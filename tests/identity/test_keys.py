"""Key format, parsing from headers, hashing, and effective limits."""

from __future__ import annotations

import pytest

from mindrouter.errors import Unauthenticated
from mindrouter.identity.keys import (
    digest_key,
    generate_key,
    is_display_prefix,
    key_from_headers,
    key_prefix,
)
from mindrouter.identity.principal import effective_limits
from mindrouter.stores.records import GroupLimits, LimitOverrides

from .fakes import FAST_HASHER


def test_generated_keys() -> None:
    new = generate_key()
    assert new.key.startswith("mr2_") and len(new.key) == 4 + 43
    assert new.prefix == new.key[4:12] == key_prefix(new.key)
    assert new.digest == digest_key(new.key) and len(new.digest) == 64
    assert is_display_prefix("mr2_" + new.prefix)
    assert generate_key().key != new.key


@pytest.mark.parametrize(
    "bad", ["sk-abc", "mr2_", "mr2_" + "a" * 42, "mr2_" + "a" * 257, "mr2_" + "a" * 42 + "!"]
)
def test_malformed_keys(bad: str) -> None:
    with pytest.raises(Unauthenticated, match="malformed"):
        key_prefix(bad)


@pytest.mark.parametrize(
    "headers",
    [
        {"authorization": "Bearer KEY"},
        {"Authorization": "bearer   KEY "},
        {"x-api-key": "KEY"},
        {"X-API-Key": "KEY"},
    ],
)
def test_key_from_headers(headers: dict[str, str]) -> None:
    assert key_from_headers(headers) == "KEY"


def test_headers_without_a_usable_key() -> None:
    with pytest.raises(Unauthenticated, match="missing"):
        key_from_headers({"content-type": "application/json"})
    for value in ("Basic dXNlcjpwYXNz", "Bearer", "Token abc"):
        with pytest.raises(Unauthenticated, match="malformed"):
            key_from_headers({"authorization": value})


def test_hasher() -> None:
    secret_hash = FAST_HASHER.hash("mr2_secret")
    assert secret_hash.startswith("$argon2id$")
    assert FAST_HASHER.verify(secret_hash, "mr2_secret")
    assert not FAST_HASHER.verify(secret_hash, "mr2_other")
    assert not FAST_HASHER.verify("not a hash", "mr2_secret")


def test_user_overrides_win_over_the_group() -> None:
    group = GroupLimits(2.0, 1000, 60, 4, 30)
    assert effective_limits(group, LimitOverrides()) == group
    merged = effective_limits(group, LimitOverrides(token_budget=0, rpm=5))
    assert merged == GroupLimits(2.0, 0, 5, 4, 30), "0 (unlimited) is a value, not 'inherit'"
