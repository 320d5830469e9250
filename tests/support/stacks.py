"""A broker and an operator of a test module's own, for tests whose operator settings or Adopt reach every quota."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from harness.kafka_cluster import KafkaCluster
from harness.kube_apiserver import KubeAPIServer
from harness.stack import Stack, start_stack, stop_stack


@contextlib.contextmanager
def own_stack(
    kube: KubeAPIServer,
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    extra_env: dict[str, str],
    **broker_options: Any,
) -> Iterator[tuple[KafkaCluster, Stack]]:
    """A fresh broker (``KafkaCluster.start`` options), and an operator (with ``extra_env``) whose default
    KafkaCluster points at it.

    The operator watches only the namespaces its stack creates (``<name>-*``):
    resources other modules left behind must not reach this module's broker.
    """
    broker = KafkaCluster.start(tmp_path_factory.mktemp(f"kafka-{name}"), **broker_options)
    try:
        stack = start_stack(
            kube, broker, tmp_path_factory.mktemp(f"operator-{name}"), extra_env=extra_env, namespace_prefix=name
        )
        try:
            yield broker, stack
        finally:
            stop_stack(stack)
    finally:
        broker.stop()
