"""Backend selection through the gateway: the structured-output constraint in every dialect, the
decoding speed measured from streams and shown with the predicted time behind each decision,
and the score's weights from the configuration."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from mindrouter.routing.select import ScoreWeights
from tests.gateway.test_resilience import (
    DIALECTS,
    HTTP,
    MODEL,
    Cluster,
    backend,
    check_error_shape,
    post,
    vllm_sim,
)

SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
STRUCTURED: dict[str, dict[str, Any]] = {
    "openai": {
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "reply", "schema": SCHEMA},
        }
    },
    "anthropic": {"output_config": {"format": {"type": "json_schema", "schema": SCHEMA}}},
    "ollama": {"format": SCHEMA},
}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_structured_output_goes_only_to_backends_that_support_it(
    cluster_factory: Callable[..., Cluster], dialect: str
) -> None:
    # The plain backend is preferred (priority) for everything it can serve.
    c = cluster_factory(
        [
            backend("plain", vllm_sim(), priority=3, structured_output=False),
            backend("able", vllm_sim()),
        ]
    )
    assert post(c, dialect).status_code == 200
    assert (c.seen("plain"), c.seen("able")) == (1, 0)
    r = post(c, dialect, **STRUCTURED[dialect])
    assert r.status_code == 200, r.text
    assert (c.seen("plain"), c.seen("able")) == (1, 1)
    views = c.backends()
    assert views["plain"]["structured_output"] is False
    assert views["able"]["structured_output"] is True


@pytest.mark.parametrize("dialect", DIALECTS)
def test_structured_output_no_backend_supports_is_a_clear_400(
    cluster_factory: Callable[..., Cluster], dialect: str
) -> None:
    c = cluster_factory([backend("plain", vllm_sim(), structured_output=False)])
    r = post(c, dialect, **STRUCTURED[dialect])
    assert r.status_code == 400, r.text
    message = check_error_shape(dialect, r)
    assert f"no backend serving model '{MODEL}' supports structured output" in message
    assert c.seen("plain") == 0  # refused before any GPU work
    assert post(c, dialect).status_code == 200  # the model still serves plain requests


def test_a_stream_measures_the_backends_speed_and_decisions_show_the_prediction(
    cluster_factory: Callable[..., Cluster],
) -> None:
    c = cluster_factory([backend("b", vllm_sim(tokens_per_second=200.0))])
    before = c.backends()["b"]
    assert before["ttft_ema_s"] is None and before["tpot_ema_s"] is None
    r = post(c, "openai", stream=True, max_tokens=20)
    assert r.status_code == 200
    after = c.backends()["b"]
    assert after["ttft_ema_s"] is not None
    # 200 tokens/s is 5 ms a token; the measurement adds only the network's jitter.
    assert 0.004 <= after["tpot_ema_s"] < 0.05
    # The next decision predicts the request's time from the backend's speed.
    assert post(c, "openai", max_tokens=20).status_code == 200
    q = HTTP.get(c.url + "/admin/queue", headers=c.auth)
    assert q.status_code == 200, q.text
    last = q.json()["recent_decisions"][-1]
    assert last["model"] == MODEL and last["requires"] == []
    [ranked] = last["ranked"]
    expected = after["ttft_ema_s"] + 20 * after["tpot_ema_s"]
    assert ranked["backend"] == "b" and ranked["predicted_s"] == pytest.approx(expected, abs=1e-3)


def test_the_scores_weights_come_from_the_configuration(
    cluster_factory: Callable[..., Cluster],
) -> None:
    # With the priority weighed at nothing, the two backends tie and the name decides.
    c = cluster_factory(
        [backend("b-high", vllm_sim(), priority=3), backend("a-low", vllm_sim())],
        routing_weights={"priority": 0, "latency": 0},
    )
    assert c.app.state.gateway.s.score_weights == ScoreWeights(priority=0.0, latency=0.0)
    for _ in range(3):
        assert post(c, "openai").status_code == 200
    assert (c.seen("a-low"), c.seen("b-high")) == (3, 0)
