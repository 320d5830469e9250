"""kquota's fix to kafka-python's transport read loop is in place, for the version it was written for.

The behaviour itself (a SASL refusal read together with the broker's close is a refusal) is
tested on the real broker: tests/integration/test_quota_adapter.py.
"""

from __future__ import annotations

import inspect

import kafka
import pytest
from kafka.net.transport import KafkaSSLTransport, KafkaTCPTransport

from kquota.kafka import connection

pytestmark = pytest.mark.unit


def test_the_read_loop_is_kquotas_for_plain_and_tls_connections() -> None:
    assert KafkaTCPTransport._read_from_sock is connection._read_from_sock
    assert KafkaSSLTransport._read_from_sock is connection._read_from_sock


def test_kafka_python_is_the_version_the_patch_was_written_for() -> None:
    # An upgrade must re-check the loop against the new one (and drop the patch once upstream
    # delivers a read's bytes before acting on the end of the stream).
    assert kafka.__version__ == "3.0.12", (
        f"kafka-python {kafka.__version__}: re-check kquota.kafka.connection._read_from_sock against "
        f"{inspect.getsourcefile(KafkaTCPTransport)}"
    )
