"""tests/gitops: Flux's own controllers (harness/flux.py) syncing Git repositories of quotas.

Everything here is marked ``gitops`` and runs in ``make test`` (``make test-gitops`` alone). Its
modules are scheduled after every other module: ``make test`` builds Flux's controllers in the
background at idle priority meanwhile (harness/gobuilds.py); a module that still finds the build
running lifts it to normal priority and waits for it, within a timeout that allows for it. The
package has an API server of its own (Flux's CRDs and controllers, and operators that watch every
namespace, never meet the e2e modules' leftovers), one source-controller and kustomize-controller
pair per worker for all its tests, and a Git server. The broker is the session's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import flux as flux_build
from harness import gobuilds
from harness.flux import Flux, GitServer
from harness.kube_apiserver import KubeAPIServer, selected_version

HERE = Path(__file__).parent

#: How long a module's first test may wait for the controllers' build (cold: about 570 CPU-seconds
#: and 3 GB of modules), on top of the suite's per-test timeout.
BUILD_ALLOWANCE_S = 3600


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ours = [item for item in items if item.path.is_relative_to(HERE)]
    if not ours:
        return
    # Last, so that make test's background build (harness/gobuilds.py) has the whole suite's time.
    # pytest-xdist (--dist loadfile) hands modules out in this order.
    items[:] = [item for item in items if not item.path.is_relative_to(HERE)] + ours
    built = all(flux_build.binary_path(name).exists() for name in flux_build.CONTROLLERS)
    base = float(config.getini("timeout") or 0)
    first_of_module: set[Path] = set()
    for item in ours:
        item.add_marker(pytest.mark.gitops)
        # No allowance where the suite has no timeout (pytest's `timeout` 0): nothing to extend.
        if not built and base and item.path not in first_of_module:
            # The module's first test starts its fixtures, which wait for the build.
            first_of_module.add(item.path)
            item.add_marker(pytest.mark.timeout(base + BUILD_ALLOWANCE_S))


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
    # make test's background build runs at idle priority: now the suite waits for it, it has all of it.
    gobuilds.hurry()
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
