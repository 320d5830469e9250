"""``kquota advise`` as a Kubernetes Job on the real node: deploy/advisor/job.yaml, the advisor image.

The image is Dockerfile.advisor's, built here by buildah (harness/images.py) and
imported into the node's containerd. The Job is the documented manifest, with its
two PersistentVolumeClaims bound to hostPath PersistentVolumes on this machine, so
the planted-truth samples go in and the advice comes out through real volumes;
the kubelet runs it with the manifest's read-only root filesystem, non-root user,
emptyDir scratch and memory limit. Its answer must be the one ``local[2]`` gives on
the host for the same samples (the comparison tests/spark/test_cluster.py makes
between local mode and a standalone cluster), with a driver sized from the
container's memory limit, not the machine's. A Job with too small a limit ends with
the advisor's one-line message, not a kernel OOM kill or a traceback.

Opt-in (``KQUOTA_NODE_ADVISOR=1``, ``make test-node-advisor``), a release check: the
1.4 GB image takes ~30 s to import into each new node and the Job plus the host's
local-mode run take minutes on this shared 2-core machine, over the suite's budget.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness import images
from harness.kafka_cluster import KafkaCluster
from harness.node import Node
from harness.operator_proc import client_quota, wait_for

from kquota.domain.plan import EntityChange, QuotaOp
from kquota.kafka.admin import QuotaAdmin
from kquota.kafka.settings import ConnectionSettings
from tests.plugins.kafka import unique_name
from tests.spark.test_cluster import HEAVY, advise, write_samples
from tests.support.impact import expected_impact, names, planted_quotas, quotas, write_history

pytestmark = [
    pytest.mark.node,
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("KQUOTA_NODE_ADVISOR") != "1",
        reason="the advisor Job on the node is a release check: KQUOTA_NODE_ADVISOR=1 (make test-node-advisor)",
    ),
]

REPO = Path(__file__).resolve().parents[2]
JOB = REPO / "deploy" / "advisor" / "job.yaml"
GIB = 1 << 30
#: The Job's memory limit here: the driver must get half of it (1536m), not half of the machine.
LIMIT = "3Gi"


@pytest.fixture(scope="module")
def advisor_image(node: Node) -> images.Image:
    started = time.monotonic()
    image = images.ensure_advisor_image()
    built = time.monotonic()
    node.import_image(image.archive)
    print(f"\nadvisor image: built or found in {built - started:.1f}s, imported in {time.monotonic() - built:.1f}s")
    return image


def job_manifest(image: images.Image, name: str, limit: str, extra_args: list[str]) -> dict[str, Any]:
    """deploy/advisor/job.yaml with this image, a name, a memory limit and the test's advise arguments."""
    job: dict[str, Any] = yaml.safe_load(JOB.read_text())
    job["metadata"]["name"] = name
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    container["image"] = image.reference
    container["imagePullPolicy"] = "Never"  # imported, there is no registry
    # The node's two cores are shared with the test process: request less than the manifest's 2.
    container["resources"] = {"requests": {"cpu": "500m", "memory": limit}, "limits": {"memory": limit}}
    # The documented arguments minus the ones to edit, plus this test's (those of test_cluster.advise).
    kept = [a for a in container["args"] if not a.startswith(("--namespace", "--cluster-ref"))]
    container["args"] = kept + extra_args
    return job


def claim(node: Node, namespace: str, name: str, path: Path, read_only: bool) -> None:
    """A PVC named ``name`` bound to a hostPath PV on ``path`` (what a storage class would provision)."""
    volume = f"{namespace}-{name}"
    mode = "ReadOnlyMany" if read_only else "ReadWriteOnce"
    objects = [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": volume},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": [mode],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "hostPath": {"path": str(path), "type": "Directory"},
                "claimRef": {"namespace": namespace, "name": name},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "accessModes": [mode],
                "storageClassName": "",
                "volumeName": volume,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    ]
    node.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))


def run_job(node: Node, namespace: str, job: dict[str, Any], timeout: float) -> tuple[dict[str, Any], str]:
    """Create the Job, wait until it succeeds or fails; its pod's final state and log."""
    name = job["metadata"]["name"]
    node.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(job))

    def finished() -> dict[str, Any] | None:
        status = node.get_json("job", name, "-n", namespace).get("status") or {}
        done = any(
            c["type"] in ("Complete", "Failed") and c["status"] == "True" for c in status.get("conditions") or []
        )
        return status if done else None

    def pods() -> str:
        return node.kubectl("get", "pods", "-n", namespace, "-o", "wide", check=False).stdout

    wait_for(finished, timeout, f"job {name} to finish", interval=1.0, on_timeout=pods)
    (pod,) = node.get_json("pods", "-n", namespace, "-l", f"job-name={name}")["items"]
    log = node.kubectl("logs", "-n", namespace, pod["metadata"]["name"], check=False)
    return pod, log.stdout + log.stderr


@pytest.fixture(scope="module")
def workspace(node: Node, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, Path]:
    """A namespace with the manifest's two claims: the samples in ``kquota-usage``, ``kquota-advice`` empty.

    Nothing to clean up: the node, with its API server's objects, goes with the module.
    """
    namespace = f"advisor-{uuid.uuid4().hex[:6]}"
    node.kubectl("create", "namespace", namespace)
    usage = tmp_path_factory.mktemp("usage")
    write_samples(usage / "samples.csv")
    advice = tmp_path_factory.mktemp("advice")
    advice.chmod(0o777)  # hostPath volumes ignore fsGroup: the advisor's UID must be able to write
    for path in (usage, usage.parent):
        path.chmod(0o755)
    claim(node, namespace, "kquota-usage", usage, read_only=True)
    claim(node, namespace, "kquota-advice", advice, read_only=False)
    return namespace, usage, advice


@pytest.fixture(scope="module")
def host_advice(workspace: tuple[str, Path, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``kquota advise`` in ``local[2]`` on the host, on the workspace's samples: the answer every run must give."""
    _, usage, _ = workspace
    return advise("local[2]", usage / "samples.csv", tmp_path_factory.mktemp("host"))


def advice_in(directory: Path) -> dict[str, Any]:
    report = json.loads((directory / "report.json").read_text())
    manifests = {p.name: yaml.safe_load(p.read_text()) for p in sorted((directory / "manifests").glob("*.yaml"))}
    return {"recommendations": report["recommendations"], "entities": report["entities"],
            "capacity": report["capacity"], "manifests": manifests, "spark": report["spark"]}  # fmt: skip


def test_the_advisor_job_gives_local_modes_answer_within_its_memory_limit(
    node: Node, advisor_image: images.Image, workspace: tuple[str, Path, Path], host_advice: dict[str, Any]
) -> None:
    namespace, _, advice = workspace
    arguments = ["--broker-capacity", "50Mi", "--namespace", "team-a"]  # as tests/spark/test_cluster.advise
    job = job_manifest(advisor_image, "kquota-advise", LIMIT, arguments)
    started = time.monotonic()
    pod, log = run_job(node, namespace, job, timeout=600)
    seconds = time.monotonic() - started
    state = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert state["exitCode"] == 0 and state["reason"] == "Completed", f"{state}\n{log[-3000:]}"
    print(f"\nadvisor Job: {seconds:.1f}s from creation to completion")

    host, report = host_advice, json.loads((advice / "report.json").read_text())
    in_pod = advice_in(advice)
    for part in ("recommendations", "entities", "capacity", "manifests"):
        assert in_pod[part] == host[part], f"the Job and local[2] on the host differ in {part}"
    assert {r["user"] for r in report["recommendations"] if not r["is_default"]} == set(HEAVY)
    # The summary went to the pod log, as `kubectl logs job/kquota-advise` shows it.
    assert "broker b2 produce OVER CAPACITY" in log, log

    # Sized from the container's limit (half of 3Gi), not from the machine's memory, and it fit.
    spark = report["spark"]
    assert spark["master"].startswith("local"), spark
    assert spark["driver_memory"] == "1536m", spark
    assert spark["driver_peak_rss_mib"] is not None and spark["driver_peak_rss_mib"] * 2**20 < 3 * GIB, spark
    print(f"driver memory {spark['driver_memory']}, peak RSS {spark['driver_peak_rss_mib']} MiB of a {LIMIT} limit")


def test_a_job_with_too_little_memory_ends_with_one_line_naming_the_limit(
    node: Node, advisor_image: images.Image, workspace: tuple[str, Path, Path]
) -> None:
    namespace, _, _ = workspace
    job = job_manifest(advisor_image, "kquota-advise-small", "1Gi", [])
    pod, log = run_job(node, namespace, job, timeout=180)
    state = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    # Not killed by the kernel (137, OOMKilled): the advisor refused before starting the JVM.
    assert state["exitCode"] == 1 and state["reason"] == "Error", f"{state}\n{log}"
    lines = [line for line in log.splitlines() if line.strip()]
    assert lines == [lines[0]] and lines[0].startswith("kquota advise: only 1024 MiB of memory"), log
    assert "resources.limits.memory" in lines[0] and "Traceback" not in log


# --- Spark on Kubernetes: executors as pods ---------------------------------------------------------

SPARK_ON_KUBERNETES = REPO / "deploy" / "advisor" / "spark-on-kubernetes.yaml"
#: What the tests change in the executors' settings: the node's two cores are shared with the test process.
EXECUTOR_CONF = {
    "spark.executor.memory": "1g",
    "spark.kubernetes.executor.request.cores": "250m",
    # Fewer tasks than Spark's 200 on these two cores; the answer does not depend on it.
    "spark.sql.shuffle.partitions": "16",
    # Kept after the run, so the test can read who did the work.
    "spark.kubernetes.executor.deleteOnTermination": "false",
}


def spark_on_kubernetes(image: images.Image, advice_claim: str, extra_args: list[str]) -> list[dict[str, Any]]:
    """deploy/advisor/spark-on-kubernetes.yaml with this image (driver and executors), smaller executors, the
    test's advise arguments and its own advice claim."""
    docs: list[dict[str, Any]] = list(yaml.safe_load_all(SPARK_ON_KUBERNETES.read_text()))
    [job] = [d for d in docs if d["kind"] == "Job"]
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    container["image"] = image.reference
    container["imagePullPolicy"] = "Never"  # imported, there is no registry
    container["resources"] = {"requests": {"cpu": "250m", "memory": "2Gi"}, "limits": {"memory": "2Gi"}}
    conf = EXECUTOR_CONF | {
        "spark.kubernetes.container.image": image.reference,
        "spark.kubernetes.container.image.pullPolicy": "Never",
    }
    args = []
    for arg in container["args"]:
        if arg.startswith(("--namespace", "--cluster-ref")):
            continue
        key = arg.removeprefix("--conf=").split("=", 1)[0] if arg.startswith("--conf=") else None
        args.append(f"--conf={key}={conf.pop(key)}" if key in conf else arg)
    container["args"] = args + [f"--conf={k}={v}" for k, v in conf.items()] + extra_args
    for volume in pod["volumes"]:
        if volume.get("persistentVolumeClaim", {}).get("claimName") == "kquota-advice":
            volume["persistentVolumeClaim"]["claimName"] = advice_claim
    return docs


def executor_pods(node: Node, namespace: str) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = node.get_json("pods", "-n", namespace, "-l", "spark-role=executor")["items"]
    return pods


def executor_logs(node: Node, namespace: str, pods: list[dict[str, Any]]) -> str:
    return "".join(node.kubectl("logs", "-n", namespace, p["metadata"]["name"], check=False).stdout for p in pods)


def test_spark_on_kubernetes_with_the_driver_in_a_job_gives_local_modes_answer(
    node: Node,
    advisor_image: images.Image,
    workspace: tuple[str, Path, Path],
    host_advice: dict[str, Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    namespace, _, _ = workspace
    advice = tmp_path_factory.mktemp("advice-spark")
    advice.chmod(0o777)
    claim(node, namespace, "kquota-advice-spark", advice, read_only=False)
    arguments = ["--broker-capacity", "50Mi", "--namespace", "team-a"]  # as tests/spark/test_cluster.advise
    docs = spark_on_kubernetes(advisor_image, "kquota-advice-spark", arguments)
    rbac = {"apiVersion": "v1", "kind": "List", "items": [d for d in docs if d["kind"] != "Job"]}
    node.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(rbac))
    [job] = [d for d in docs if d["kind"] == "Job"]
    started = time.monotonic()
    pod, log = run_job(node, namespace, job, timeout=900)
    seconds = time.monotonic() - started
    state = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    executors = executor_pods(node, namespace)
    assert state["exitCode"] == 0, f"{state}\n{log[-3000:]}\n{executor_logs(node, namespace, executors)[-3000:]}"
    print(f"\nSpark on Kubernetes, driver in a Job: {seconds:.1f}s from creation to completion")

    in_job = advice_in(advice)
    for part in ("recommendations", "entities", "capacity", "manifests"):
        assert in_job[part] == host_advice[part], f"Spark on Kubernetes and local[2] on the host differ in {part}"
    assert in_job["spark"]["master"] == "k8s://https://kubernetes.default.svc:443", in_job["spark"]
    # The executors were pods of the advisor image, owned by the driver's pod, and they ran the tasks.
    assert len(executors) == 2, [p["metadata"]["name"] for p in executors]
    for p in executors:
        assert p["spec"]["containers"][0]["image"] == advisor_image.reference
        assert [o["name"] for o in p["metadata"]["ownerReferences"]] == [pod["metadata"]["name"]]
    logs = executor_logs(node, namespace, executors)
    assert logs.count("Successfully registered with driver") == 2, logs[-3000:]
    assert "Running task" in logs, logs[-3000:]
    print(f"executors: {', '.join(p['metadata']['name'] for p in executors)}; {logs.count('Running task')} tasks")


def test_plan_impact_with_executors_as_pods_and_the_driver_on_this_machine(
    node: Node, advisor_image: images.Image, kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """``kquota plan --impact --master k8s://...`` from this machine (client mode): the same rows as local mode."""
    prefix = unique_name("k8s-imp")
    n = names(prefix)
    before, _ = planted_quotas(n)
    _, after, _ = quotas(n)
    usage = tmp_path_factory.mktemp("impact-usage")
    usage.chmod(0o755)  # the executors' UID reads it through a hostPath volume
    rows = write_history(usage / "history.csv", n)
    manifests = tmp_path_factory.mktemp("impact-after")
    for name, spec in after.items():
        (manifests / f"{name}.yaml").write_text(json.dumps(client_quota("team-a", name, spec["entity"], spec["quota"])))
    admin = QuotaAdmin(ConnectionSettings(bootstrap_servers=kafka.bootstrap))
    try:
        planted = [EntityChange(e, tuple(QuotaOp(k, v) for k, v in sorted(q.items()))) for e, q in before.items()]
        results = admin.alter(planted)
        assert all(r.ok for r in results), results
        wait_for(lambda: all(admin.describe_all().get(e) == q for e, q in before.items()), 30, "the planted quotas")
        plan = [sys.executable, "-m", "kquota.cli.main", "plan", "-f", str(manifests),
                "--bootstrap-server", kafka.bootstrap, "--entity", f"users/{prefix}-*",
                "--impact", str(usage / "history.csv"), "-o", "json"]  # fmt: skip
        local, local_seconds = run_plan([*plan, "--master", "local[2]"], os.environ.copy())
        namespace = f"impact-{uuid.uuid4().hex[:6]}"
        node.kubectl("create", "namespace", namespace)
        conf = EXECUTOR_CONF | {
            "spark.kubernetes.namespace": namespace,
            "spark.kubernetes.container.image": advisor_image.reference,
            "spark.kubernetes.container.image.pullPolicy": "Never",
            "spark.executor.instances": "2",
            # The driver is this machine: executors reach it on the pod bridge.
            "spark.driver.host": node.host_ip,
            "spark.driver.bindAddress": node.host_ip,
            # The executors read the history at the path the driver gives them: the same directory, mounted.
            "spark.kubernetes.executor.volumes.hostPath.usage.mount.path": str(usage),
            "spark.kubernetes.executor.volumes.hostPath.usage.mount.readOnly": "true",
            "spark.kubernetes.executor.volumes.hostPath.usage.options.path": str(usage),
        }
        flags = [a for k, v in conf.items() for a in ("--conf", f"{k}={v}")]
        env = os.environ | {"KUBECONFIG": str(node.kubeconfig)}
        remote, remote_seconds = run_plan([*plan, "--master", f"k8s://{node.api.server}", *flags], env)
    finally:
        admin.alter([EntityChange(e, tuple(QuotaOp(k, None) for k in q)) for e, q in before.items()])
        admin.close()
    print(f"\nplan --impact: local[2] {local_seconds:.1f}s, Spark on Kubernetes (client mode) {remote_seconds:.1f}s")
    assert remote["impact"]["rows"] == local["impact"]["rows"]
    assert remote["impact"]["spark"]["master"] == f"k8s://{node.api.server}"
    got = {(r["verdict"], r["entity"], r["key"]): (r["share"], r["p99"]) for r in remote["impact"]["rows"]}
    want = {k: (v["share"], v["p99"]) for k, v in expected_impact(rows, n, removals=False).items()}
    assert got == want
    executors = executor_pods(node, namespace)
    logs = executor_logs(node, namespace, executors)
    assert len(executors) == 2 and logs.count("Successfully registered with driver") == 2, logs[-3000:]
    assert "Running task" in logs


def run_plan(argv: list[str], env: dict[str, str]) -> tuple[dict[str, Any], float]:
    """``kquota plan --impact`` in a process of its own (each Spark master its own JVM); exit 4: it throttles."""
    started = time.monotonic()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 4, f"exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc, time.monotonic() - started
