"""Upgrading the CRDs as docs/install.md tells users to, on the real API server.

A release of an older chart (every CRD's schema different from today's, the peering CRD included)
is installed with ``helm install``; ``helm upgrade`` alone must leave those CRDs as they were (Helm
never touches ``crds/`` after the first install, as the docs say); then the shell block of
docs/install.md's "Upgrading" section runs exactly as written, in a directory laid out as the docs
assume (``./helm/kquota``, ``my-values.yaml``), and every CRD must then hold the chart's schema.

The test has its own API server: it puts CRDs of another schema in place, which the session's
other tests must never see.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness import tools
from harness.kube_apiserver import KubeAPIServer

from tests.support.paths import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CHART = REPO / "helm" / "kquota"
INSTALL_DOC = REPO / "docs" / "install.md"


def chart_crd_files(chart: Path) -> list[Path]:
    """Every CRD file Helm installs from the chart: its own crds/ and its subcharts'."""
    return sorted([*chart.glob("crds/*.yaml"), *chart.glob("charts/*/crds/*.yaml")])


def documented_upgrade_block() -> str:
    """The shell block under docs/install.md's "## Upgrading", as written."""
    section = INSTALL_DOC.read_text().split("\n## Upgrading\n", 1)[1]
    match = re.search(r"```sh\n(.*?)```", section, flags=re.S)
    assert match, "docs/install.md: no sh block under ## Upgrading"
    return match.group(1)


def older(crd: dict[str, Any]) -> dict[str, Any]:
    """The same CRD as an older release might have shipped it: other descriptions, a retired field."""
    old = copy.deepcopy(crd)
    for version in old["spec"]["versions"]:
        schema = version["schema"]["openAPIV3Schema"]
        schema["description"] = f"an older {crd['spec']['names']['kind']}"
        spec = schema.get("properties", {}).get("spec")
        if spec is not None and "properties" in spec:
            spec["properties"]["retiredField"] = {"type": "string", "description": "gone in this release"}
    return old


def schemas(kube: KubeAPIServer, names: list[str]) -> dict[str, list[Any]]:
    """CRD name -> the openAPIV3Schema of each version, as the API server stores them."""
    out = {}
    for name in names:
        stored = json.loads(kube.kubectl("get", "crd", name, "-o", "json").stdout)
        out[name] = [v["schema"]["openAPIV3Schema"] for v in stored["spec"]["versions"]]
    return out


def test_documented_crd_upgrade_upgrades_every_crd(own_kube: KubeAPIServer, tmp_path: Path) -> None:
    kube = own_kube
    crds = {p: yaml.safe_load(p.read_text()) for p in chart_crd_files(CHART)}
    names = sorted(doc["metadata"]["name"] for doc in crds.values())
    assert {"clientquotas.kquota.io", "clusterkopfpeerings.kopf.dev"} <= set(names)
    wanted = {doc["metadata"]["name"]: [v["schema"]["openAPIV3Schema"] for v in doc["spec"]["versions"]]
              for doc in crds.values()}  # fmt: skip

    # The older chart: today's, with every CRD file replaced by an older schema.
    old_chart = tmp_path / "old-chart"
    shutil.copytree(CHART, old_chart)
    for path, doc in crds.items():
        (old_chart / path.relative_to(CHART)).write_text(yaml.safe_dump(older(doc), sort_keys=False))

    # The directory the docs' commands run in: ./helm/kquota and my-values.yaml.
    work = tmp_path / "work"
    (work / "helm").mkdir(parents=True)
    (work / "helm" / "kquota").symlink_to(CHART)
    cluster = {"name": "main", "spec": {"bootstrapServers": "kafka-0.kafka.kafka:9092"}}
    (work / "my-values.yaml").write_text(json.dumps({"kafka": {"clusters": [cluster]}}))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "helm").symlink_to(tools.helm())
    (bin_dir / "kubectl").symlink_to(tools.kubectl())
    env = dict(os.environ, KUBECONFIG=str(kube.kubeconfig), PATH=f"{bin_dir}:{os.environ['PATH']}")
    for var in ("CONFIG", "CACHE", "DATA"):
        env[f"HELM_{var}_HOME"] = str(tmp_path / "helm-home" / var.lower())

    def run(script: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", script],
            cwd=work, env=env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert result.returncode == 0, f"{script}\nfailed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
        return result

    kube.kubectl("create", "namespace", "kquota-system")
    run(f"helm install kquota {old_chart} --namespace kquota-system --values my-values.yaml")
    installed = schemas(kube, names)
    assert all(installed[n] != wanted[n] for n in names), "the older chart's CRDs must differ from today's"

    # helm upgrade alone never touches crds/ (docs/install.md, "Upgrading"): the schemas stay old.
    run("helm upgrade kquota ./helm/kquota --namespace kquota-system --values my-values.yaml")
    assert schemas(kube, names) == installed

    # The documented upgrade, exactly as written.
    run(documented_upgrade_block())
    upgraded = schemas(kube, names)
    unchanged = [n for n in names if upgraded[n] != wanted[n]]
    assert not unchanged, f"CRDs still at their old schema after the documented upgrade: {unchanged}"


def test_the_charts_notes_give_the_documented_command() -> None:
    """What `helm install` prints about CRD upgrades is the command the test above runs."""
    (crd_line,) = [line for line in documented_upgrade_block().splitlines() if line.startswith("helm show crds")]
    notes = (CHART / "templates" / "NOTES.txt").read_text()
    assert "| " + crd_line.split("| ", 1)[1] in notes
