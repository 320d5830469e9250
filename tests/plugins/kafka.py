"""pytest fixtures for the real Kafka cluster (harness/kafka_cluster.py).

``kafka`` (one broker) and ``kafka3`` (three brokers) are session-scoped and
started on first use, so a run that needs neither starts no JVM; both are
stopped at session end. Tests share them, so they use unique entity names
(``unique_name``) instead of cleaning up after each other.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
from harness.kafka_cluster import KafkaCluster


def unique_name(prefix: str = "t") -> str:
    return f"{prefix}-{secrets.token_hex(5)}"


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster.start(tmp_path_factory.mktemp("kafka"), brokers=1)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def kafka3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster.start(tmp_path_factory.mktemp("kafka3"), brokers=3)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def scram_user(kafka: KafkaCluster) -> tuple[str, str]:
    """A fresh SCRAM-SHA-512 user on ``kafka``: (name, password)."""
    name, password = unique_name("user"), secrets.token_hex(12)
    kafka.create_scram_user(name, password)
    return name, password
