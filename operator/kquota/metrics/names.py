"""Metric and label names as the brokers' JMX exporter writes them (defaults: harness/jmx-exporter.yaml)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class MetricNames:
    """Metric and label names as the exporter writes them (defaults: harness/jmx-exporter.yaml).

    A KafkaCluster's ``spec.metrics.names`` (:class:`kquota.api.cluster_metrics.ExporterNames`,
    same defaults) becomes one of these in :func:`kquota.reconcile.build.metric_names`.
    """

    quota_prefix: str = "kafka_server_quota_"
    resource_label: str = "resource"
    user_label: str = "user"
    client_label: str = "clientId"
    topic_label: str = "topic"
    bytes_in_total: str = "kafka_server_brokertopicmetrics_bytesinpersec_total"
    bytes_out_total: str = "kafka_server_brokertopicmetrics_bytesoutpersec_total"
    bytes_in_rate: str = "kafka_server_brokertopicmetrics_bytesinpersec_oneminuterate"
    bytes_out_rate: str = "kafka_server_brokertopicmetrics_bytesoutpersec_oneminuterate"
    #: The Prometheus label naming the scrape target (a broker).
    instance_label: str = "instance"

    @property
    def quota_names(self) -> tuple[str, ...]:
        return tuple(self.quota_prefix + a for a in QUOTA_ATTRS)

    @property
    def topic_names(self) -> tuple[str, ...]:
        return (self.bytes_in_total, self.bytes_out_total, self.bytes_in_rate, self.bytes_out_rate)

    @property
    def prefixes(self) -> tuple[str, ...]:
        return (self.quota_prefix, *self.topic_names)


#: Attributes of the quota metrics (Kafka's names with '-' turned into '_').
QUOTA_ATTRS: Final = ("byte_rate", "throttle_time", "request_time", "tokens", "mutation_rate")
