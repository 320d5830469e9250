"""tests/gitops: Flux's own controllers (harness/flux.py) syncing Git repositories of quotas.

Everything here is marked ``gitops`` and runs only with ``KQUOTA_GITOPS=1`` (``make test-gitops``,
a release check). The package has an API server of its own (Flux's CRDs and
controllers, and operators that watch every namespace, never meet the e2e modules' leftovers),
one source-controller and kustomize-controller pair for all its tests, and a Git server. The
broker is the session's.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.flux import Flux, GitServer
from harness.kube_apiserver import KubeAPIServer, selected_version

HERE = Path(__file__).parent


#: Opt-in, a release check (``make test-gitops``): Flux's controllers take about 570 CPU-seconds and
#: 3 GB of modules to build cold, more than ``make test``'s budget leaves.
ENABLED = os.environ.get("KQUOTA_GITOPS") == "1"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="the Flux suite is a release check: KQUOTA_GITOPS=1 (make test-gitops)")
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.gitops)
            if not ENABLED:
                item.add_marker(skip)


@pytest.fixture(scope="package")
def gkube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPIServer]:
    server = KubeAPIServer.start(tmp_path_factory.mktemp("gitops-kube"), version=selected_version())
    try:
        server.apply_crds()
        server.kubectl("create", "namespace", "kquota-system")
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="package")
def flux(gkube: KubeAPIServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flux]:
    controllers = Flux.start(gkube, tmp_path_factory.mktemp("flux"))
    try:
        yield controllers
    finally:
        controllers.stop()


@pytest.fixture(scope="package")
def git(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GitServer]:
    server = GitServer.start(tmp_path_factory.mktemp("git"))
    try:
        yield server
    finally:
        server.stop()
