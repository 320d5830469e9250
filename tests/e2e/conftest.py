"""The e2e ``stack`` fixture: one operator per test module on the session's API server and broker;
``own_kube``: an API server for one test alone (one it may restart)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.kafka_cluster import KafkaCluster
from harness.kube_apiserver import KubeAPIServer, selected_version
from harness.stack import Stack, start_stack, stop_stack


@pytest.fixture(scope="module")
def stack(kube: KubeAPIServer, kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One operator per test module, on the session's API server and broker.

    The operator watches only the namespaces its stack creates (a prefix of the module's own): a quota
    resource another module left on the shared API server (one without clusterRef goes to every
    operator's default cluster) must not reach the broker while this module judges the broker's state.
    """
    prefix = f"m{uuid.uuid4().hex[:5]}"
    s = start_stack(kube, kafka, tmp_path_factory.mktemp("operator"), namespace_prefix=prefix)
    try:
        yield s
    finally:
        stop_stack(s)


@pytest.fixture
def own_kube(tmp_path: Path) -> Iterator[KubeAPIServer]:
    """An API server for this test alone (a test may restart it; leftovers stay here), of the
    session's version (``KQUOTA_KUBE_VERSION``)."""
    server = KubeAPIServer.start(tmp_path / "kube", version=selected_version())
    try:
        yield server
    finally:
        server.stop()
