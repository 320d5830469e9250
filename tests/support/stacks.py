"""A broker and an operator of a test module's own, for tests whose operator settings or Adopt reach every quota."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from harness.kafka_cluster import KafkaCluster, running
from harness.kube_apiserver import KubeAPIServer
from harness.stack import Stack, start_stack, stop_stack


@contextlib.contextmanager
def own_stack(
    kube: KubeAPIServer, tmp_path_factory: pytest.TempPathFactory, name: str, extra_env: dict[str, str]
) -> Iterator[tuple[KafkaCluster, Stack]]:
    """A fresh broker, and an operator (with ``extra_env``) whose default KafkaCluster points at it."""
    with running(tmp_path_factory.mktemp(f"kafka-{name}")) as broker:
        stack = start_stack(kube, broker, tmp_path_factory.mktemp(f"operator-{name}"), extra_env=extra_env)
        try:
            yield broker, stack
        finally:
            stop_stack(stack)
