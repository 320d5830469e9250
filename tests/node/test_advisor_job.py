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
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness import images
from harness.node import Node
from harness.operator_proc import wait_for

from tests.spark.test_cluster import HEAVY, advise, write_samples

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


def test_the_advisor_job_gives_local_modes_answer_within_its_memory_limit(
    node: Node, advisor_image: images.Image, workspace: tuple[str, Path, Path], tmp_path: Path
) -> None:
    namespace, usage, advice = workspace
    arguments = ["--broker-capacity", "50Mi", "--namespace", "team-a"]  # as tests/spark/test_cluster.advise
    job = job_manifest(advisor_image, "kquota-advise", LIMIT, arguments)
    started = time.monotonic()
    pod, log = run_job(node, namespace, job, timeout=600)
    seconds = time.monotonic() - started
    state = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert state["exitCode"] == 0 and state["reason"] == "Completed", f"{state}\n{log[-3000:]}"
    print(f"\nadvisor Job: {seconds:.1f}s from creation to completion")

    host = advise("local[2]", usage / "samples.csv", tmp_path / "host")
    report = json.loads((advice / "report.json").read_text())
    manifests = {p.name: yaml.safe_load(p.read_text()) for p in sorted((advice / "manifests").glob("*.yaml"))}
    in_pod = {"recommendations": report["recommendations"], "entities": report["entities"],
              "capacity": report["capacity"], "manifests": manifests}  # fmt: skip
    for part, value in in_pod.items():
        assert value == host[part], f"the Job and local[2] on the host differ in {part}"
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
