"""pytest fixtures for the real kube-apiserver (see kube_apiserver.py).

``kube`` is session scoped: one API server per test session, started on first
use. Tests isolate themselves with a fresh namespace (``namespace`` fixture),
because without kube-controller-manager namespaces are never really deleted.
Its Kubernetes version is the one ``KQUOTA_KUBE_VERSION`` selects (default: the
current 1.35; ``make test-k8s-floor`` sets 1.31, the supported floor).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from harness.kube_apiserver import KubeAPIServer, selected_version


@pytest.fixture(scope="session")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPIServer]:
    server = KubeAPIServer.start(tmp_path_factory.mktemp("kube"), version=selected_version())
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def namespace(kube: KubeAPIServer) -> str:
    return kube.create_namespace()
