"""docs/gitops.md's Flux walkthrough, block by block, in a cluster of its own with Flux's controllers.

Each block after a ``<!-- walkthrough -->`` marker runs as written, in a Git work tree whose
``origin`` is a repository the Git server serves, with a checkout of kquota at ``../kquota``: a YAML
block starting ``# file: PATH`` is saved there, a shell block runs in bash there (helm, kubectl and
git on the PATH), any other YAML block is applied with kubectl. Two addresses the doc names stand
for this machine's: the Git URL (the served repository) and the brokers' (the session broker).

The harness API server has no kubelet, so the test plays it (tests/support/chart.py): once Flux
has applied the chart, it runs ``kquota operator`` with the Deployment's environment as the chart's
ServiceAccount and reports the Deployment available. Checked: the team's Kustomization waits for the
operator's (``DependencyNotReady``), both become Ready, and the brokers hold the quotas
(kafka-configs); then, as docs/gitops.md says for upgrades, the chart rendered again with a changed
CRD and committed: Flux applies the new schema.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from harness import tools
from harness.flux import Flux, GitServer
from harness.kafka_cluster import KafkaCluster
from harness.kube_apiserver import KubeAPIServer, selected_version
from harness.operator_proc import wait_for

from tests.support.chart import operator_as_deployment, report_available
from tests.support.flux import ready, reconcile_now, users_on_broker, wait_ks
from tests.support.paths import REPO

DOC = REPO / "docs" / "gitops.md"
BLOCK = re.compile(r"<!-- walkthrough -->\s*\n```(\w+)\n(.*?)\n```", re.S)
DOC_GIT_URL = "https://git.example.com/platform-config.git"
DOC_BOOTSTRAP = "kafka-0.kafka.kafka:9092"
CRD = "clientquotas.kquota.io"


def blocks() -> list[tuple[str, str]]:
    return [(lang, body) for lang, body in BLOCK.findall(DOC.read_text())]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KubeAPIServer, Flux]]:
    """A new cluster with Flux, as the doc assumes: nothing of kquota's in it."""
    kube = KubeAPIServer.start(tmp_path_factory.mktemp("doc-kube"), version=selected_version())
    try:
        flux = Flux.start(kube, tmp_path_factory.mktemp("doc-flux"))
        try:
            yield kube, flux
        finally:
            flux.stop()
    finally:
        kube.stop()


def test_the_flux_walkthrough_runs_as_written(
    cluster: tuple[KubeAPIServer, Flux], git: GitServer, kafka: KafkaCluster, tmp_path: Path
) -> None:
    kube, flux = cluster
    steps = blocks()
    assert [lang for lang, _ in steps] == ["yaml", "yaml", "sh", "yaml", "sh", "yaml"], "the walkthrough changed"
    repo = git.create("platform-config")
    (repo.work.parent / "kquota").symlink_to(REPO)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "helm").symlink_to(tools.helm())
    (bin_dir / "kubectl").symlink_to(tools.kubectl())
    env = {
        **os.environ,
        "KUBECONFIG": str(kube.kubeconfig),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "HELM_CONFIG_HOME": str(tmp_path / "helm"),
        "HELM_CACHE_HOME": str(tmp_path / "helm"),
        "HELM_DATA_HOME": str(tmp_path / "helm"),
        "GIT_AUTHOR_NAME": "kquota tests",
        "GIT_AUTHOR_EMAIL": "tests@kquota.invalid",
        "GIT_COMMITTER_NAME": "kquota tests",
        "GIT_COMMITTER_EMAIL": "tests@kquota.invalid",
    }
    for i, (lang, written) in enumerate(steps):
        body = written.replace(DOC_GIT_URL, repo.url).replace(DOC_BOOTSTRAP, kafka.bootstrap)
        if lang == "yaml" and body.startswith("# file:"):
            target = repo.work / body.split("\n", 1)[0].removeprefix("# file:").strip()
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(body + "\n")
        elif lang == "yaml":
            kube.kubectl("apply", "-f", "-", input=body)
        else:
            result = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", body],
                cwd=repo.work, env=env, capture_output=True, text=True, timeout=180, check=False,
            )  # fmt: skip
            assert result.returncode == 0, f"step {i + 1} failed:\n{body}\n{result.stdout}\n{result.stderr}"

    # Flux applies the chart; the team's quotas wait for it.
    wait_for(
        lambda: kube.kubectl("get", "deployment", "kquota", "-n", "kquota-system", check=False).returncode == 0,
        120,
        "Flux applying the chart",
        on_timeout=flux.logs,
    )
    waiting = wait_ks(kube, flux, "quotas-team-a", "False", reason="DependencyNotReady")
    assert "kquota" in ready(waiting)["message"]

    # The kubelet's part: the Deployment's container runs, and its Pods are Ready.
    operator = operator_as_deployment(kube, "kquota-system", "kquota", tmp_path / "operator")
    operator.start()
    try:
        report_available(kube, "kquota-system", "kquota")
        wait_ks(kube, flux, "kquota", "True", timeout=180)
        wait_ks(kube, flux, "quotas-team-a", "True", timeout=120)
        alice = users_on_broker(kafka).get("alice", {})
        assert {k: alice.get(k) for k in ("producer_byte_rate", "consumer_byte_rate")} == {
            "producer_byte_rate": 10485760.0,
            "consumer_byte_rate": 20971520.0,
        }, alice
        pair = kafka.kafka_configs(
            "--describe", "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients",
            "--entity-name", "ingest", check=True,
        ).stdout  # fmt: skip
        rate = re.search(r"producer_byte_rate=([0-9.E+-]+)", pair)
        assert rate and float(rate.group(1)) == 52428800.0, pair

        # Upgrading: the chart rendered again with a changed CRD; Flux applies the new schema.
        rendered = repo.work / "platform" / "kquota" / "kquota.yaml"
        docs = [d for d in yaml.safe_load_all(rendered.read_text()) if d]
        crd = next(d for d in docs if d["kind"] == "CustomResourceDefinition" and d["metadata"]["name"] == CRD)
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["description"] = "a newer release's ClientQuota"
        rendered.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        push = "git commit --quiet -am 'a newer chart' && git push --quiet origin main"
        commit = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", push],
            cwd=repo.work, env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert commit.returncode == 0, commit.stderr
        reconcile_now(kube, "gitrepository", "platform-config")
        reconcile_now(kube, "kustomization", "kquota")

        def schema_description() -> str:
            stored = json.loads(kube.kubectl("get", "crd", CRD, "-o", "json").stdout)
            return str(stored["spec"]["versions"][0]["schema"]["openAPIV3Schema"].get("description"))

        wait_for(lambda: schema_description() == "a newer release's ClientQuota", 120, "Flux upgrading the CRD")
    finally:
        # Leave the session broker as it was: pruning the team's Kustomization removes its quotas.
        kube.kubectl("delete", "kustomization", "quotas-team-a", "-n", "flux-system", "--timeout=60s", check=False)
        wait_for(lambda: "producer_byte_rate" not in users_on_broker(kafka).get("alice", {}), 60, "alice removed")
        operator.stop()
