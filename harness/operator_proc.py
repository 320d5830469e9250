"""The kquota operator as a real process against the harness' API server and Kafka.

Tests run the operator exactly as users do (``kquota operator``), in its own
process, so they can SIGKILL it mid-batch and restart it.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import procs
from harness.kube_apiserver import KubeAPIServer

GROUP_VERSION = "kquota.io/v1alpha1"
LEDGER_NAMESPACE = "kquota-system"


#: Where the suites' operator differs from the shipped defaults (reconcile/settings.py), and why.
SUITE_SETTINGS: dict[str, str] = {
    "KQUOTA_RETRY_MAX_SECONDS": "4",
    # Test suites delete hundreds of resources at once on purpose; the
    # mass-removal guard is on where it is under test.
    "KQUOTA_DELETION_GUARD": "false",
    # The suites point several KafkaClusters at one session broker (a
    # tenancy cluster beside the module's); the refusal is tested on its own.
    "KQUOTA_ALLOW_SHARED_KAFKA_CLUSTERS": "true",
    # Removals wait for changes to stop; 1 s keeps the suites quick.
    "KQUOTA_REMOVAL_SETTLE": "1",
}


@dataclass
class OperatorProcess:
    kube: KubeAPIServer
    workdir: Path
    default_cluster: str
    drift_interval: float = 3.0
    extra_env: dict[str, str] | None = None
    #: Debug logs help when a test fails; benchmarks run the operator as the chart does (not verbose).
    verbose: bool = True
    #: The suites' quicker settings (below); False runs the operator's shipped defaults (make demo).
    suite_settings: bool = True
    proc: procs.Process | None = None
    metrics_port: int = 0
    liveness_port: int = 0
    starts: int = 0
    #: A command prefix the operator runs under (e.g. harness.cgroup.MemoryCgroup.wrap).
    wrapper: Callable[[list[str]], list[str]] | None = None

    def start(self, timeout: float = 60) -> OperatorProcess:
        self.metrics_port = procs.free_port()
        self.liveness_port = procs.free_port()
        env = self.kube.env()
        env.update(
            {
                "KQUOTA_NAMESPACE": LEDGER_NAMESPACE,
                "KQUOTA_DEFAULT_CLUSTER": self.default_cluster,
                "KQUOTA_DRIFT_INTERVAL": str(self.drift_interval),
                "KQUOTA_METRICS_PORT": str(self.metrics_port),
                "KQUOTA_LIVENESS_PORT": str(self.liveness_port),
                "PYTHONUNBUFFERED": "1",
            }
        )
        if self.suite_settings:
            env.update(SUITE_SETTINGS)
        env.update(self.extra_env or {})
        self.starts += 1
        argv = [sys.executable, "-m", "kquota.cli.main", "operator", *(["--verbose"] if self.verbose else [])]
        self.proc = procs.Process(
            "kquota-operator",
            self.wrapper(argv) if self.wrapper is not None else argv,
            self.workdir / f"operator-{self.starts}.log",
            env=env,
        )
        self.proc.start()
        self.proc.wait_until(self.healthy, timeout, "/healthz answering")
        return self

    def healthy(self, timeout: float = 2.0) -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.liveness_port}/healthz", timeout=timeout) as resp:
            return bool(resp.status == 200)

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
            return str(resp.read().decode())

    def metric(self, name: str, **labels: str) -> float:
        """Sum of a metric's samples matching ``labels`` (0 when absent)."""
        total = 0.0
        for line in self.metrics().splitlines():
            if not line.startswith(name + "{") and not line.startswith(name + " "):
                continue
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()

    def log(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.workdir.glob("operator-*.log")))


def kafka_cluster_manifest(name: str, bootstrap: str, extra_spec: dict[str, Any] | None = None) -> str:
    spec: dict[str, Any] = {"bootstrapServers": bootstrap}
    spec.update(extra_spec or {})
    return json.dumps({"apiVersion": GROUP_VERSION, "kind": "KafkaCluster", "metadata": {"name": name}, "spec": spec})


def client_quota(
    namespace: str, name: str, entity: dict[str, Any], quota: dict[str, Any], cluster: str | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"entity": entity, "quota": quota}
    if cluster:
        spec["clusterRef"] = cluster
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "ClientQuota",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def apply(kube: KubeAPIServer, *objects: dict[str, Any]) -> None:
    docs = [json.dumps(o) for o in objects]
    kube.kubectl("apply", "-f", "-", input="\n---\n".join(docs) if len(docs) > 1 else docs[0])


def apply_many(kube: KubeAPIServer, objects: list[dict[str, Any]], chunk: int = 500) -> None:
    """Apply thousands of objects with few kubectl processes (a List per call)."""
    for i in range(0, len(objects), chunk):
        body = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects[i : i + chunk]})
        kube.kubectl("apply", "-f", "-", input=body, timeout=600)


def get(kube: KubeAPIServer, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    result = kube.kubectl("get", kind, name, "-n", namespace, "-o", "json", check=False)
    if result.returncode != 0:
        return None
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def condition(obj: dict[str, Any] | None, ctype: str = "Ready") -> dict[str, Any]:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return dict(cond)
    return {}


def ready_for_generation(obj: dict[str, Any]) -> bool:
    """Ready, and the status is for the resource's current generation."""
    generation = obj["metadata"].get("generation")
    status = obj.get("status") or {}
    ready = condition(obj)
    return (
        status.get("observedGeneration") == generation
        and ready.get("status") == "True"
        and ready.get("observedGeneration", generation) == generation
    )


def wait_for(
    predicate: Callable[[], Any],
    timeout: float,
    what: str,
    interval: float = 0.25,
    on_timeout: Callable[[], str] | None = None,
) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    message = f"timed out after {timeout:.0f}s waiting for {what}; last value {last!r}"
    if on_timeout is not None:
        message += "\n" + on_timeout()[-4000:]
    raise AssertionError(message)


def wait_until_none_left(
    count: Callable[[], int | None],
    stall: float,
    cap: float,
    what: str,
    interval: float = 2.0,
    on_timeout: Callable[[], str] | None = None,
) -> None:
    """Wait until ``count()`` is 0, judged by progress: fail when it has not gone down for ``stall`` seconds.

    Draining many objects takes what the machine gives it: on a busy one, a thousand finalizer
    PATCHes take minutes, and a fixed deadline fails a drain that is still moving. A drain that
    stops is still caught (``stall``), and none may take longer than ``cap``. ``count`` may return
    None when it could not look (an API server that timed out): that is neither progress nor zero.
    """
    started = time.monotonic()
    best: int | None = None
    moved = started
    while True:
        left = count()
        now = time.monotonic()
        if left == 0:
            return
        if left is not None and (best is None or left < best):
            best, moved = left, now
        if now - moved > stall or now - started > cap:
            why = f"none gone for {now - moved:.0f}s" if now - moved > stall else f"over {cap:.0f}s in all"
            tail = on_timeout()[-3500:] + "\n" if on_timeout is not None else ""
            raise AssertionError(f"{tail}waiting for {what}: {why}; {best} left (last look: {left})")
        time.sleep(interval)


def ensure_ledger_namespace(kube: KubeAPIServer) -> None:
    kube.kubectl("create", "namespace", LEDGER_NAMESPACE, check=False)


def scram_security(kube: KubeAPIServer, secret: str, username: str, password: str) -> dict[str, Any]:
    """A Secret with SCRAM-SHA-512 credentials in the ledger namespace, and the KafkaCluster
    ``spec.security`` that uses it (SASL_PLAINTEXT)."""
    ensure_ledger_namespace(kube)
    kube.kubectl(
        "create",
        "secret",
        "generic",
        secret,
        "-n",
        LEDGER_NAMESPACE,
        f"--from-literal=username={username}",
        f"--from-literal=password={password}",
    )
    return {
        "protocol": "SASL_PLAINTEXT",
        "sasl": {"mechanism": "SCRAM-SHA-512", "credentialsSecretRef": {"namespace": LEDGER_NAMESPACE, "name": secret}},
    }
