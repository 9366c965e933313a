"""The performance targets an overhead run is checked against, each with its measured figure.

Pure functions of a results file's figures, like bench/overhead/figures.py, so that
`--rerender` checks an old run against the current targets.
"""

from __future__ import annotations

from typing import Any

from bench.overhead.figures import MAX_ADDED_GAP_P99_MS, MAX_ADDED_TTFT_P99_MS, RUN

FLOOR = "floor"
GOVERNED = "mindrouter-governed"
FAST = "mindrouter-governed-fast"
LITELLM = "litellm"
GOVERNED_2W = "mindrouter-governed-2w"
LITELLM_2W = "litellm-2w"

MOCK_PARITY_MS = 0.25  # the mock's unary answer against its [whole] stream, p50
# CPU per relayed chunk, judged at the sweep's highest concurrency: at a few streams a chunk
# carries a large share of its stream's start and of the idle loop's wake-ups.
MAX_CPU_US_PER_CHUNK = 40.0
FLOOR_RATIO = 1.5
DURABLE_OVER_COMMIT_MS = 1.5
FAST_P50_MS = 2.0
FAST_P99_MS = 6.0
WORKERS_CPU_TOLERANCE = 0.10
WORKER_SHARE = (0.40, 0.60)
MIN_RPS = 400
MIN_RPS_RATIO = 10.0

Row = tuple[str, str, bool | None]  # target, measured, met (None: not measured)


def _f(value: Any, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _get(node: Any, *path: str) -> Any:
    for part in path:
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def rows(figs: dict[str, Any], rate: int) -> list[Row]:
    return [
        *_mock(figs),
        *_streams(figs),
        *_floor(figs, rate),
        *_audit(figs, rate),
        *_workers(figs),
        *_throughput(figs),
        *_others(figs),
    ]


def _mock(figs: dict[str, Any]) -> list[Row]:
    par = _get(figs, RUN, "mock_parity")
    if not par:
        return [("mock: unary answer and [whole] stream take the same time", "–", None)]
    a, b = par["unary_p50_ms"], par["whole_stream_p50_ms"]
    return [
        (
            f"mock: a unary answer and the same reply as a [whole] stream, direct, p50 within "
            f"{MOCK_PARITY_MS} ms",
            f"{_f(a, 3)} vs {_f(b, 3)} ms",
            abs(b - a) <= MOCK_PARITY_MS,
        )
    ]


def _streams(figs: dict[str, Any]) -> list[Row]:
    cap = _get(figs, GOVERNED, "stream_capacity")
    label = (
        f"concurrent streams one core relays, gap p99 ≤ {MAX_ADDED_GAP_P99_MS:g} ms and TTFT p99 "
        f"≤ {MAX_ADDED_TTFT_P99_MS:g} ms over direct (met: every step held"
    )
    if not cap:
        return [(label + ")", "–", None)]
    top = max(cap["levels"])
    best, failed = cap["max_streams"], cap["first_failing_streams"]
    measured = f"{best if best else '< ' + str(min(cap['levels']))}" + (
        f" (fails at {failed})" if failed else ""
    )
    by_level = cap["cpu_us_per_chunk"]
    per_chunk = ", ".join(f"{c}: {_f(v, 0)}" for c, v in by_level.items())
    at_top = by_level.get(str(top))  # the figures' levels are JSON keys
    return [
        (label + f", up to {top})", measured, best == top),
        (
            f"CPU µs per relayed chunk at {top} streams ≤ {MAX_CPU_US_PER_CHUNK:g} (all levels: "
            f"{per_chunk})",
            _f(at_top, 1),
            None if at_top is None else at_top <= MAX_CPU_US_PER_CHUNK,
        ),
    ]


def _floor(figs: dict[str, Any], rate: int) -> list[Row]:
    gov = _get(figs, GOVERNED, "cpu_us_per_request")
    flo = _get(figs, FLOOR, "cpu_us_per_request")
    ratio = gov / flo if gov and flo else None
    return [
        (
            f"CPU per request, governed ÷ the floor relay, at {rate} RPS ≤ {FLOOR_RATIO}",
            f"{_f(gov, 0)} ÷ {_f(flo, 0)} µs = {_f(ratio)}×",
            None if ratio is None else ratio <= FLOOR_RATIO,
        )
    ]


def _audit(figs: dict[str, Any], rate: int) -> list[Row]:
    commit = _get(figs, RUN, "commit_p50_ms")
    durable = _get(figs, GOVERNED, f"added_p50_ms_at_{rate}")
    limit = commit + DURABLE_OVER_COMMIT_MS if commit is not None else None
    p50 = _get(figs, FAST, f"added_p50_ms_at_{rate}")
    p99 = _get(figs, FAST, f"added_p99_ms_at_{rate}")
    return [
        (
            f"audit durable: added p50 at {rate} RPS ≤ single-row commit p50 + "
            f"{DURABLE_OVER_COMMIT_MS} ms",
            f"{_f(durable)} ms vs {_f(commit, 3)} + {DURABLE_OVER_COMMIT_MS} = {_f(limit)} ms",
            None if durable is None or limit is None else durable <= limit,
        ),
        (
            f"audit fast: added p50 at {rate} RPS ≤ {FAST_P50_MS:g} ms",
            f"{_f(p50)} ms",
            None if p50 is None else p50 <= FAST_P50_MS,
        ),
        (
            f"audit fast: added p99 at {rate} RPS ≤ {FAST_P99_MS:g} ms",
            f"{_f(p99)} ms",
            None if p99 is None else p99 <= FAST_P99_MS,
        ),
    ]


def _workers(figs: dict[str, Any]) -> list[Row]:
    out: list[Row] = []
    for name, who in ((GOVERNED_2W, "MindRouter"), (LITELLM_2W, "LiteLLM")):
        w = _get(figs, RUN, "workers", name)
        if not w:
            out.append((f"{who} with 2 workers", "–", None))
            continue
        ratio = w["cpu_ratio"]
        lo, hi = w["worker_share_min"], w["worker_share_max"]
        out += [
            (
                f"{who} 2 workers: CPU per request within {WORKERS_CPU_TOLERANCE:.0%} of one "
                f"process's ({w['rate']} RPS)",
                f"{_f(w['workers_cpu_us_per_request'], 0)} vs "
                f"{_f(w['one_process_cpu_us_per_request'], 0)} µs ({_f(ratio)}×)" + _half(w),
                None if ratio is None else abs(ratio - 1) <= WORKERS_CPU_TOLERANCE,
            ),
            (
                f"{who} 2 workers: each worker's share {WORKER_SHARE[0]:.0%}–{WORKER_SHARE[1]:.0%}"
                " (by CPU)",
                f"{_f(lo, 3)}–{_f(hi, 3)}",
                None if lo is None else lo >= WORKER_SHARE[0] and hi <= WORKER_SHARE[1],
            ),
        ]
    return out


def _half(w: dict[str, Any]) -> str:
    """The one process at half the rate, what each worker serves: a reference, no verdict."""
    half = w.get("one_process_half_rate_cpu_us_per_request")
    if not half:
        return ""
    ratio = w["workers_cpu_us_per_request"] / half if w["workers_cpu_us_per_request"] else None
    return f"; one process at {w['rate'] // 2} RPS: {_f(half, 0)} µs ({_f(ratio)}×)"


def _sustained(fig: dict[str, Any]) -> str:
    best = fig.get("max_sustained_rps")
    if best is None and fig.get("first_failing_rps"):
        return f"< {fig['first_failing_rps']}"
    return _f(best)


def _throughput(figs: dict[str, Any]) -> list[Row]:
    gov, peer = figs.get(GOVERNED, {}), figs.get(LITELLM, {})
    mine, theirs = gov.get("max_sustained_rps"), peer.get("max_sustained_rps")
    # A peer that failed even the lowest rate: its sustained rate is below that, so the ratio is
    # above mine / that rate.
    bound = theirs or peer.get("first_failing_rps")
    ratio = mine / bound if mine and bound else None
    more = "" if theirs or ratio is None else "> "
    return [
        (
            f"max sustained RPS, governed, one core ≥ {MIN_RPS}",
            _sustained(gov),
            None if not gov else (mine or 0) >= MIN_RPS,
        ),
        (
            f"max sustained RPS ≥ {MIN_RPS_RATIO:g}× LiteLLM's",
            f"{_sustained(gov)} vs {_sustained(peer)}"
            + (f" ({more}{ratio:.1f}×)" if ratio else ""),
            None if ratio is None else ratio >= MIN_RPS_RATIO,
        ),
    ]


def _others(figs: dict[str, Any]) -> list[Row]:
    gov = figs.get(GOVERNED, {})
    coal = [v.get("coalesced_streams") for k, v in gov.items() if k.startswith("stream_c")]
    slope = _get(gov, "memory", "soak_slope_mib_per_min")
    close = _get(gov, "disconnect", "close_delay_p99_ms")
    total = sum(c for c in coal if c is not None) if coal else None
    return [
        (
            "never coalesces chunks (streams, all concurrencies)",
            _f(total),
            None if total is None else total == 0,
        ),
        (
            "flat memory (soak slope, MiB/min)",
            _f(slope),
            None if slope is None else abs(slope) < 1.0,
        ),
        (
            "backend sees a disconnect within 100 ms (p99)",
            _f(close),
            None if close is None else close <= 100,
        ),
    ]
