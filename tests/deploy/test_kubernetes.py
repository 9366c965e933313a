"""The Kustomize overlays render, every object validates against the Kubernetes schemas
(kubernetes-validate bundles them: no network), and the objects fit the gateway: probes on its
health paths, the config mounted where `serve --config` reads it, secrets from the environment
variables the settings read, non-root, a rolling update that drains."""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from mindrouter.cli import build_parser
from mindrouter.settings import settings_from_dict
from mindrouter.settings_sources import ENVIRONMENT

from .files import OVERLAYS, ROOT, dockerfile, named_like, one, render

# The oldest Kubernetes we claim (the HPA's autoscaling/v2 behaviour, policy/v1) and the newest
# the package knows.
KUBERNETES_VERSIONS = ("1.29.0", kubernetes_validate.utils.latest_version())
SECRET = "mindrouter-secrets"


@pytest.fixture(scope="module", params=OVERLAYS)
def rendered(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return render(request.param)


def pod_of(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]["template"]["spec"]
    return spec


def container(obj: dict[str, Any], name: str) -> dict[str, Any]:
    (c,) = [c for c in pod_of(obj)["containers"] if c["name"] == name]
    return c


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_every_object_validates_strictly(rendered: list[dict[str, Any]]) -> None:
    kinds = {o["kind"] for o in rendered}
    assert {"Deployment", "Service", "ConfigMap", "PodDisruptionBudget"} <= kinds
    assert {"HorizontalPodAutoscaler", "Job", "ServiceAccount", "Namespace"} <= kinds
    for version in KUBERNETES_VERSIONS:
        for obj in rendered:
            # strict: an unknown field (a typo) fails too
            kubernetes_validate.validate(obj, version, strict=True)


def test_a_typo_fails_validation() -> None:
    """The check above is able to fail: a misspelt probe field is caught."""
    deployment = one(render("small-site"), "Deployment", "mindrouter")
    container(deployment, "gateway")["readinessProbe"]["httpGett"] = {"path": "/readyz"}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[-1], strict=True)


def test_everything_is_in_the_sites_namespace(rendered: list[dict[str, Any]]) -> None:
    for obj in rendered:
        if obj["kind"] != "Namespace":
            assert obj["metadata"].get("namespace") == "mindrouter", obj["metadata"]["name"]


def test_the_gateway_replicas_roll_without_losing_capacity(rendered: list[dict[str, Any]]) -> None:
    deployment = one(rendered, "Deployment", "mindrouter")
    replicas = deployment["spec"]["replicas"]
    assert replicas >= 2
    rolling = deployment["spec"]["strategy"]["rollingUpdate"]
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    assert (rolling["maxUnavailable"], rolling["maxSurge"]) == (0, 1)

    hpa = one(rendered, "HorizontalPodAutoscaler", "mindrouter")
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", "mindrouter")
    assert hpa["spec"]["minReplicas"] == replicas < hpa["spec"]["maxReplicas"]

    pdb = one(rendered, "PodDisruptionBudget", "mindrouter")
    assert pdb["spec"]["maxUnavailable"] == 1 < replicas
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selects(pdb["spec"]["selector"]["matchLabels"], pod_labels)


def test_the_managed_site_keeps_the_three_replicas_of_the_base() -> None:
    deployment = one(render("managed-services"), "Deployment", "mindrouter")
    assert deployment["spec"]["replicas"] == 3


def test_probes_and_ports_are_the_gateways(rendered: list[dict[str, Any]]) -> None:
    gateway = container(one(rendered, "Deployment", "mindrouter"), "gateway")
    (port,) = gateway["ports"]
    assert (port["name"], port["containerPort"]) == ("http", 8000)
    assert gateway["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert gateway["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert gateway["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    # The gateway listens on every interface of the pod, on the port the probes ask.
    ns = build_parser().parse_args(gateway["args"])
    assert (ns.command, ns.host, ns.port) == ("serve", "0.0.0.0", 8000)


def test_the_service_reaches_only_gateway_pods(rendered: list[dict[str, Any]]) -> None:
    service = one(rendered, "Service", "mindrouter")
    selector = service["spec"]["selector"]
    gateway_labels = one(rendered, "Deployment", "mindrouter")["spec"]["template"]["metadata"]
    assert selects(selector, gateway_labels["labels"])
    others = [o for o in rendered if o["kind"] in ("Job", "StatefulSet")]
    assert others
    for other in others:
        assert not selects(selector, other["spec"]["template"]["metadata"]["labels"])
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] == "http"


def test_prometheus_scrapes_the_metrics_endpoint(rendered: list[dict[str, Any]]) -> None:
    deployment = one(rendered, "Deployment", "mindrouter")
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/path"] == "/metrics"
    assert int(annotations["prometheus.io/port"]) == 8000


def test_pods_run_as_the_images_non_root_user(rendered: list[dict[str, Any]]) -> None:
    (user,) = [i.value for i in dockerfile() if i.keyword == "USER"]
    uid = int(user.split(":")[0])
    for obj in rendered:
        if obj["kind"] not in ("Deployment", "Job", "StatefulSet"):
            continue
        pod = pod_of(obj)
        assert pod["securityContext"]["runAsNonRoot"] is True, obj["metadata"]["name"]
        assert pod["securityContext"]["runAsUser"] != 0
        assert pod["automountServiceAccountToken"] is False
        for c in pod["containers"]:
            assert c["securityContext"]["allowPrivilegeEscalation"] is False
            assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
            assert {"requests", "limits"} <= set(c["resources"]), c["name"]
        if obj["kind"] != "StatefulSet":  # ours, not PostgreSQL's or Redis's
            assert pod["securityContext"]["runAsUser"] == uid
            for c in pod["containers"]:
                assert c["securityContext"]["readOnlyRootFilesystem"] is True


def _secret_env(c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        e["name"]: e["valueFrom"]["secretKeyRef"]
        for e in c.get("env", [])
        if "secretKeyRef" in e.get("valueFrom", {})
    }


def test_secrets_come_from_the_secret_as_the_variables_the_settings_read(
    rendered: list[dict[str, Any]],
) -> None:
    gateway = container(one(rendered, "Deployment", "mindrouter"), "gateway")
    refs = _secret_env(gateway)
    assert set(ENVIRONMENT) <= set(refs)
    for name in ENVIRONMENT:
        assert refs[name]["name"] == SECRET and not refs[name].get("optional", False)
    # Single sign-on is optional: a site without it has no such key.
    assert refs["MINDROUTER_OIDC_CLIENT_SECRET"]["optional"] is True
    # No value is written into the manifests themselves.
    assert all("value" not in e for e in gateway["env"])

    job = container(one(rendered, "Job", "mindrouter-migrate"), "migrate")
    assert _secret_env(job)["MINDROUTER_DATABASE_URL"] == refs["MINDROUTER_DATABASE_URL"]
    assert not any(o["kind"] == "Secret" for o in rendered), "secrets are never committed"


def _mounted_config(obj: dict[str, Any], c: dict[str, Any], rendered: list[dict[str, Any]]) -> str:
    """The configuration file the container's `--config` names, read from its ConfigMap."""
    ns = build_parser().parse_args(c["args"])
    directory, filename = posixpath.split(ns.config)
    (mount,) = [m for m in c["volumeMounts"] if m["mountPath"] == directory]
    (volume,) = [v for v in pod_of(obj)["volumes"] if v["name"] == mount["name"]]
    config_map = one(rendered, "ConfigMap", volume["configMap"]["name"])
    text: str = config_map["data"][filename]
    return text


def test_the_config_is_mounted_where_serve_and_migrate_read_it(
    rendered: list[dict[str, Any]], tmp_path: Path
) -> None:
    deployment = one(rendered, "Deployment", "mindrouter")
    job = one(rendered, "Job", "mindrouter-migrate")
    gateway, migrate = container(deployment, "gateway"), container(job, "migrate")
    assert build_parser().parse_args(migrate["args"]).command == "migrate"
    assert gateway["image"] == migrate["image"]
    text = _mounted_config(deployment, gateway, rendered)
    assert _mounted_config(job, migrate, rendered) == text
    # The generated name carries a hash, so a changed config rolls the Deployment.
    assert named_like(rendered, "ConfigMap", "mindrouter-config")

    raw = yaml.safe_load(text)
    assert not {"secret_key", "database_url", "redis_url"} & set(raw), (
        "secrets belong in the Secret"
    )
    mounts = {m["mountPath"] for m in gateway["volumeMounts"]}
    for backend in raw.get("backends", []):
        assert "api_key" not in backend
        if "api_key_file" in backend:
            # The key file lies in a mounted secret volume; read a stand-in here.
            assert posixpath.dirname(backend["api_key_file"]) in mounts
            stand_in = tmp_path / backend["name"]
            stand_in.write_text("sk-test")
            backend["api_key_file"] = str(stand_in)
    settings = settings_from_dict(raw)
    assert (settings.host, settings.port) == ("0.0.0.0", 8000)
    assert settings.audit_retention_days > 0
    grace = pod_of(deployment)["terminationGracePeriodSeconds"]
    pause = int(gateway["lifecycle"]["preStop"]["exec"]["command"][1])
    assert 0 < settings.shutdown_grace_s <= grace - pause - 5, "the drain ends before SIGKILL"


def test_the_migration_job_retries_and_never_restarts_forever(
    rendered: list[dict[str, Any]],
) -> None:
    job = one(rendered, "Job", "mindrouter-migrate")
    assert pod_of(job)["restartPolicy"] in ("OnFailure", "Never")
    assert 0 < job["spec"]["backoffLimit"] <= 10


def test_the_grace_period_covers_the_pre_stop_pause_and_is_documented(
    rendered: list[dict[str, Any]],
) -> None:
    deployment = one(rendered, "Deployment", "mindrouter")
    grace = pod_of(deployment)["terminationGracePeriodSeconds"]
    pause = container(deployment, "gateway")["lifecycle"]["preStop"]["exec"]["command"]
    assert pause[0] == "sleep" and 0 < int(pause[1]) < grace
    operations = (ROOT / "docs" / "operations.md").read_text()
    assert f"terminationGracePeriodSeconds: {grace}" in operations
