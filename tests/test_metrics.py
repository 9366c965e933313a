"""The labelled metrics keep their children: a known series is found again without the Prometheus
client's `labels()`, and it is the client's own series, so the exposition shows what it counts."""

from __future__ import annotations

from mindrouter.observability.metrics import Metrics


def test_a_family_hands_back_the_same_series_and_the_exposition_counts_it() -> None:
    m = Metrics()
    first = m.requests.labels("openai", "m", "b", "ok")
    assert m.requests.labels("openai", "m", "b", "ok") is first
    first.inc()
    m.requests.labels("openai", "m", "b", "ok").inc()
    m.requests.labels("openai", "m", "b", "error").inc()
    m.latency.labels("openai", "m").observe(0.02)
    text = m.exposition().decode()
    assert 'mindrouter_requests_total{backend="b",dialect="openai",model="m",status="ok"} 2.0' in (
        text
    )
    assert 'status="error"} 1.0' in text
    assert 'mindrouter_request_duration_seconds_count{dialect="openai",model="m"} 1.0' in text
