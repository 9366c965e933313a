"""The circuit breaker's state machine: closed → open → half-open (one probe) → closed or open."""

from __future__ import annotations

import pytest

from mindrouter.routing.breaker import Breaker

T0 = 1000.0


def opened(threshold: int = 3, cooldown: float = 30.0, at: float = T0) -> Breaker:
    b = Breaker(threshold=threshold, cooldown=cooldown)
    for _ in range(threshold):
        b.on_attempt(at)
        b.on_failure(at)
    return b


def test_closed_until_the_threshold_of_consecutive_failures() -> None:
    b = Breaker(threshold=3, cooldown=30)
    assert b.state(T0) == "closed" and b.allows(T0)
    b.on_failure(T0)
    b.on_failure(T0)
    assert b.state(T0) == "closed" and b.allows(T0)
    b.on_failure(T0)
    assert b.state(T0) == "open" and not b.allows(T0)
    assert (b.open_until, b.opened_total) == (T0 + 30, 1)


def test_a_success_resets_the_count() -> None:
    b = Breaker(threshold=3, cooldown=30)
    b.on_failure(T0)
    b.on_failure(T0)
    b.on_success()
    b.on_failure(T0)
    b.on_failure(T0)
    # Five failures, never three in a row.
    assert b.state(T0) == "closed" and b.failures == 2


def test_open_for_the_whole_cooldown_then_half_open() -> None:
    b = opened(cooldown=30)
    assert b.state(T0 + 29.999) == "open" and not b.allows(T0 + 29.999)
    assert b.state(T0 + 30) == "half_open" and b.allows(T0 + 30)
    # Half-open lasts until something is tried, however long that takes.
    assert b.state(T0 + 3600) == "half_open"


def test_half_open_lets_exactly_one_probe_through() -> None:
    b = opened()
    now = T0 + 31
    assert b.allows(now)
    b.on_attempt(now)  # the probe
    # Everyone else is kept out while the probe runs, at any later time.
    assert b.state(now) == "open"
    assert not any(b.allows(now + dt) for dt in (0.0, 1.0, 30.0, 300.0))


def test_a_successful_probe_closes() -> None:
    b = opened()
    b.on_attempt(T0 + 31)
    b.on_success()
    assert b.state(T0 + 31) == "closed" and b.allows(T0 + 31)
    assert (b.failures, b.probing, b.opened_total) == (0, False, 1)
    # A fresh start: it takes the full threshold to open again.
    b.on_failure(T0 + 32)
    b.on_failure(T0 + 32)
    assert b.state(T0 + 32) == "closed"


def test_a_failed_probe_reopens_for_another_cooldown() -> None:
    b = opened(cooldown=30)
    b.on_attempt(T0 + 31)
    b.on_failure(T0 + 31)
    assert b.state(T0 + 31) == "open" and not b.probing
    assert b.open_until == T0 + 61 and b.opened_total == 2
    assert b.state(T0 + 60.9) == "open"
    assert b.state(T0 + 61) == "half_open"


def test_attempts_while_closed_are_not_probes() -> None:
    b = Breaker(threshold=3, cooldown=30)
    b.on_attempt(T0)
    b.on_attempt(T0)
    assert not b.probing and b.allows(T0)


def test_late_failures_while_open_extend_it_without_counting_a_new_opening() -> None:
    # Requests sent before the breaker opened may fail afterwards.
    b = opened(cooldown=30)
    b.on_failure(T0 + 10)
    assert b.open_until == T0 + 40 and b.opened_total == 1
    assert b.state(T0 + 35) == "open"


def test_a_late_success_while_open_closes_it() -> None:
    # The backend answered after all: it works, so there is no reason to keep it out.
    b = opened()
    b.on_success()
    assert b.state(T0 + 1) == "closed"


@pytest.mark.parametrize("threshold", [1, 2, 5])
def test_the_threshold_is_configurable(threshold: int) -> None:
    b = Breaker(threshold=threshold, cooldown=1)
    for _ in range(threshold - 1):
        b.on_failure(T0)
    assert b.state(T0) == "closed"
    b.on_failure(T0)
    assert b.state(T0) == "open"


def test_zero_cooldown_goes_straight_to_half_open() -> None:
    b = opened(cooldown=0)
    assert b.state(T0) == "half_open"
    b.on_attempt(T0)
    assert b.state(T0) == "open"
