"""What the authentication e2e tests share: Secrets with binary keys, the brokers' own authentication counts.

``auth_count`` reads Kafka's socket-server metrics as harness/jmx-auth.yaml
exports them (a broker started with ``jmx_rules=AUTH_JMX_RULES``): how many SASL
authentications and KIP-368 re-authentications a listener accepted or refused,
counted by the broker itself.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

from harness.kafka_cluster import KafkaCluster
from harness.kube_apiserver import KubeAPIServer
from harness.operator_proc import LEDGER_NAMESPACE

AUTH_JMX_RULES = Path(__file__).resolve().parents[2] / "harness" / "jmx-auth.yaml"


def put_secret(
    kube: KubeAPIServer, name: str, text: dict[str, str] | None = None, binary: dict[str, bytes] | None = None
) -> dict[str, str]:
    """Create or replace a Secret in the operator's namespace (text and binary keys); returns its namespace and name."""
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": LEDGER_NAMESPACE},
        "type": "Opaque",
        "stringData": dict(text or {}),
        "data": {k: base64.b64encode(v).decode() for k, v in (binary or {}).items()},
    }
    # Server-side apply: a client-side apply would copy the keys into the last-applied-configuration annotation.
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(body))
    return {"namespace": LEDGER_NAMESPACE, "name": name}


def auth_count(kafka: KafkaCluster, outcome: str, kind: str, listener: str) -> float:
    """The brokers' count of ``outcome`` (successful, failed) ``kind`` ((re)authentication) on a listener."""
    # The exporter (1.0.1) drops a gauge's _total suffix.
    name = f"kafka_server_socket_server_metrics_{outcome}_{kind}"
    pattern = re.compile(rf'^{name}(?:_total)?\{{[^}}]*listener="{re.escape(listener)}"[^}}]*\}} (\S+)$', re.M)
    return sum(float(value) for broker in kafka.brokers for value in pattern.findall(broker.metrics_text()))
