"""The shipped Prometheus scrape jobs get through /metrics, which needs a bearer token.

Each job (compose's `prometheus.yml`, Kubernetes' `prometheus-scrape.yaml`) reads the token from
`authorization.credentials_file`, where the deployment puts the same value the gateways read as
MINDROUTER_METRICS_TOKEN. Here a real gateway is started with the token from the environment,
the file is written where the job points, and /metrics is fetched as Prometheus does (the file's
contents as the bearer credentials).
"""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from mindrouter.app import build_app
from mindrouter.serving import ThreadServer
from mindrouter.settings import load_settings
from mindrouter.settings_sources import ENVIRONMENT
from tests.gateway.databases import fresh_database

from .files import DEPLOY, KUSTOMIZE, compose, one, render

TOKEN = "metrics-token-0123456789abcdef"


def _jobs() -> dict[str, dict[str, Any]]:
    compose_job = yaml.safe_load((DEPLOY / "compose" / "prometheus.yml").read_text())
    k8s_job = yaml.safe_load((KUSTOMIZE / "prometheus-scrape.yaml").read_text())
    return {"compose": compose_job["scrape_configs"][0], "kubernetes": k8s_job["scrape_configs"][0]}


def test_compose_hands_prometheus_the_gateways_token() -> None:
    spec = compose()
    services = spec["services"]
    variable = "MINDROUTER_METRICS_TOKEN"
    assert ENVIRONMENT[variable] == "metrics_token"
    for gateway in ("gateway-1", "gateway-2"):
        assert f"${{{variable}:?" in services[gateway]["environment"][variable]
    (secret,) = services["prometheus"]["secrets"]
    assert spec["secrets"][secret] == {"environment": variable}
    # Compose mounts a service's secret at /run/secrets/<name>: where the job reads it.
    job = _jobs()["compose"]
    assert job["authorization"]["credentials_file"] == posixpath.join("/run/secrets", secret)
    env_example = (DEPLOY / "compose" / "env.example").read_text()
    assert f"\n{variable}=" in env_example


def test_kubernetes_gateways_read_the_token_the_scrape_job_uses() -> None:
    deployment = one(render("small-site"), "Deployment", "mindrouter")
    (gateway,) = [
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "gateway"
    ]
    env = {e["name"]: e for e in gateway["env"]}
    ref = env["MINDROUTER_METRICS_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert (ref["name"], ref["key"]) == ("mindrouter-secrets", "metrics-token")
    job = _jobs()["kubernetes"]
    assert job["authorization"]["credentials_file"].endswith("/metrics-token")
    keep = [r for r in job["relabel_configs"] if r.get("action") == "keep"]
    assert any("prometheus_io_scrape" in r["source_labels"][0] for r in keep)
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/path"] == job["metrics_path"]


@pytest.mark.parametrize("job_name", ["compose", "kubernetes"])
def test_the_scrape_job_gets_the_metrics_with_the_token_file(
    job_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _jobs()[job_name]
    monkeypatch.setenv("MINDROUTER_METRICS_TOKEN", TOKEN)
    with fresh_database("sqlite", tmp_path) as url:
        config = tmp_path / "mindrouter.yaml"
        config.write_text(yaml.safe_dump({"database_url": url, "secret_key": "s" * 32}))
        gateway = ThreadServer(build_app(load_settings(config))).start()
        _scrape(job, gateway, tmp_path)


def _scrape(job: dict[str, Any], gateway: ThreadServer, tmp_path: Path) -> None:
    try:
        # The deployment's file (a compose secret, a mounted Secret): the value and a newline.
        token_file = tmp_path / posixpath.basename(job["authorization"]["credentials_file"])
        token_file.write_text(TOKEN + "\n")
        credentials = token_file.read_text().strip()
        url = gateway.url + job["metrics_path"]
        with httpx.Client(timeout=30) as client:
            scraped = client.get(url, headers={"Authorization": f"Bearer {credentials}"})
            assert scraped.status_code == 200, scraped.text
            assert "mindrouter_requests_total" in scraped.text
            assert client.get(url).status_code == 401
            wrong = client.get(url, headers={"Authorization": "Bearer not-the-token"})
            assert wrong.status_code in (401, 403)
    finally:
        gateway.stop()
