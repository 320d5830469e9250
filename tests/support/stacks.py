"""A broker and an operator of a test module's own, for tests whose operator settings or Adopt reach every quota."""

from __future__ import annotations

import contextlib
import json
import uuid
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
    watch_namespaces: list[str] | None = None,
    **broker_options: Any,
) -> Iterator[tuple[KafkaCluster, Stack]]:
    """A fresh broker (``KafkaCluster.start`` options), and an operator (with ``extra_env``) whose default
    KafkaCluster points at it.

    The operator watches only the namespaces its stack creates (``<name>-*``):
    resources other modules left behind must not reach this module's broker.
    ``watch_namespaces`` names the namespaces to watch instead (for a module
    whose namespaces are fixed names, such as a doc's walkthrough).
    """
    broker = KafkaCluster.start(tmp_path_factory.mktemp(f"kafka-{name}"), **broker_options)
    try:
        env = dict(extra_env)
        if watch_namespaces is not None:
            env["KQUOTA_WATCH_NAMESPACES"] = json.dumps(watch_namespaces)
        prefix = None if watch_namespaces is not None else name
        stack = start_stack(
            kube, broker, tmp_path_factory.mktemp(f"operator-{name}"), extra_env=env, namespace_prefix=prefix
        )
        try:
            yield broker, stack
        finally:
            stop_stack(stack)
    finally:
        broker.stop()


def metrics_cluster(stack: Stack, window: str = "20s", **metrics: Any) -> str:
    """A fresh KafkaCluster on ``stack``'s brokers that reads their metrics endpoints over ``window``.

    ``metrics`` adds fields to its spec.metrics (e.g. ``nearLimitPercent``).
    """
    name = f"observed-{uuid.uuid4().hex[:6]}"
    stack.kube.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "kquota.io/v1alpha1",
                "kind": "KafkaCluster",
                "metadata": {"name": name},
                "spec": {
                    "bootstrapServers": stack.kafka.bootstrap,
                    "metrics": {
                        "brokerEndpoints": [b.metrics_url for b in stack.kafka.brokers],
                        "window": window,
                        **metrics,
                    },
                },
            }
        ),
    )
    return name
