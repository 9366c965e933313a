"""The sample Grafana dashboard in deploy/: generated from its script, and every series it
queries is one the gateway exports."""

from __future__ import annotations

import importlib.util
import json
import re
import time
from pathlib import Path

from mindrouter.observability.metrics import Metrics
from mindrouter.routing.backend_config import BackendConfig
from mindrouter.routing.catalog import BackendState, Catalog, ModelSpec

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"


def _generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("make_dashboard", DEPLOY / "make_dashboard.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_dashboard_is_what_the_script_makes() -> None:
    committed = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    assert committed == _generator().dashboard(), "run: python deploy/make_dashboard.py"


def test_every_queried_series_is_exported() -> None:
    metrics = Metrics()
    catalog = Catalog(
        [ModelSpec("m")],
        [BackendState(BackendConfig("gpu-1", "vllm", "http://gpu-1"), serves={"m": "m"})],
    )
    metrics.watch(catalog, lambda: {"m": 0}, time.monotonic)
    exported = set(re.findall(r"^# TYPE (\S+) (\S+)", metrics.exposition().decode(), re.M))
    names = set()
    for name, kind in exported:
        names.add(name)
        if kind == "counter":
            names.add(f"{name}_total")
        if kind == "histogram":
            names.add(f"{name}_bucket")
    dashboard = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    queried = {
        series
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for series in re.findall(r"mindrouter_[a-z_]+", target["expr"])
    }
    assert len(queried) >= 10
    assert queried <= names, queried - names
    # The panels cover requests, errors, latency, first token, tokens, queue, backends, breaker.
    for family in ("requests", "errors", "duration", "first_token", "tokens", "queue", "breaker"):
        assert any(family in q for q in queried), family
