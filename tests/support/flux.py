"""Flux objects and waits for the tests that run Flux's controllers (tests/gitops/), and the brokers'
quotas as Kafka's own kafka-configs prints them."""

from __future__ import annotations

import datetime
import json
import re
from typing import Any

import yaml
from harness.flux import Flux
from harness.kafka_cluster import KafkaCluster
from harness.kube_apiserver import KubeAPIServer
from harness.operator_proc import wait_for

from tests.support.paths import REPO

#: kquota's recommended healthCheckExprs, as docs/gitops.md gives them.
HEALTH_CHECK_EXPRS: list[dict[str, str]] = yaml.safe_load((REPO / "deploy/flux/health-check-exprs.yaml").read_text())
NS = "flux-system"


def git_repository(name: str, url: str) -> dict[str, Any]:
    return {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "GitRepository",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"interval": "1m", "url": url, "ref": {"branch": "main"}},
    }


def kustomization(
    name: str,
    source: str,
    path: str,
    *,
    exprs: bool = True,
    depends_on: tuple[str, ...] = (),
    timeout: str = "1m",
    interval: str = "1m",
) -> dict[str, Any]:
    """A Kustomization as docs/gitops.md recommends for quotas: prune, wait, kquota's healthCheckExprs."""
    spec: dict[str, Any] = {
        "interval": interval,
        "retryInterval": "5s",
        "path": path,
        "prune": True,
        "wait": True,
        "timeout": timeout,
        "sourceRef": {"kind": "GitRepository", "name": source},
    }
    if exprs:
        spec["healthCheckExprs"] = HEALTH_CHECK_EXPRS
    if depends_on:
        spec["dependsOn"] = [{"name": d} for d in depends_on]
    return {
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }


def reconcile_now(kube: KubeAPIServer, kind: str, name: str) -> None:
    """What ``flux reconcile`` does: the requestedAt annotation."""
    now = datetime.datetime.now(datetime.UTC).isoformat()
    kube.kubectl("annotate", kind, name, "-n", NS, f"reconcile.fluxcd.io/requestedAt={now}", "--overwrite")


def ks(kube: KubeAPIServer, name: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(kube.kubectl("get", "kustomization", name, "-n", NS, "-o", "json").stdout)
    return found


def ready(obj: dict[str, Any]) -> dict[str, Any]:
    conds = (obj.get("status") or {}).get("conditions") or []
    return next((dict(c) for c in conds if c["type"] == "Ready"), {})


def wait_ks(
    kube: KubeAPIServer, flux: Flux, name: str, status: str, revision: str = "", reason: str = "", timeout: float = 120
) -> dict[str, Any]:
    """The Kustomization once its Ready condition has ``status`` (and ``reason``) for ``revision``'s commit."""

    def reached() -> dict[str, Any] | None:
        obj = ks(kube, name)
        cond = ready(obj)
        if cond.get("status") != status or (reason and cond.get("reason") != reason):
            return None
        if revision and not (obj.get("status") or {}).get("lastAttemptedRevision", "").endswith(revision):
            return None
        return obj

    found: dict[str, Any] = wait_for(
        reached,
        timeout,
        f"Kustomization {name} Ready={status} {reason} at {revision[:8]}",
        interval=0.5,
        on_timeout=lambda: json.dumps(ks(kube, name).get("status"), indent=1) + "\n" + flux.logs(),
    )
    return found


QUOTA_LINE = re.compile(r"Quota configs for user-principal '([^']*)' are (.*)")


def users_on_broker(kafka: KafkaCluster) -> dict[str, dict[str, float]]:
    """Every user's quotas, from ``kafka-configs --describe --entity-type users`` (Kafka's own tool)."""
    out = kafka.kafka_configs("--describe", "--entity-type", "users", check=True).stdout
    found: dict[str, dict[str, float]] = {}
    for line in out.splitlines():
        match = QUOTA_LINE.match(line.strip())
        if match:
            pairs = (p.split("=", 1) for p in match.group(2).split(", ") if "=" in p)
            found[match.group(1)] = {k: float(v) for k, v in pairs}
    return found


def manifests(*objects: dict[str, Any]) -> str:
    return "---\n".join(yaml.safe_dump(o, sort_keys=False) for o in objects)
