"""The Helm chart: lint, schema, rendering, and install/upgrade on the real API server.

helm is the real binary (built from its Go module by the harness); "the real
API server" has no controllers, so a Deployment gets no Pods: these tests check
what Helm and the API server accept and store. The operator running with the
chart's RBAC is tests/e2e/test_rbac.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness import tools
from harness.kube_apiserver import KubeAPIServer

from kquota.reconcile.settings import OperatorSettings
from tests.support.paths import REPO

pytestmark = pytest.mark.e2e

CHART = REPO / "helm" / "kquota"


@dataclass
class Helm:
    """The real helm, with its config, cache and data kept in ``home`` (not ~/.config)."""

    home: Path
    kube: KubeAPIServer | None = None

    def __call__(
        self,
        *args: str,
        check: bool = True,
        input: str | None = None,  # noqa: A002 - subprocess's name
        timeout: float = 180,
    ) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ)
        for var in ("CONFIG", "CACHE", "DATA"):
            env[f"HELM_{var}_HOME"] = str(self.home / var.lower())
        argv = [str(tools.helm())]
        if self.kube is not None:
            argv += ["--kubeconfig", str(self.kube.kubeconfig)]
        result = subprocess.run(
            [*argv, *args], input=input, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"helm {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
            )
        return result


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(tmp_path_factory.mktemp("helm"))


def render(helm: Helm, values: dict[str, Any] | None = None, *args: str) -> list[dict[str, Any]]:
    values_args = ["--values", "-"] if values else []
    out = helm(
        "template", "kq", str(CHART), "--namespace", "kquota-system", *args, *values_args,
        input=json.dumps(values) if values else None,
    ).stdout  # fmt: skip
    return [d for d in yaml.safe_load_all(out) if d]


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


SASL_CLUSTER = {
    "name": "main",
    "spec": {
        "bootstrapServers": "kafka-0.kafka.kafka:9093",
        "security": {
            "protocol": "SASL_SSL",
            "sasl": {"mechanism": "SCRAM-SHA-512", "credentialsSecretRef": {"namespace": "kafka", "name": "kq-admin"}},
            "tls": {"caSecretRef": {"namespace": "kafka", "name": "kafka-ca"}},
        },
        "unmanaged": {"policy": "Ignore"},
    },
}


# -- lint and schema ----------------------------------------------------------------


def test_helm_lint_passes_with_default_and_full_values(helm: Helm, tmp_path: Path) -> None:
    helm("lint", "--strict", str(CHART))
    full = tmp_path / "full.yaml"
    full.write_text(
        json.dumps(
            {
                "kafka": {"clusters": [SASL_CLUSTER], "extraSecrets": [{"namespace": "ops", "name": "other"}]},
                "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}},
                "operator": {"protectedUsers": ["admin"], "verbose": True},
            }
        )
    )
    helm("lint", "--strict", str(CHART), "--values", str(full))


def test_values_schema_is_generated_from_the_crd() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "deploy" / "values_schema.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_every_value_is_commented() -> None:
    """Each key in values.yaml has a comment on the line(s) just above it."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    missing = []
    for i, line in enumerate(lines):
        if re.match(r"^\s*[A-Za-z][\w-]*:", line) and not (i > 0 and lines[i - 1].lstrip().startswith("#")):
            missing.append(line.strip())
    assert not missing, f"values.yaml keys without a comment: {missing}"


BAD_VALUES = [
    ("unknown top-level key", {"replicas": 3}, "additional properties 'replicas' not allowed"),
    ("wrong type", {"operator": {"driftInterval": "fast"}}, "/operator/driftInterval"),
    ("misspelled nested key", {"image": {"tags": "1.0"}}, "additional properties 'tags' not allowed"),
    (
        "typo in a KafkaCluster spec",
        {"kafka": {"clusters": [{"name": "main", "spec": {"bootstrapServer": "k:9092"}}]}},
        "additional properties 'bootstrapServer' not allowed",
    ),
    (
        "invalid SASL mechanism",
        {
            "kafka": {
                "clusters": [
                    {
                        "name": "main",
                        "spec": {
                            "bootstrapServers": "k:9092",
                            "security": {
                                "protocol": "SASL_SSL",
                                "sasl": {
                                    "mechanism": "SCRAM-SHA-1",
                                    "credentialsSecretRef": {"namespace": "k", "name": "s"},
                                },
                            },
                        },
                    }
                ]
            }
        },
        "/kafka/clusters/0/spec/security/sasl/mechanism",
    ),
    (
        "OAUTHBEARER without its oauth section",
        {
            "kafka": {
                "clusters": [
                    {
                        "name": "main",
                        "spec": {
                            "bootstrapServers": "k:9092",
                            "security": {
                                "protocol": "SASL_SSL",
                                "sasl": {
                                    "mechanism": "OAUTHBEARER",
                                    "credentialsSecretRef": {"namespace": "k", "name": "s"},
                                },
                            },
                        },
                    }
                ]
            }
        },
        "missing property 'oauth'",
    ),
    (
        "cluster name not a DNS name",
        {"kafka": {"clusters": [{"name": "Main", "spec": {"bootstrapServers": "k:1"}}]}},
        "/kafka/clusters/0/name",
    ),
    ("no replicas", {"replicaCount": 0}, "/replicaCount"),
    ("secret without namespace", {"kafka": {"extraSecrets": [{"name": "s"}]}}, "missing property 'namespace'"),
    ("several replicas without peering", {"peering": {"enabled": False}}, "needs peering.enabled: true"),
]


@pytest.mark.parametrize(("values", "message"), [b[1:] for b in BAD_VALUES], ids=[b[0] for b in BAD_VALUES])
def test_bad_values_are_rejected_with_a_clear_message(helm: Helm, values: dict[str, Any], message: str) -> None:
    result = helm("template", "kq", str(CHART), "--values", "-", input=json.dumps(values), check=False)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


SASL = {"mechanism": "SCRAM-SHA-512", "credentialsSecretRef": {"namespace": "kafka", "name": "kq-admin"}}
TLS = {"caSecretRef": {"namespace": "kafka", "name": "kafka-ca"}}
SECURITY_CASES = [
    {**({"protocol": p} if p else {}), **({"sasl": SASL} if sasl else {}), **({"tls": TLS} if tls else {})}
    for p in (None, "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
    for sasl in (False, True)
    for tls in (False, True)
]


@pytest.mark.parametrize(
    "security",
    SECURITY_CASES,
    ids=lambda s: "+".join(f"{k}={v}" if k == "protocol" else k for k, v in s.items()) or "none",
)
def test_values_refuse_what_the_api_server_refuses_for_security(helm: Helm, security: dict[str, Any]) -> None:
    """The values schema states the security rules the CRD checks with CEL (SASL protocols need `sasl`,
    `sasl` and `tls` only with the protocols that use them): `helm template` accepts exactly the
    settings the KafkaCluster model (the CEL rules' Python twins) accepts."""
    from pydantic import ValidationError

    from kquota.api.security import Security

    try:
        Security.model_validate(security)
        valid = True
    except ValidationError:
        valid = False
    values = {"kafka": {"clusters": [{"name": "main", "spec": {"bootstrapServers": "k:9093", "security": security}}]}}
    result = helm("template", "kq", str(CHART), "--values", "-", input=json.dumps(values), check=False)
    assert (result.returncode == 0) == valid, result.stderr
    if not valid:
        assert "/kafka/clusters/0/spec/security" in result.stderr, result.stderr


def test_a_sasl_cluster_without_sasl_settings_is_refused_by_name(helm: Helm) -> None:
    values = {
        "kafka": {
            "clusters": [{"name": "main", "spec": {"bootstrapServers": "k:9093", "security": {"protocol": "SASL_SSL"}}}]
        }
    }
    result = helm("template", "kq", str(CHART), "--values", "-", input=json.dumps(values), check=False)
    assert result.returncode != 0
    assert "at '/kafka/clusters/0/spec/security': missing property 'sasl'" in result.stderr, result.stderr


# -- what the chart renders -----------------------------------------------------------


def test_deployment_is_hardened_and_runs_with_peering(helm: Helm) -> None:
    docs = render(helm, {"kafka": {"clusters": [SASL_CLUSTER]}})
    (deploy,) = find(docs, "Deployment")
    assert deploy["spec"]["replicas"] >= 2
    pod = deploy["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "liveness"}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["KQUOTA_PEERING"] == "kq-kquota"
    assert env["KQUOTA_NAMESPACE"] == "kquota-system"
    assert env["KQUOTA_DEFAULT_CLUSTER"] == "main"
    (peering,) = find(docs, "ClusterKopfPeering")
    assert peering["metadata"]["name"] == "kq-kquota"
    (pdb,) = find(docs, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"] == deploy["spec"]["selector"]["matchLabels"]
    (svc,) = find(docs, "Service")
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}]
    assert not find(docs, "ServiceMonitor")
    (cluster,) = find(docs, "KafkaCluster")
    assert cluster["spec"] == SASL_CLUSTER["spec"]


#: Operator settings the chart does not pass, and why.
NOT_FROM_THE_CHART = {
    "kubeconfig": "in-cluster service account",
}
#: Settings whose chart default differs from `kquota operator`'s on purpose.
CHART_CHOICES = {"default_cluster", "peering", "log_format"}


def test_every_operator_setting_is_a_chart_value_with_the_operators_default(
    helm: Helm, monkeypatch: pytest.MonkeyPatch
) -> None:
    (deploy,) = find(render(helm, {"kafka": {"clusters": [SASL_CLUSTER]}}), "Deployment")
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    missing = {
        name
        for name in OperatorSettings.model_fields
        if f"KQUOTA_{name.upper()}" not in env and name not in NOT_FROM_THE_CHART
    }
    assert not missing, f"operator settings with no chart value: {sorted(missing)}"
    # The operator reading the rendered environment gets its own defaults, bar deliberate choices.
    for name in list(os.environ):
        if name.startswith("KQUOTA_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    from_chart, defaults = OperatorSettings().model_dump(), OperatorSettings.model_construct().model_dump()
    differ = {k for k in defaults if from_chart[k] != defaults[k]}
    assert differ == CHART_CHOICES, {k: (from_chart[k], defaults[k]) for k in differ ^ CHART_CHOICES}


def test_each_replica_takes_its_own_peering_priority(helm: Helm, tmp_path: Path) -> None:
    """The container's shell wrapper, run for real with a stand-in kquota that prints its environment."""
    (container,) = find(render(helm), "Deployment")[0]["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["/bin/sh", "-c"]
    fake = tmp_path / "kquota"
    fake.write_text('#!/bin/sh\necho "$KQUOTA_PEERING_PRIORITY $*"\n')
    fake.chmod(0o755)

    def run(pod: str, **extra: str) -> str:
        env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "POD_ID": pod, **extra}
        return subprocess.run(
            ["/bin/sh", "-c", *container["args"]], env=env, capture_output=True, text=True, check=False
        ).stdout

    first, second = run("kq-kquota-7d9f-abcde"), run("kq-kquota-7d9f-fghij")
    assert first.split()[1:] == ["operator"]
    assert first.split()[0].isdigit() and second.split()[0].isdigit()
    assert first.split()[0] != second.split()[0]
    assert run("kq-kquota-7d9f-abcde") == first  # stable for a Pod
    assert run("x", KQUOTA_PEERING_PRIORITY="7").split()[0] == "7"


def test_single_standalone_replica(helm: Helm) -> None:
    docs = render(helm, {"replicaCount": 1, "peering": {"enabled": False}}, "--include-crds")
    (deploy,) = find(docs, "Deployment")
    assert deploy["spec"]["strategy"] == {"type": "Recreate"}
    env = {e["name"] for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "KQUOTA_PEERING" not in env
    assert not find(docs, "ClusterKopfPeering") and not find(docs, "PodDisruptionBudget")
    crds = sorted(d["metadata"]["name"] for d in find(docs, "CustomResourceDefinition"))
    assert crds == sorted(p.stem for p in (CHART / "crds").glob("*.yaml"))


def test_chart_ships_the_generated_crds_and_kopfs_peering_crd(helm: Helm) -> None:
    crds = sorted(d["metadata"]["name"] for d in find(render(helm, None, "--include-crds"), "CustomResourceDefinition"))
    assert crds == sorted([*(p.stem for p in (CHART / "crds").glob("*.yaml")), "clusterkopfpeerings.kopf.dev"])


def test_quota_kinds_aggregate_to_the_default_roles(helm: Helm) -> None:
    roles = {r["metadata"]["name"]: r for r in find(render(helm), "ClusterRole")}
    edit, view = roles["kq-kquota-edit"], roles["kq-kquota-view"]
    aggregate = "rbac.authorization.k8s.io/aggregate-to-"
    assert {k for k, v in edit["metadata"]["labels"].items() if k.startswith(aggregate) and v == "true"} == {
        f"{aggregate}admin",
        f"{aggregate}edit",
    }
    assert {k for k in view["metadata"]["labels"] if k.startswith(aggregate)} == {f"{aggregate}view"}
    kinds = ["clientquotas", "controllermutationquotas", "topicquotas"]
    assert [r["resources"] for r in edit["rules"]] == [kinds] == [r["resources"] for r in view["rules"]]
    assert set(view["rules"][0]["verbs"]) == {"get", "list", "watch"}
    assert {"create", "update", "patch", "delete"} <= set(edit["rules"][0]["verbs"])
    off = {
        r["metadata"]["name"] for r in find(render(helm, {"rbac": {"aggregateToDefaultRoles": False}}), "ClusterRole")
    }
    assert off == {"kq-kquota"}


def test_watched_namespaces_reach_the_operator_and_its_rbac(helm: Helm) -> None:
    def rendered(values: dict[str, Any] | None) -> tuple[str, list[dict[str, Any]]]:
        docs = render(helm, values)
        (container,) = find(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        (role,) = find(docs, "ClusterRole", "kq-kquota")
        return env["KQUOTA_WATCH_NAMESPACES"], role["rules"]

    env, rules = rendered(None)
    assert json.loads(env) == []
    assert not [r for r in rules if "namespaces" in r["resources"]]
    env, rules = rendered({"operator": {"watchNamespaces": ["team-*", "!team-x", "ops"]}})
    assert json.loads(env) == ["team-*", "!team-x", "ops"]
    assert [r["verbs"] for r in rules if r["resources"] == ["namespaces"]] == [["list", "watch"]]


def test_the_image_is_the_one_docs_install_builds(helm: Helm) -> None:
    """Nothing publishes an image from this repository: the chart's default is the name docs/install.md's
    build command tags, for the chart's appVersion."""
    (container,) = find(render(helm), "Deployment")[0]["spec"]["template"]["spec"]["containers"]
    install = (REPO / "docs" / "install.md").read_text()
    assert f"-t {container['image']} ." in install
    assert "publishes no image" in install


def test_service_monitor_is_optional(helm: Helm) -> None:
    docs = render(helm, {"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}}})
    (monitor,) = find(docs, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    (svc,) = find(docs, "Service")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()


def test_secret_access_is_by_name_per_namespace(helm: Helm) -> None:
    values = {"kafka": {"clusters": [SASL_CLUSTER], "extraSecrets": [{"namespace": "ops", "name": "legacy"}]}}
    docs = render(helm, values)
    roles = {r["metadata"]["namespace"]: r["rules"] for r in find(docs, "Role", "kq-kquota-secrets")}
    rule = {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}
    assert roles == {
        "kafka": [{**rule, "resourceNames": ["kafka-ca", "kq-admin"]}],
        "ops": [{**rule, "resourceNames": ["legacy"]}],
    }
    assert {b["metadata"]["namespace"] for b in find(docs, "RoleBinding", "kq-kquota-secrets")} == {"kafka", "ops"}
    # Nowhere else are Secrets mentioned.
    (cluster_role,) = find(docs, "ClusterRole", "kq-kquota")
    assert not [r for r in cluster_role["rules"] if "secrets" in r["resources"]]


# -- against the API server -------------------------------------------------------------


def split_crds(text: str) -> tuple[str, str]:
    docs = [d for d in yaml.safe_load_all(text) if d]
    crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    rest = [d for d in docs if d["kind"] != "CustomResourceDefinition"]
    return (
        json.dumps({"apiVersion": "v1", "kind": "List", "items": crds}),
        json.dumps({"apiVersion": "v1", "kind": "List", "items": rest}),
    )


@pytest.mark.k8s_floor
def test_template_passes_server_side_dry_run(kube: KubeAPIServer, helm: Helm) -> None:
    ns, secret_ns = kube.create_namespace("kquota"), kube.create_namespace("kafka")
    cluster = {**SASL_CLUSTER, "name": f"kc-{uuid.uuid4().hex[:6]}"}
    spec: dict[str, Any] = json.loads(json.dumps(cluster["spec"]))
    spec["security"]["sasl"]["credentialsSecretRef"]["namespace"] = secret_ns
    spec["security"]["tls"]["caSecretRef"]["namespace"] = secret_ns
    values = {"kafka": {"clusters": [{"name": cluster["name"], "spec": spec}]}}
    out = helm(
        "template", f"dry-{uuid.uuid4().hex[:6]}", str(CHART), "--namespace", ns, "--include-crds", "--values", "-",
        input=json.dumps(values),
    ).stdout  # fmt: skip
    crds, rest = split_crds(out)
    # CRDs for real first (as Helm does from crds/): custom resources cannot be dry-run without them.
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=crds)
    for name in [d["metadata"]["name"] for d in json.loads(crds)["items"]]:
        kube.kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s")
    result = kube.kubectl("apply", "--dry-run=server", "-f", "-", input=rest)
    kinds = re.findall(r"^(\S+?)/", result.stdout, flags=re.M)
    assert {"deployment.apps", "clusterrole.rbac.authorization.k8s.io", "kafkacluster.kquota.io"} <= set(kinds)
    assert "clusterkopfpeering.kopf.dev" in kinds, result.stdout


@pytest.mark.k8s_floor
def test_install_then_upgrade_with_changed_values(kube: KubeAPIServer, tmp_path: Path) -> None:
    helm = Helm(tmp_path / "helm", kube)
    ns, secret_ns = kube.create_namespace("kquota"), kube.create_namespace("kafka")
    release = f"kq-{uuid.uuid4().hex[:6]}"
    first = {"kafka": {"clusters": [{"name": f"{release}-a", "spec": {"bootstrapServers": "kafka-a:9092"}}]}}
    out = helm("install", release, str(CHART), "--namespace", ns, "--values", "-", input=json.dumps(first)).stdout
    assert "STATUS: deployed" in out and "kubectl get kafkaclusters" in out  # NOTES.txt
    deploy = json.loads(kube.kubectl("get", "deployment", f"{release}-kquota", "-n", ns, "-o", "json").stdout)
    assert deploy["spec"]["replicas"] == 2
    kube.kubectl("get", "kafkacluster", f"{release}-a")
    kube.kubectl("get", "clusterkopfpeering", f"{release}-kquota")

    second = {
        "replicaCount": 3,
        "operator": {"driftInterval": 15, "protectedUsers": ["admin"]},
        "kafka": {
            "clusters": [
                *first["kafka"]["clusters"],
                {
                    "name": f"{release}-b",
                    "spec": {
                        "bootstrapServers": "kafka-b:9093",
                        "security": {
                            "protocol": "SASL_PLAINTEXT",
                            "sasl": {
                                "mechanism": "PLAIN",
                                "credentialsSecretRef": {"namespace": secret_ns, "name": "kafka-b-admin"},
                            },
                        },
                    },
                },
            ]
        },
    }
    helm("upgrade", release, str(CHART), "--namespace", ns, "--values", "-", input=json.dumps(second))
    history = json.loads(helm("history", release, "--namespace", ns, "-o", "json").stdout)
    assert [h["revision"] for h in history] == [1, 2] and history[-1]["status"] == "deployed"
    deploy = json.loads(kube.kubectl("get", "deployment", f"{release}-kquota", "-n", ns, "-o", "json").stdout)
    assert deploy["spec"]["replicas"] == 3
    env = {e["name"]: e.get("value") for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["KQUOTA_DRIFT_INTERVAL"] == "15" and env["KQUOTA_PROTECTED_USERS"] == '["admin"]'
    role = json.loads(kube.kubectl("get", "role", f"{release}-kquota-secrets", "-n", secret_ns, "-o", "json").stdout)
    assert role["rules"][0]["resourceNames"] == ["kafka-b-admin"]
    kube.kubectl("get", "kafkacluster", f"{release}-b")

    helm("uninstall", release, "--namespace", ns, "--wait", "--timeout", "60s")
    assert kube.kubectl("get", "kafkacluster", f"{release}-a", check=False).returncode != 0
    assert kube.kubectl("get", "clusterrole", f"{release}-kquota", check=False).returncode != 0


def test_kind_quickstart_manifests_are_valid(kube: KubeAPIServer, helm: Helm) -> None:
    """deploy/kind cannot run here (no Docker); its script parses and its manifests are accepted."""
    kind = REPO / "deploy" / "kind"
    assert subprocess.run(["bash", "-n", str(kind / "up.sh")], check=False).returncode == 0
    helm("lint", "--strict", str(CHART), "--values", str(kind / "values.yaml"))
    docs = [d for d in yaml.safe_load_all((kind / "kafka.yaml").read_text()) if d]
    kube.kubectl("create", "namespace", "kafka", check=False)
    body = json.dumps({"apiVersion": "v1", "kind": "List", "items": [d for d in docs if d["kind"] != "Namespace"]})
    kube.kubectl("apply", "--dry-run=server", "-f", "-", input=body)


@pytest.mark.parametrize("resources", [0, 2_500, 10_000, 50_000])
def test_memory_derives_from_expected_resources_as_the_operator_computes_it(helm: Helm, resources: int) -> None:
    from kquota.reconcile import sizing

    (deployment,) = find(render(helm, {"expectedResources": resources}), "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["requests"]["memory"] == f"{sizing.need_mib(resources)}Mi"
    assert container["resources"]["limits"]["memory"] == f"{sizing.limit_mib(resources)}Mi"
    # Set by hand, a value wins.
    (deployment,) = find(render(helm, {"resources": {"limits": {"memory": "3Gi"}}}), "Deployment")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] == "3Gi"
