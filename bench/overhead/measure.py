"""What a scenario step's results come to: latency, errors, achieved rate; for streams, time to
first token, inter-chunk gaps and coalescing."""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

from bench.overhead.client import Result, percentile

# The shape of the mock's streams (set through its /_config at the start of a run).
STREAM_CHUNKS = 64
STREAM_GAP_MS = 10.0
FIRST_TOKEN_MS = 20.0


def unary_summary(results: list[Result], t0: float, rate: float | None) -> dict[str, Any]:
    ok = [r for r in results if r.ok]
    lat = [r.latency * 1000 for r in ok]
    errors = Counter(r.error or f"HTTP {r.status}" for r in results if not r.ok)
    out: dict[str, Any] = {
        "requests": len(results),
        "ok": len(ok),
        "errors": sum(errors.values()),
        "error_rate": (len(results) - len(ok)) / len(results) if results else 0.0,
        "error_kinds": dict(errors.most_common(5)),
        "p50_ms": percentile(lat, 50),
        "p90_ms": percentile(lat, 90),
        "p99_ms": percentile(lat, 99),
        "max_ms": max(lat) if lat else float("nan"),
        "mean_ms": statistics.fmean(lat) if lat else float("nan"),
    }
    if rate is not None and ok:
        span = max(r.done for r in ok) - t0
        intended = len(results) / rate
        out["offered_rps"] = rate
        out["achieved_rps"] = len(ok) / max(span, intended)
        out["achieved_ratio"] = out["achieved_rps"] / rate
    elif rate is not None:
        out.update(offered_rps=rate, achieved_rps=0.0, achieved_ratio=0.0)
    return out


def stream_summary(results: list[Result], chunks_sent: int) -> dict[str, Any]:
    ok = [r for r in results if r.ok and r.events]
    ttft = [(r.events[0] - r.sent) * 1000 for r in ok]
    counts = [len(r.events) for r in ok]
    gaps = [(b - a) * 1000 for r in ok for a, b in zip(r.events, r.events[1:], strict=False)]
    events = sum(counts)
    reads = sum(r.reads for r in ok)
    return {
        "streams": len(results),
        "ok": len(ok),
        "errors": len(results) - len(ok),
        "error_rate": (len(results) - len(ok)) / len(results) if results else 0.0,
        "error_kinds": dict(
            Counter(r.error or f"HTTP {r.status}" for r in results if not r.ok).most_common(5)
        ),
        "ttft_p50_ms": percentile(ttft, 50),
        "ttft_p99_ms": percentile(ttft, 99),
        "chunks_sent": chunks_sent,
        "chunks_received": events,
        "chunks_received_min": min(counts) if counts else 0,
        "chunks_received_median": statistics.median(counts) if counts else 0,
        # Fewer content events than the backend sent: the gateway merged deltas.
        "coalesced_streams": sum(1 for c in counts if c < chunks_sent),
        # Events that arrived in the same socket read as the one before them (the client may
        # simply have read late; only coalesced_streams is a statement about the gateway).
        "same_read_fraction": (events - reads) / events if events else 0.0,
        "gap_p50_ms": percentile(gaps, 50),
        "gap_p99_ms": percentile(gaps, 99),
        "gap_max_ms": max(gaps) if gaps else float("nan"),
        "gap_distortion_p99_ms": percentile([abs(g - STREAM_GAP_MS) for g in gaps], 99),
        "duration_p50_ms": percentile([(r.events[-1] - r.sent) * 1000 for r in ok], 50),
    }
