"""The chart's operator, run as its Deployment would run it, on an API server without a kubelet.

The harness API server runs no Pods. Tests that install the chart (by helm, or by Flux from Git)
play the kubelet: they run ``kquota operator`` as a process with exactly the environment the
Deployment's container has and a token of the chart's ServiceAccount (so the chart's RBAC is what
it may do), and, where a health check waits for the Deployment, report it available.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from harness.kube_apiserver import REPO, KubeAPIServer
from harness.operator_proc import OperatorProcess


def deployment_env(kube: KubeAPIServer, namespace: str, name: str) -> dict[str, str]:
    deploy = json.loads(kube.kubectl("get", "deployment", name, "-n", namespace, "-o", "json").stdout)
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def operator_as_deployment(
    kube: KubeAPIServer, namespace: str, deployment: str, workdir: Path, priority: int = 100
) -> OperatorProcess:
    """``kquota operator`` with the Deployment's environment (its own ports aside) as its ServiceAccount."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = deployment_env(kube, namespace, deployment)
    chart_env = {k: v for k, v in env.items() if k not in ("KQUOTA_LIVENESS_PORT", "KQUOTA_METRICS_PORT")}
    deploy = json.loads(kube.kubectl("get", "deployment", deployment, "-n", namespace, "-o", "json").stdout)
    account = deploy["spec"]["template"]["spec"]["serviceAccountName"]
    token = kube.service_account_token(namespace, account)
    return OperatorProcess(
        kube,
        workdir,
        default_cluster=env["KQUOTA_DEFAULT_CLUSTER"],
        verbose=False,
        extra_env={
            **chart_env,
            "KUBECONFIG": str(kube.write_kubeconfig_for(token, workdir / "sa.kubeconfig")),
            "KQUOTA_PEERING_PRIORITY": str(priority),
        },
    )


def report_available(kube: KubeAPIServer, namespace: str, deployment: str) -> None:
    """What kube-controller-manager writes once the Deployment's Pods are all Ready (kstatus: Current)."""
    deploy = json.loads(kube.kubectl("get", "deployment", deployment, "-n", namespace, "-o", "json").stdout)
    replicas = deploy["spec"].get("replicas", 1)
    status = {
        "observedGeneration": deploy["metadata"]["generation"],
        "replicas": replicas,
        "updatedReplicas": replicas,
        "readyReplicas": replicas,
        "availableReplicas": replicas,
        "conditions": [
            {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
            {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"},
        ],
    }
    kube.kubectl(
        "patch", "deployment", deployment, "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": status}),
    )  # fmt: skip


def chart_liveness_probe() -> tuple[float, int]:
    """The chart's livenessProbe (timeoutSeconds, failureThreshold): what makes the kubelet restart the operator."""
    template = (REPO / "helm" / "kquota" / "templates" / "deployment.yaml").read_text()
    block = template.split("livenessProbe:", 1)[1].split("securityContext:", 1)[0]
    timeout = re.search(r"timeoutSeconds:\s*(\d+)", block)
    threshold = re.search(r"failureThreshold:\s*(\d+)", block)
    assert timeout and threshold, "the chart's livenessProbe no longer sets timeoutSeconds and failureThreshold"
    return float(timeout.group(1)), int(threshold.group(1))
