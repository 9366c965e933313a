"""The circuit breaker's state machine: closed → open → half-open (one probe) → closed or open."""

from __future__ import annotations

import pytest

from mindrouter.routing.breaker import Breaker, Unsent

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


# -- the events kept for sharing with other processes ---------------------------------------------


def shared() -> Breaker:
    b = Breaker(threshold=3, cooldown=30)
    b.share()
    return b


def test_an_unshared_breaker_records_nothing() -> None:
    b = Breaker()
    b.on_failure(T0)
    b.on_success()
    assert b.unsent is None


def test_events_fold_into_a_reset_and_the_failures_after_it() -> None:
    b = shared()
    b.on_failure(T0)
    b.on_failure(T0)
    b.on_success()
    b.on_failure(T0)
    taken = b.take_unsent()
    assert (taken.reset, taken.failures) == (True, 1)
    assert not b.unsent  # recording starts afresh
    # Successes of a healthy breaker are not worth telling anyone.
    b.on_success()
    b.take_unsent()
    b.on_success()
    assert not b.unsent


def test_events_given_back_go_before_the_later_ones() -> None:
    b = shared()
    b.on_failure(T0)
    first = b.take_unsent()
    b.on_failure(T0)
    b.give_back(first)
    assert b.unsent is not None and (b.unsent.reset, b.unsent.failures) == (False, 2)
    b.on_success()
    first = b.take_unsent()
    b.on_failure(T0)
    b.give_back(first)
    assert (b.unsent.reset, b.unsent.failures) == (True, 1)


def test_adopting_the_shared_state_replays_what_happened_here_since() -> None:
    b = shared()
    b.adopt(failures=3, open_in=10.0, probing=False, opened_total=4, now=T0)
    assert (b.state(T0), b.open_until, b.opened_total) == ("open", T0 + 10, 4)
    assert b.state(T0 + 10) == "half_open"
    # A failure here while the exchange was in flight is counted on top of what came back.
    b.on_success()
    b.take_unsent()
    b.on_failure(T0)
    b.on_failure(T0)
    b.adopt(failures=0, open_in=0.0, probing=False, opened_total=4, now=T0)
    assert (b.failures, b.state(T0)) == (2, "closed")
    b.on_failure(T0)
    b.adopt(failures=1, open_in=0.0, probing=False, opened_total=4, now=T0)
    assert (b.failures, b.state(T0), b.opened_total) == (4, "open", 5)


def test_a_probe_elsewhere_keeps_this_process_out_and_its_own_survives_adoption() -> None:
    b = shared()
    b.adopt(failures=3, open_in=0.0, probing=True, opened_total=1, now=T0)
    assert b.state(T0) == "open"  # another process is probing
    b.adopt(failures=3, open_in=0.0, probing=False, opened_total=1, now=T0)
    assert b.state(T0) == "half_open"
    b.on_attempt(T0)
    b.adopt(failures=3, open_in=0.0, probing=False, opened_total=1, now=T0)
    assert b.state(T0) == "open" and b.probe_here
    b.on_abandoned()
    assert b.unsent is not None and b.unsent.release_probe


def test_a_released_probe_stays_released_when_an_exchange_is_given_back() -> None:
    b = shared()
    b.adopt(failures=3, open_in=0.0, probing=False, opened_total=1, now=T0)
    b.on_attempt(T0)
    b.on_abandoned()
    taken = b.take_unsent()
    assert taken.release_probe
    b.give_back(taken)  # the exchange failed
    assert b.unsent is not None and b.unsent.release_probe
    # A failure after it ends the probe anyway; nothing left to release.
    assert not Unsent(release_probe=True).then(Unsent(failures=1)).release_probe
