"""What kquota reads about a Kafka cluster besides quotas: its id and brokers, broker and topic configs, leaders.

DescribeConfigs is sent by hand, not through kafka-python's describe_configs:
that one drops each resource's error code, so a refusal would read as
"defaults". Likewise a topic the principal may not DESCRIBE raises
``KafkaNotAuthorized`` rather than passing for a missing topic.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from kafka.protocol.admin import DescribeClusterRequest, DescribeConfigsRequest

from kquota.kafka.connection import Connection
from kquota.kafka.errors import (
    CLUSTER_AUTHORIZATION_FAILED,
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_SERVER_ERROR,
    UNKNOWN_TOPIC_OR_PARTITION,
    KafkaNotAuthorized,
    QuotaRequestError,
    error_name,
)

#: DescribeConfigs resource types.
_TOPIC: Final = 2
_BROKER: Final = 4


def cluster_info(conn: Connection, timeout_ms: int | None = None) -> tuple[str, list[int]]:
    """The Kafka cluster's id and its brokers' ids, from one DescribeCluster (answered within ``timeout_ms``)."""
    request = DescribeClusterRequest(include_cluster_authorized_operations=False)
    response = conn.send(request, "DescribeCluster", timeout_ms=timeout_ms)
    if response.error_code:
        raise QuotaRequestError(response.error_code, error_name(response.error_code), response.error_message)
    return str(response.cluster_id), sorted(int(b.broker_id) for b in response.brokers)


def broker_configs(conn: Connection, broker_id: int, keys: Sequence[str]) -> dict[str, str]:
    """Effective values (defaults included) of some configs of one broker."""
    request = DescribeConfigsRequest(resources=[(_BROKER, str(broker_id), list(keys))], include_synonyms=False)
    result = _described_config(conn.send(request, "DescribeConfigs", node_id=broker_id))
    if result.error_code == CLUSTER_AUTHORIZATION_FAILED:
        raise KafkaNotAuthorized(conn.principal, "DESCRIBE_CONFIGS", "CLUSTER", [], "DescribeConfigs")
    if result.error_code:
        raise QuotaRequestError(result.error_code, error_name(result.error_code), result.error_message)
    return {str(c.name): str(c.value) for c in result.configs or () if c.value is not None}


def topic_config_names(conn: Connection, topic: str) -> set[str]:
    """Every config key a topic has on these brokers (to detect KIP-1010 topic quota support)."""
    request = DescribeConfigsRequest(resources=[(_TOPIC, topic, None)], include_synonyms=False)
    result = _described_config(conn.send(request, "DescribeConfigs"))
    if result.error_code == TOPIC_AUTHORIZATION_FAILED:
        raise KafkaNotAuthorized(conn.principal, "DESCRIBE_CONFIGS", "TOPIC", [topic], "DescribeConfigs")
    if result.error_code == UNKNOWN_TOPIC_OR_PARTITION:
        return set()
    if result.error_code:
        raise QuotaRequestError(result.error_code, error_name(result.error_code), result.error_message)
    return {str(c.name) for c in result.configs or ()}


def _described_config(response: Any) -> Any:
    if len(response.results or ()) != 1:
        raise QuotaRequestError(UNKNOWN_SERVER_ERROR, "UNKNOWN_SERVER_ERROR", "DescribeConfigs: no result")
    return response.results[0]


def topic_leaders(conn: Connection, topics: Sequence[str]) -> dict[str, dict[int, int]]:
    """partition -> leader broker id (-1 without a leader) per existing topic; missing topics are left out.

    Kafka answers TOPIC_AUTHORIZATION_FAILED for a topic the principal may
    not DESCRIBE, whether it exists or not: that raises
    ``KafkaNotAuthorized`` (with the allowed topics' layouts attached)
    rather than passing for a missing topic.
    """
    if not topics:
        return {}
    described = conn.call("Metadata", lambda c: c.describe_topics(list(topics)))
    out: dict[str, dict[int, int]] = {}
    refused: list[str] = []
    for topic in described:
        if topic.get("error_code") == TOPIC_AUTHORIZATION_FAILED:
            refused.append(str(topic["name"]))
        if topic.get("error_code"):
            continue
        out[str(topic["name"])] = {
            int(p["partition_index"]): int(p["leader_id"]) for p in topic.get("partitions") or []
        }
    if refused:
        raise KafkaNotAuthorized(conn.principal, "DESCRIBE", "TOPIC", sorted(refused), "Metadata", leaders=out)
    return out
