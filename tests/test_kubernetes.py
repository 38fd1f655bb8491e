"""deploy/kubernetes/: every manifest validates against the Kubernetes schemas kubernetes-validate
ships (offline, strict: an unknown field fails), for the oldest and newest versions we name; the
pods run non-root with a read-only root filesystem, no capabilities and RuntimeDefault seccomp;
probes hit /livez and /readyz on the metrics port; the Job runs `effectgate migrate`; Secrets
hold placeholders only and stay out of the kustomization; the config is mounted as a directory (so a
ConfigMap update reaches the file SIGHUP re-reads); the Service is headless; the ServiceMonitor
scrapes the Service's metrics port and the PrometheusRule carries deploy/alerts.yml; the
ConfigMap's effectgate.toml is a valid gateway config."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from effectgate.gateway.config import load_config

KUBE = Path(__file__).resolve().parent.parent / "deploy" / "kubernetes"
MANIFESTS = sorted(path for path in KUBE.glob("*.yaml") if path.name != "kustomization.yaml")
# Custom resources of the Prometheus Operator: kubernetes-validate has no schema for them.
OPERATOR_KINDS = ("ServiceMonitor", "PrometheusRule")
CORE = [
    path
    for path in MANIFESTS
    if all(doc["kind"] not in OPERATOR_KINDS for doc in yaml.safe_load_all(path.read_text()) if doc)
]
VERSIONS = ("1.30.0", "1.37.0")


def documents() -> list[dict[str, Any]]:
    return [doc for path in MANIFESTS for doc in yaml.safe_load_all(path.read_text()) if doc]


def one(kind: str) -> dict[str, Any]:
    (found,) = (doc for doc in documents() if doc["kind"] == kind)
    return found


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("path", CORE, ids=lambda p: p.name)
def test_every_manifest_validates_against_the_schemas(path: Path, version: str) -> None:
    for doc in yaml.safe_load_all(path.read_text()):
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_validator_catches_a_misplaced_field() -> None:
    broken = one("Deployment")
    broken["spec"]["template"]["spec"]["containers"][0]["readonlyRootFilesystem"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, VERSIONS[0], strict=True)


def test_the_kustomization_lists_every_manifest_but_the_secrets() -> None:
    listed = yaml.safe_load((KUBE / "kustomization.yaml").read_text())["resources"]
    examples = [path.name for path in MANIFESTS if ".example." in path.name]
    assert examples == ["secrets.example.yaml"]
    assert sorted(listed) == [path.name for path in MANIFESTS if path.name not in examples]
    # `kubectl apply -k` again must never overwrite a real Secret with a placeholder.
    applied = [doc for name in listed for doc in yaml.safe_load_all((KUBE / name).read_text()) if doc]
    assert "Secret" not in {doc["kind"] for doc in applied}
    kinds = {doc["kind"] for doc in applied}
    core = {"Deployment", "Job", "ConfigMap", "Service", "PodDisruptionBudget", "NetworkPolicy"}
    assert {*core, *OPERATOR_KINDS} <= kinds


def test_the_config_is_mounted_as_a_directory_so_updates_reach_it() -> None:
    for spec in pod_specs():
        (container,) = spec["containers"]
        (mount,) = (m for m in container["volumeMounts"] if m["name"] == "config")
        assert "subPath" not in mount and mount["mountPath"] == "/etc/effectgate/config"
        assert container["args"][-1] == "/etc/effectgate/config/effectgate.toml"


def test_the_service_is_headless_so_clients_balance_calls() -> None:
    service = one("Service")["spec"]
    assert service["clusterIP"] == "None"
    deployment = one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["selector"].items() <= deployment.items()


def test_the_service_monitor_scrapes_the_metrics_port() -> None:
    monitor = one("ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    service = one("Service")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {port["name"] for port in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"


def test_the_prometheus_rule_is_deploy_alerts_yml_and_names_what_the_docs_name() -> None:
    rule = one("PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    alerts = yaml.safe_load((KUBE.parent / "alerts.yml").read_text())
    assert rule["spec"]["groups"] == alerts["groups"]
    names = {r["alert"] for group in alerts["groups"] for r in group["rules"]}
    docs = KUBE.parent.parent / "docs"
    named = {word for page in docs.glob("*.md") for word in re.findall(r"\bEffectgate[A-Z][A-Za-z]+", page.read_text())}
    assert named and named <= names
    for group in alerts["groups"]:
        for entry in group["rules"]:
            assert set(entry) <= {"alert", "expr", "for", "labels", "annotations"}
            assert entry["labels"]["severity"] in {"page", "ticket"} and entry["annotations"]["summary"]


def pod_specs() -> list[dict[str, Any]]:
    return [one(kind)["spec"]["template"]["spec"] for kind in ("Deployment", "Job")]


def test_pods_run_locked_down_with_resources() -> None:
    for spec in pod_specs():
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] == 10001
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
        assert spec["automountServiceAccountToken"] is False
        for container in spec["containers"]:
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"] == {"drop": ["ALL"]}
            assert container["resources"]["requests"]["memory"] and container["resources"]["limits"]["memory"]


def test_the_deployment_runs_three_replicas_probed_on_the_metrics_port() -> None:
    deployment = one("Deployment")
    assert deployment["spec"]["replicas"] == 3
    spec = deployment["spec"]["template"]["spec"]
    (gateway,) = spec["containers"]
    ports = {port["name"]: port["containerPort"] for port in gateway["ports"]}
    assert ports == {"grpc": 50051, "metrics": 9464}
    assert gateway["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "metrics"}
    assert gateway["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    config = tomllib.loads(one("ConfigMap")["data"]["effectgate.toml"])
    assert config["telemetry"]["prometheus_listen"].endswith(":9464")
    # The pod is killed only after the gateway's own drain.
    grace = float(config["server"]["shutdown_grace"].rstrip("s"))
    assert spec["terminationGracePeriodSeconds"] > grace
    budget = one("PodDisruptionBudget")["spec"]
    assert budget["maxUnavailable"] == 1
    assert budget["selector"]["matchLabels"].items() <= deployment["spec"]["selector"]["matchLabels"].items()
    policy = one("NetworkPolicy")["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    assert {port["port"] for rule in policy["ingress"] for port in rule["ports"]} == {50051, 9464}


def test_the_job_migrates_with_its_own_role_and_the_gateway_with_another() -> None:
    job = one("Job")["spec"]["template"]["spec"]
    (migrate,) = job["containers"]
    assert migrate["args"][-3:] == ["migrate", "--config", "/etc/effectgate/config/effectgate.toml"]
    assert job["restartPolicy"] == "Never"
    (gateway,) = one("Deployment")["spec"]["template"]["spec"]["containers"]
    assert gateway["args"][-3:] == ["serve", "--config", "/etc/effectgate/config/effectgate.toml"]
    secret_refs = {c["name"]: {e["secretRef"]["name"] for e in c["envFrom"]} for c in (migrate, gateway)}
    assert "effectgate-db-migrator" in secret_refs["migrate"] and "effectgate-db-migrator" not in secret_refs["gateway"]
    assert "effectgate-db-runtime" in secret_refs["gateway"]


def test_secrets_hold_placeholders_only() -> None:
    secrets = [doc for doc in documents() if doc["kind"] == "Secret"]
    assert {s["metadata"]["name"] for s in secrets} >= {"effectgate-provider-keys", "effectgate-principal-tokens"}
    for secret in secrets:
        assert "data" not in secret, secret["metadata"]["name"]  # base64 would hide a real value
        for key, value in secret["stringData"].items():
            assert key == "PGUSER" or value.startswith("REPLACE-ME"), (secret["metadata"]["name"], key)


def test_the_configmap_is_a_gateway_config(tmp_path: Path) -> None:
    text = one("ConfigMap")["data"]["effectgate.toml"]
    # TLS files come from the Secret at run time: point them at test files for the load.
    for name in ("tls.crt", "tls.key"):
        (tmp_path / name).write_text("placeholder")
    (tmp_path / "effectgate.toml").write_text(text.replace("/etc/effectgate/tls", str(tmp_path)))
    config = load_config(tmp_path / "effectgate.toml")
    assert len(config.principals) == 2
    assert "@" not in tomllib.loads(text)["store"]["url"]  # credentials come from PGUSER / PGPASSWORD
