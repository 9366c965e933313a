"""/metrics exposes the request, token, latency, queue and backend series, and they move when
requests flow."""

from __future__ import annotations

import contextlib

import httpx
import openai
from prometheus_client.parser import text_string_to_metric_families

from mindrouter.app import build_app
from mindrouter.serving import ThreadServer
from mindrouter.settings import settings_from_dict
from tests.gateway.stack import (
    METRICS_TOKEN,
    SIM_ENGINES,
    Stack,
    gateway_config,
    sqlite_url,
)


def scrape(stack: Stack) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    auth = {"Authorization": f"Bearer {METRICS_TOKEN}"}
    response = httpx.get(stack.url + "/metrics", headers=auth, timeout=10)
    response.raise_for_status()
    text = response.text
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


def test_series_move_when_requests_flow(stack: Stack, oai: openai.OpenAI) -> None:
    before = scrape(stack)
    oai.chat.completions.create(model="chat-vllm", messages=[{"role": "user", "content": "hi"}])
    stream = oai.chat.completions.create(
        model="chat-ollama", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    for _ in stream:
        pass
    with contextlib.suppress(openai.BadRequestError):
        oai.chat.completions.create(
            model="chat-vllm", messages=[{"role": "user", "content": "x"}], temperature=9
        )
    after = scrape(stack)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert (
        grew(
            "mindrouter_requests_total",
            model="chat-vllm",
            backend="vllm-1",
            status="ok",
            dialect="openai",
        )
        == 1
    )
    assert grew("mindrouter_requests_total", model="chat-ollama", status="ok") == 1
    assert grew("mindrouter_tokens_total", model="chat-vllm", direction="output") > 0
    assert grew("mindrouter_tokens_total", model="chat-ollama", direction="input") > 0
    assert grew("mindrouter_request_duration_seconds_count", model="chat-vllm") == 1
    assert grew("mindrouter_time_to_first_token_seconds_count", model="chat-ollama") == 1
    assert grew("mindrouter_queue_wait_seconds_count", model="chat-vllm") == 1
    assert grew("mindrouter_gateway_overhead_seconds_count", dialect="openai") >= 2
    # A request refused before the pipeline is counted too, with its error kind.
    assert grew("mindrouter_request_errors_total", kind="invalid_request", dialect="openai") == 1
    # Live gauges are present for every backend.
    for backend in ("vllm-1", "ollama-1", "llamacpp-1", "openai-1"):
        assert value(after, "mindrouter_backend_healthy", backend=backend) == 1
        assert ("mindrouter_backend_breaker_state", (("backend", backend),)) in after
        assert ("mindrouter_backend_in_flight", (("backend", backend),)) in after


def test_the_metrics_port_asks_for_the_token_when_one_is_set(stack: Stack) -> None:
    # What `serve` starts on `metrics_port`: /metrics alone, with the token when one is set.
    listener = ThreadServer(stack.app.state.metrics_app).start()
    try:
        refused = httpx.get(listener.url + "/metrics", timeout=10)
        assert refused.status_code == 401
        assert "metrics_token" in refused.json()["error"]["message"]
        wrong = httpx.get(listener.url + "/metrics", headers=stack.auth, timeout=10)
        assert wrong.status_code == 401  # keys are for the main port
        auth = {"Authorization": f"Bearer {METRICS_TOKEN}"}
        r = httpx.get(listener.url + "/metrics", headers=auth, timeout=10)
        assert r.status_code == 200
        assert "mindrouter_requests_total" in r.text
        assert httpx.get(listener.url + "/v1/models", headers=auth).status_code == 404
    finally:
        listener.stop()


def test_the_metrics_port_is_open_without_a_token() -> None:
    raw = gateway_config({e: "http://127.0.0.1:9" for e in SIM_ENGINES}, database_url=sqlite_url())
    del raw["metrics_token"]
    app = build_app(settings_from_dict(raw))
    listener = ThreadServer(app.state.metrics_app).start()
    try:
        assert httpx.get(listener.url + "/metrics", timeout=10).status_code == 200
    finally:
        listener.stop()
