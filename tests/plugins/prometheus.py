"""pytest fixture for a real Prometheus server scraping the session Kafka broker (harness/prometheus.py).

``prometheus`` is session-scoped and started on first use (after ``kafka``),
scraping every broker's JMX-exporter endpoint each second; it is stopped at
session end. Without the Debian ``prometheus`` binary it fails with a
ComponentError that says how to install it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from harness.kafka_cluster import KafkaCluster
from harness.prometheus import Prometheus


@pytest.fixture(scope="session")
def prometheus(kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    server = Prometheus.start(tmp_path_factory.mktemp("prometheus"), [b.metrics_url for b in kafka.brokers])
    try:
        server.wait_scraped()
        yield server
    finally:
        server.stop()
