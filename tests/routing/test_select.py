"""Backend selection: hard constraints, then the score (loaded model, free capacity, priority,
GPU class, latency, engine queue), with the name as the final tie-breaker."""

from __future__ import annotations

from typing import Any

import pytest

from mindrouter.routing.backend_config import BackendConfig
from mindrouter.routing.breaker import Breaker
from mindrouter.routing.catalog import STRUCTURED_OUTPUT, BackendState
from mindrouter.routing.select import (
    GPU_SCORES,
    ScoreWeights,
    fastest,
    predicted_seconds,
    rank_backends,
    score,
)

MODEL = "m"
NOW = 100.0


CONFIGURED = ("max_concurrent", "priority", "gpu")


def be(name: str, **fields: Any) -> BackendState:
    configured = {f: fields.pop(f) for f in CONFIGURED if f in fields}
    config = BackendConfig(name, "vllm", f"http://{name}", **configured)
    return BackendState(config, serves={MODEL: f"{MODEL}-up"}, **fields)


def order(*backends: BackendState, model: str | None = MODEL) -> list[str]:
    return [b.name for b, _ in rank_backends([(b, b.serves[MODEL]) for b in backends], NOW, model)]


def test_rank_returns_the_upstream_names() -> None:
    a = be("a")
    assert rank_backends([(a, "m-up")], NOW, MODEL) == [(a, "m-up")]


def test_a_loaded_model_outweighs_every_other_factor() -> None:
    loaded = be("loaded", loaded={MODEL}, in_flight=7, max_concurrent=8)
    cold = be("cold", priority=2, gpu="H200", ttft_ema=0.0)
    assert order(cold, loaded) == ["loaded", "cold"]
    assert score(loaded, MODEL) - score(cold, MODEL) > 50


def test_loaded_counts_only_for_the_requested_model() -> None:
    other = be("other", loaded={"something-else"}, priority=0)
    preferred = be("preferred", priority=1)
    assert order(other, preferred) == ["preferred", "other"]
    # Without a model (token counting), loaded models give no bonus either.
    assert score(be("x", loaded={MODEL}), "") == score(be("x"), "")


def test_a_full_backend_comes_after_every_backend_with_a_free_slot() -> None:
    full = be("full", loaded={MODEL}, priority=10, gpu="B200", in_flight=4, max_concurrent=4)
    free = be("free", in_flight=3, max_concurrent=4)
    assert order(full, free) == ["free", "full"]
    # Full backends stay candidates (the caller may still queue on them).
    assert order(full) == ["full"]


def test_free_capacity_first_among_equals() -> None:
    busy = be("busy", in_flight=6, max_concurrent=8)
    idle = be("idle", in_flight=1, max_concurrent=8)
    assert order(busy, idle) == ["idle", "busy"]
    # The fraction counts, not the number of free slots.
    small = be("small", in_flight=1, max_concurrent=2)
    large = be("large", in_flight=2, max_concurrent=8)
    assert order(small, large) == ["large", "small"]


def test_faster_gpu_class_wins_a_tie() -> None:
    ranked = order(be("rtx", gpu="RTX 8000"), be("a100", gpu="A100"), be("h200", gpu="H200"))
    assert ranked == ["h200", "a100", "rtx"]
    assert GPU_SCORES["H200"] > GPU_SCORES["A100"] > GPU_SCORES["RTX 8000"]


def test_gpu_class_is_case_insensitive_and_unknown_scores_lowest() -> None:
    assert score(be("x", gpu="h100"), MODEL) == score(be("x", gpu="H100"), MODEL)
    assert score(be("x", gpu="TPU9000"), MODEL) == score(be("x"), MODEL)
    assert order(be("unknown", gpu="TPU9000"), be("rtx", gpu="RTX8000")) == ["rtx", "unknown"]


def test_admin_priority_wins_a_tie() -> None:
    assert order(be("low", priority=0), be("high", priority=2)) == ["high", "low"]
    # A few priority points outweigh the fastest GPU class.
    assert order(be("gpu", gpu="B200"), be("prio", priority=3)) == ["prio", "gpu"]


def test_lower_recent_latency_wins_a_tie() -> None:
    assert order(be("slow", ttft_ema=2.0), be("fast", ttft_ema=0.1)) == ["fast", "slow"]
    # Time per output token counts too: a quick first token does not make a slow decoder fast.
    quick_start = be("quick-start", ttft_ema=0.1, tpot_ema=0.05)
    fast_decode = be("fast-decode", ttft_ema=0.5, tpot_ema=0.01)
    assert order(quick_start, fast_decode) == ["fast-decode", "quick-start"]


def test_the_predicted_time_is_ttft_plus_the_requests_output_at_the_recent_speed() -> None:
    b = be("b", ttft_ema=0.5, tpot_ema=0.02)
    assert predicted_seconds(b, 100) == pytest.approx(2.5)
    assert predicted_seconds(be("unmeasured"), 100) is None
    # A short answer is decided by the first token, a long one by the decoding speed.
    quick_start = be("quick-start", ttft_ema=0.2, tpot_ema=0.04)
    fast_decode = be("fast-decode", ttft_ema=2.0, tpot_ema=0.01)
    pair = [(quick_start, "m"), (fast_decode, "m")]
    short = rank_backends(pair, NOW, MODEL, output_tokens=10)
    long = rank_backends(pair, NOW, MODEL, output_tokens=2000)
    assert [b.name for b, _ in short] == ["quick-start", "fast-decode"]
    assert [b.name for b, _ in long] == ["fast-decode", "quick-start"]


def test_twice_as_slow_as_the_fastest_costs_the_latency_weight_whatever_the_size() -> None:
    w = ScoreWeights()
    for tokens in (50, 5000):
        slow, fast = be("slow", tpot_ema=0.04), be("fast", tpot_ema=0.02)
        best = fastest([slow, fast], tokens)
        assert best == pytest.approx(0.02 * tokens)
        assert score(fast, MODEL, w, tokens, best) == score(be("fast"), MODEL, w, tokens, best)
        loss = score(fast, MODEL, w, tokens, best) - score(slow, MODEL, w, tokens, best)
        assert loss == pytest.approx(w.latency)


def test_a_backend_not_measured_yet_counts_as_fast_as_the_fastest() -> None:
    # It gets requests, so it gets measured; a measured backend is never favoured over it.
    slow = be("slow", ttft_ema=0.2, tpot_ema=0.2)
    assert order(slow, be("new")) == ["new", "slow"]
    assert order(be("a-new"), be("fast", ttft_ema=0.01, tpot_ema=0.001)) == ["a-new", "fast"]
    # Speed is a tie-breaker: it never outweighs a much freer backend.
    busy_fast = be("busy-fast", ttft_ema=0.1, tpot_ema=0.01, in_flight=6, max_concurrent=8)
    idle_slow = be("idle-slow", ttft_ema=0.1, tpot_ema=0.02, in_flight=0, max_concurrent=8)
    assert order(busy_fast, idle_slow) == ["idle-slow", "busy-fast"]


def test_a_longer_engine_queue_loses() -> None:
    assert order(be("queued", waiting=3), be("empty", waiting=0)) == ["empty", "queued"]


def test_ties_are_broken_by_name() -> None:
    assert order(be("b"), be("c"), be("a")) == ["a", "b", "c"]


@pytest.mark.parametrize(
    "excluded",
    [
        {"healthy": False},
        {"draining": True},
        {"breaker": Breaker(threshold=1, cooldown=60, failures=1, open_until=NOW + 1)},
        {"breaker": Breaker(threshold=1, cooldown=60, failures=1, probing=True)},
    ],
    ids=["unhealthy", "draining", "breaker-open", "probe-running"],
)
def test_hard_constraints_exclude_whatever_the_score(excluded: dict[str, Any]) -> None:
    best = be("best", loaded={MODEL}, priority=10, gpu="B200", **excluded)
    assert order(best, be("plain")) == ["plain"]
    assert order(best) == []


def test_a_request_needing_structured_output_goes_only_to_backends_that_have_it() -> None:
    plain = be("plain", loaded={MODEL}, priority=10, features=frozenset())
    able = be("able")
    pair = [(plain, "m"), (able, "m")]
    needs = frozenset({STRUCTURED_OUTPUT})
    assert [b.name for b, _ in rank_backends(pair, NOW, MODEL, requires=needs)] == ["able"]
    assert [b.name for b, _ in rank_backends(pair, NOW, MODEL)] == ["plain", "able"]


def test_a_half_open_breaker_is_a_candidate() -> None:
    half = be("half", priority=1, breaker=Breaker(threshold=1, failures=1, open_until=NOW - 1))
    assert order(half, be("plain")) == ["half", "plain"]


def test_weights_can_be_changed() -> None:
    heavy_gpu = ScoreWeights(gpu=100.0)
    ranked = rank_backends(
        [(be("loaded", loaded={MODEL}), "m"), (be("fast", gpu="H200"), "m")],
        NOW,
        MODEL,
        heavy_gpu,
    )
    assert [b.name for b, _ in ranked] == ["fast", "loaded"]


def test_weights_must_be_finite_and_not_negative() -> None:
    with pytest.raises(ValueError, match="latency"):
        ScoreWeights(latency=-1.0)
    with pytest.raises(ValueError, match="gpu"):
        ScoreWeights(gpu=float("inf"))
