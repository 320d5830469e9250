"""One version, kquota.__version__: the package metadata, the chart's appVersion and the image agree.

And confluent-kafka, which the operator never imports, is an extra, not a runtime dependency.
"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib

import pytest
import yaml

from kquota import __version__
from tests.support.paths import REPO as ROOT


def test_the_package_takes_its_version_from_kquota() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "kquota.__version__"}
    assert importlib.metadata.version("kquota") == __version__


def test_the_chart_deploys_this_version() -> None:
    chart = yaml.safe_load((ROOT / "helm" / "kquota" / "Chart.yaml").read_text())
    assert chart["appVersion"] == __version__
    values = yaml.safe_load((ROOT / "helm" / "kquota" / "values.yaml").read_text())
    assert values["image"]["tag"] in ("", __version__), "an empty tag means the chart's appVersion"


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "Dockerfile.advisor"])
def test_the_image_is_labelled_with_this_version(dockerfile: str) -> None:
    found = re.search(r"^ARG VERSION=(\S+)$", (ROOT / dockerfile).read_text(), re.M)
    assert found is not None and found.group(1) == __version__


def test_the_advisor_job_runs_this_versions_image() -> None:
    job = yaml.safe_load((ROOT / "deploy" / "advisor" / "job.yaml").read_text())
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"ghcr.io/kquota/kquota-advisor:{__version__}"


def test_spark_on_kubernetes_runs_this_versions_image_for_the_driver_and_the_executors() -> None:
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "advisor" / "spark-on-kubernetes.yaml").read_text()))
    [job] = [d for d in docs if d["kind"] == "Job"]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    image = f"ghcr.io/kquota/kquota-advisor:{__version__}"
    assert container["image"] == image
    assert f"--conf=spark.kubernetes.container.image={image}" in container["args"]


def test_confluent_kafka_is_an_extra_not_a_runtime_dependency() -> None:
    requires = importlib.metadata.requires("kquota") or []
    confluent = [r for r in requires if r.startswith("confluent-kafka")]
    assert confluent and all('extra == "clients"' in r for r in confluent), confluent
    lock = (ROOT / "requirements.lock").read_text()
    assert "confluent-kafka" not in lock, "the image installs requirements.lock: no confluent-kafka in it"


def _pins(path: str) -> dict[str, str]:
    """``name==version`` lines of a hash-pinned requirements file."""
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+) ", (ROOT / path).read_text(), re.M))


def test_the_image_builds_the_gssapi_of_the_kerberos_extra() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (extra,) = project["project"]["optional-dependencies"]["kerberos"]
    assert extra == f"gssapi=={_pins('requirements-kerberos.txt')['gssapi']}"
    # gssapi 1.12.0's pyproject.toml requires exactly Cython 3.3.0 to build (no build isolation in the image).
    assert _pins("requirements-kerberos-build.txt") == {"cython": "3.3.0"}
