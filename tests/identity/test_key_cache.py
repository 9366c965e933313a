"""The verified-key cache: TTL, LRU bound, the generation guard, and Argon2 memory."""

from __future__ import annotations

from mindrouter.identity.key_cache import CachedPrincipal, KeyCache
from mindrouter.identity.principal import Principal


def principal(n: int) -> CachedPrincipal:
    p = Principal(n, f"u{n}", "g", n, "mr2_abcdefgh", False, 1.0, 0, 0, 0, 30, None)
    return CachedPrincipal(p, None, loaded_at=0.0)


def test_entries_expire_after_the_ttl() -> None:
    cache = KeyCache(ttl=30)
    cache.put("d", principal(1), cache.generation)
    assert cache.get("d", now=30.0) is not None
    assert cache.get("d", now=30.1) is None
    assert len(cache) == 0


def test_least_recently_used_entries_go_first() -> None:
    cache = KeyCache(max_entries=2)
    cache.put("a", principal(1), 0)
    cache.put("b", principal(2), 0)
    assert cache.get("a", 0.0) is not None
    cache.put("c", principal(3), 0)
    assert cache.get("b", 0.0) is None
    assert cache.get("a", 0.0) is not None and cache.get("c", 0.0) is not None


def test_an_answer_from_before_a_clear_is_not_stored() -> None:
    cache = KeyCache()
    started = cache.generation
    cache.clear()
    cache.put("d", principal(1), started)
    assert cache.get("d", 0.0) is None


def test_clear_forgets_principals_but_remembers_verified_secrets() -> None:
    cache = KeyCache()
    cache.put("d", principal(1), cache.generation)
    cache.remember_verified("d", "$argon2id$hash")
    cache.clear()
    assert cache.get("d", 0.0) is None
    assert cache.was_verified("d", "$argon2id$hash")
    assert not cache.was_verified("d", "$argon2id$other")
