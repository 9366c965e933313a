"""deploy/compose.yaml: valid against the Compose Specification's JSON schema (the copy
check-jsonschema ships, from compose-spec/compose-spec, Apache-2.0), and wired together: two
gateways from the Dockerfile after the migration, Prometheus scraping both, Grafana with the
dashboard, nginx with the documented example, only the proxy on a public port."""

from __future__ import annotations

import importlib.resources
import json
import posixpath
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from mindrouter.cli import build_parser
from mindrouter.settings import settings_from_dict

from .files import DEPLOY, compose, one, render

GATEWAYS = ("gateway-1", "gateway-2")


def compose_schema() -> dict[str, Any]:
    vendored = importlib.resources.files("check_jsonschema.builtin_schemas.vendor")
    schema: dict[str, Any] = json.loads(vendored.joinpath("compose-spec.json").read_text())
    return schema


def validator() -> jsonschema.protocols.Validator:
    schema = compose_schema()
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def bind_mounts(service: dict[str, Any]) -> dict[str, str]:
    """container path -> host path (relative to deploy/) of the service's bind mounts."""
    out = {}
    for volume in service.get("volumes", []):
        host, target, *_ = volume.split(":")
        if host.startswith("."):
            out[target] = host
    return out


def test_the_file_is_valid_compose() -> None:
    errors = list(validator().iter_errors(compose()))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]


def test_the_schema_catches_mistakes() -> None:
    broken = compose()
    broken["services"]["gateway-1"] = {**broken["services"]["gateway-1"], "restrat": "always"}
    assert list(validator().iter_errors(broken))
    broken = compose()
    broken["services"]["redis"]["healthcheck"]["interval"] = 5  # a duration is a string
    assert list(validator().iter_errors(broken))


def test_two_gateways_from_the_dockerfile_start_after_the_migration() -> None:
    services = compose()["services"]
    images = {services[name]["image"] for name in (*GATEWAYS, "migrate")}
    assert len(images) == 1
    for name in (*GATEWAYS, "migrate"):
        build = services[name]["build"]
        assert (DEPLOY / posixpath.relpath(build["dockerfile"], "deploy")).is_file()
        assert (DEPLOY / build["context"] / "uv.lock").is_file()
    assert build_parser().parse_args(services["migrate"]["command"]).command == "migrate"
    for name in GATEWAYS:
        gateway = services[name]
        assert gateway["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        assert gateway["depends_on"]["redis"]["condition"] == "service_healthy"
        assert "ports" not in gateway, "gateways are reached through the proxy"
        assert gateway["read_only"] is True
        env = gateway["environment"]
        assert "@postgres:5432/" in env["MINDROUTER_DATABASE_URL"]
        assert env["MINDROUTER_REDIS_URL"].startswith("redis://redis:6379/")
        assert env["MINDROUTER_SECRET_KEY"].startswith("${MINDROUTER_SECRET_KEY:?")
    assert services["postgres"]["healthcheck"]["test"][1] == "pg_isready"


def test_the_gateway_config_is_mounted_where_the_image_reads_it() -> None:
    services = compose()["services"]
    for name in (*GATEWAYS, "migrate"):
        mounts = bind_mounts(services[name])
        assert "/etc/mindrouter/mindrouter.yaml" in mounts
        path = DEPLOY / mounts["/etc/mindrouter/mindrouter.yaml"]
    settings = settings_from_dict(yaml.safe_load(path.read_text()))
    assert (settings.host, settings.port) == ("0.0.0.0", 8000)
    assert not {"secret_key", "database_url"} & set(yaml.safe_load(path.read_text()))


def test_prometheus_scrapes_both_gateways_and_grafana_shows_the_dashboard() -> None:
    services = compose()["services"]
    prometheus = yaml.safe_load(
        (DEPLOY / bind_mounts(services["prometheus"])["/etc/prometheus/prometheus.yml"]).read_text()
    )
    (job,) = prometheus["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    assert job["static_configs"][0]["targets"] == [f"{g}:8000" for g in GATEWAYS]

    grafana = bind_mounts(services["grafana"])
    provisioning = DEPLOY / grafana["/etc/grafana/provisioning"]
    (datasource,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yaml").read_text())[
        "datasources"
    ]
    assert datasource["type"] == "prometheus" and datasource["isDefault"] is True
    assert datasource["url"] == "http://prometheus:9090"
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "mindrouter.yaml").read_text())[
        "providers"
    ]
    dashboards = [t for t, h in grafana.items() if h == "./grafana-dashboard.json"]
    assert [posixpath.dirname(d) for d in dashboards] == [provider["options"]["path"]]
    assert json.loads((DEPLOY / "grafana-dashboard.json").read_text())["panels"]


def test_only_the_proxy_is_public_and_it_runs_the_documented_nginx_example() -> None:
    services = compose()["services"]
    for name, service in services.items():
        for port in service.get("ports", []):
            if name != "proxy":
                assert port.startswith("127.0.0.1:"), (name, port)
    proxy = bind_mounts(services["proxy"])
    assert proxy["/etc/nginx/conf.d/default.conf"] == "./nginx/mindrouter.conf"
    upstream = (DEPLOY / "nginx" / "mindrouter.conf").read_text()
    for gateway in GATEWAYS:
        assert f"server {gateway}:8000;" in upstream


def test_every_bind_mounted_file_is_in_the_repository() -> None:
    for name, service in compose()["services"].items():
        for target, host in bind_mounts(service).items():
            if host == "./tls":
                continue  # the site's certificate, never committed
            assert (DEPLOY / host).exists(), (name, host, target)


@pytest.mark.parametrize("overlay", ["small-site"])
def test_compose_gives_the_gateways_the_grace_period_kubernetes_does(overlay: str) -> None:
    deployment = one(render(overlay), "Deployment", "mindrouter")
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    for gateway in GATEWAYS:
        assert compose()["services"][gateway]["stop_grace_period"] == f"{grace}s"


def test_the_secrets_file_is_kept_out_of_git() -> None:
    ignored = (Path(DEPLOY).parent / ".gitignore").read_text().splitlines()
    assert "deploy/.env" in ignored and "deploy/tls/" in ignored
    example = (DEPLOY / "compose" / "env.example").read_text()
    for variable in ("POSTGRES_PASSWORD", "MINDROUTER_SECRET_KEY", "GRAFANA_ADMIN_PASSWORD"):
        assert f"{variable}=\n" in example
