"""The fairness properties of the fair queue, each shown on a simulated clock (see sim.py)."""

from __future__ import annotations

from mindrouter.scheduling import FairPolicy, Job

from .sim import Sim, job, keep_backlogged


def test_weights_are_honoured_under_contention() -> None:
    sim = Sim({"m": 4})
    sim.run(3600, keep_backlogged(sim, {"faculty": 3.0, "student": 1.0}))
    got = sim.service(60, 3600)
    assert abs(got["faculty"] / got["student"] - 3.0) < 0.03 * 3.0


def test_equal_weights_share_equally_whatever_the_request_size() -> None:
    sim = Sim({"m": 4})
    small = keep_backlogged(sim, {"small": 1.0}, output=50)
    large = keep_backlogged(sim, {"large": 1.0}, output=400)
    sim.run(3600, lambda now: small(now) + large(now))
    got = sim.service(60, 3600)
    assert abs(got["small"] / got["large"] - 1.0) < 0.03


def test_a_lone_user_gets_all_capacity() -> None:
    sim = Sim({"m": 4})
    sim.run(600, keep_backlogged(sim, {"solo": 1.0}))
    assert sim.busy_steps / (4 * sim.steps) >= 0.98


def test_a_lone_user_is_not_held_back_by_past_heavy_use() -> None:
    # A user with a huge counter on an otherwise idle model still gets every slot.
    sim = Sim({"m": 4})
    sim.queue.state.charge("m", "solo", 1e9)
    sim.run(120, keep_backlogged(sim, {"solo": 1.0}))
    assert sim.busy_steps / (4 * sim.steps) >= 0.98


def test_a_returning_user_cannot_cash_in_idle_time() -> None:
    sim = Sim({"m": 4})
    stayers = keep_backlogged(sim, {"a": 1.0, "b": 1.0, "c": 1.0})
    returner = keep_backlogged(sim, {"r": 1.0})

    def arrivals(now: float) -> list[Job]:
        away = 600 <= now < 1200  # ten minutes idle: sends nothing
        return stayers(now) + ([] if away else returner(now))

    sim.run(1320, arrivals)
    got = sim.service(1200, 1260)
    share = got["r"] / sum(got.values())
    assert share <= 0.25 + 0.05
    # ... and yet it is not punished either: it gets its fair share from the first minute on.
    assert share >= 0.25 - 0.05
    first = min(t for j, t in sim.started.items() if j.startswith("r-") and t >= 1200)
    assert first - 1200 <= 6.0  # served at the next free slot (jobs last ~5.25 s)


def test_a_light_user_takes_the_next_free_slot_under_a_flood() -> None:
    sim = Sim({"m": 4})
    flood = keep_backlogged(sim, {"heavy": 1.0}, depth=20)
    light = [job("light", t) for t in (300.0, 420.0, 540.0)]

    def arrivals(now: float) -> list[Job]:
        return flood(now) + [j for j in light if now - 0.25 < j.enqueued_at <= now]

    sim.run(600, arrivals)
    for j in light:
        # Every step frees a slot here (4 jobs of ~5.25 s), so the next free slot is one step.
        assert sim.started[j.id] - j.enqueued_at <= 1.5


def test_no_starvation_even_at_a_weight_ratio_of_100() -> None:
    policy = FairPolicy()
    sim = Sim({"m": 4}, policy)
    sim.run(1800, keep_backlogged(sim, {"big": 100.0, "tiny": 1.0}, depth=2))
    tiny = [w for j, w in sim.waits().items() if j.startswith("tiny-")]
    assert len(tiny) >= 1800 / (policy.starvation_after + 6) - 2
    assert max(tiny) <= policy.starvation_after + 6.0


def test_no_starvation_under_a_stream_of_newcomers() -> None:
    # A brand-new user every second, each lifted to the floor minus the burst allowance: by
    # counters alone the old user, who has been served before, would never be served again and
    # every one of its jobs would hit the gate's deadline. Jobs passed over for
    # `starvation_after` go first, oldest first; here the newcomers soon starve too, so the
    # old user ends up served about as often as any one of the 100+ users waiting, which is its
    # fair share, and never withdrawn.
    policy = FairPolicy()
    sim = Sim({"m": 4}, policy, deadline=150.0)
    old = keep_backlogged(sim, {"old": 1.0}, depth=1)
    newcomers = iter(range(10**6))

    def arrivals(now: float) -> list[Job]:
        fresh = [job(f"new{next(newcomers)}", now)] if now % 1.0 == 0 else []
        return old(now) + fresh

    sim.run(1200, arrivals)
    waits = [w for j, w in sim.waits().items() if j.startswith("old-")]
    assert sim.dropped  # the cluster really was overloaded
    assert not any(j.startswith("old-") for j in sim.dropped)
    assert len(waits) >= 1200 / 150
    assert max(waits[:6]) <= policy.starvation_after + 6.0  # before the newcomers starve too


def test_every_job_is_eventually_served() -> None:
    sim = Sim({"m": 2})
    burst = [job(f"u{i % 7}", 0.0, weight=1.0 + i % 3) for i in range(60)]
    for j in burst:
        sim.submit(j, 120)
    sim.run(900)
    assert set(sim.started) == {j.id for j in burst}


def test_one_models_backlog_does_not_hold_up_another_model() -> None:
    sim = Sim({"big": 2, "small": 2})
    flood = keep_backlogged(sim, {"heavy": 1.0}, depth=30, model="big")
    small = [job("s", t, model="small") for t in (100.0, 200.0, 300.0)]

    def arrivals(now: float) -> list[Job]:
        return flood(now) + [j for j in small if now - 0.25 < j.enqueued_at <= now]

    sim.run(400, arrivals)
    for j in small:
        assert sim.started[j.id] - j.enqueued_at <= 0.25  # its slots were free: no wait at all
