"""The Kafka harness is real: messages flow, SCRAM is enforced, metrics and tools work."""

from __future__ import annotations

import re
import secrets
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from harness.kafka_cluster import KafkaCluster
from harness.tls import CertificateAuthority

from tests.plugins.kafka import unique_name

pytestmark = pytest.mark.integration


def _produce(
    config: dict[str, Any], topic: str, count: int = 10, size: int = 100, timeout: float = 30
) -> tuple[int, list[KafkaError]]:
    """Produce ``count`` messages; return (delivered, errors seen by delivery and error callbacks)."""
    errors: list[KafkaError] = []
    delivered = 0

    def on_delivery(err: KafkaError | None, _msg: object) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1
        else:
            errors.append(err)

    producer = Producer(dict(config, error_cb=errors.append, **{"message.timeout.ms": int(timeout * 1000)}))
    for i in range(count):
        producer.produce(topic, value=b"x" * size, key=str(i).encode(), on_delivery=on_delivery)
    producer.flush(timeout + 5)
    return delivered, errors


def _wait_for(predicate: Any, timeout: float = 30, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout}s")
        time.sleep(0.3)


def test_message_round_trip_over_plaintext(kafka: KafkaCluster) -> None:
    topic = unique_name("roundtrip")
    payload = secrets.token_bytes(32)
    producer = Producer(kafka.client_config())
    producer.produce(topic, value=payload)
    assert producer.flush(30) == 0

    consumer = Consumer(dict(kafka.client_config(), **{"group.id": unique_name("g"), "auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    try:
        got = None
        deadline = time.monotonic() + 30
        while got is None and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                got = msg.value()
    finally:
        consumer.close()
    assert got == payload


def test_scram_user_authenticates_and_wrong_password_is_refused(
    kafka: KafkaCluster, scram_user: tuple[str, str]
) -> None:
    name, password = scram_user
    topic = unique_name("scram")
    delivered, errors = _produce(kafka.client_config(name, password), topic, count=3)
    assert (delivered, errors) == (3, [])

    delivered, errors = _produce(kafka.client_config(name, password + "x"), topic, count=1, timeout=5)
    assert delivered == 0
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    assert any("Authentication failed" in e.str() for e in errors), errors


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
def test_admin_superuser_on_every_sasl_mechanism(kafka: KafkaCluster, mechanism: str) -> None:
    delivered, errors = _produce(
        kafka.client_config(kafka.admin_user, mechanism=mechanism), unique_name("admin"), count=1
    )
    assert (delivered, errors) == (1, [])


def test_kafka_configs_tool_and_quota_metrics(kafka: KafkaCluster, scram_user: tuple[str, str]) -> None:
    name, password = scram_user
    topic = unique_name("metrics")
    result = kafka.kafka_configs(
        "--alter", "--add-config", "producer_byte_rate=1048576", "--entity-type", "users", "--entity-name", name
    )
    assert result.returncode == 0, result.stderr
    described = kafka.kafka_configs("--describe", "--entity-type", "users", "--entity-name", name)
    assert f"Quota configs for user-principal '{name}' are producer_byte_rate=1048576.0" in described.stdout

    # Quotas reach the broker asynchronously; produce until the series shows up.
    series = re.compile(rf'^kafka_server_quota_byte_rate\{{resource="Produce",user="{re.escape(name)}"\}} (\S+)$', re.M)

    def scraped() -> re.Match[str] | None:
        _, errors = _produce(kafka.client_config(name, password), topic, count=20, size=1000)
        assert errors == []
        return series.search(kafka.brokers[0].metrics_text())

    match = _wait_for(scraped, what=f"quota byte-rate series for {name}")
    assert float(match.group(1)) > 0
    text = kafka.brokers[0].metrics_text()
    assert re.search(
        rf'^kafka_server_quota_throttle_time\{{resource="Produce",user="{re.escape(name)}"\}} ', text, re.M
    )
    per_topic = re.search(
        rf'^kafka_server_brokertopicmetrics_bytesinpersec_total\{{topic="{topic}"\}} (\S+)$', text, re.M
    )
    assert per_topic is not None and float(per_topic.group(1)) >= 20 * 1000
    assert re.search(r"^kafka_server_brokertopicmetrics_bytesinpersec_oneminuterate ", text, re.M)


def test_controller_mutation_quota_metrics(kafka: KafkaCluster, scram_user: tuple[str, str]) -> None:
    name, password = scram_user
    client_id = unique_name("cm")
    result = kafka.kafka_configs(
        "--alter",
        "--add-config",
        "controller_mutation_rate=5",
        "--entity-type",
        "users",
        "--entity-name",
        name,
        "--entity-type",
        "clients",
        "--entity-name",
        client_id,
    )
    assert result.returncode == 0, result.stderr
    admin = AdminClient(dict(kafka.client_config(name, password), **{"client.id": client_id}))
    tokens = re.compile(
        rf'^kafka_server_quota_tokens\{{clientId="{client_id}",resource="ControllerMutation",'
        rf'user="{name}"\}} (\S+)$',
        re.M,
    )

    def scraped() -> re.Match[str] | None:
        for future in admin.create_topics([NewTopic(unique_name("cm"), 1, 1)]).values():
            future.result()
        return tokens.search(kafka.brokers[0].metrics_text())

    match = _wait_for(scraped, what="controller mutation tokens series")
    # Burst = 11 windows x 1 s x 5/s; each create of one partition takes a token.
    assert 0 < float(match.group(1)) <= 55


@pytest.mark.slow
def test_three_broker_cluster(kafka3: KafkaCluster) -> None:
    admin = AdminClient(kafka3.client_config())
    assert sorted(admin.list_topics(timeout=10).brokers) == [1, 2, 3]
    topic = unique_name("rf3")
    for future in admin.create_topics([NewTopic(topic, 3, 3)]).values():
        future.result()
    partitions = _wait_for(lambda: admin.list_topics(topic, timeout=10).topics[topic].partitions or None)
    assert all(sorted(p.isrs) == [1, 2, 3] for p in partitions.values())
    for broker in kafka3.brokers:
        assert "jvm_memory" in broker.metrics_text()

    # A broker killed without grace comes back on its old ports and data.
    kafka3.kill_broker(2)
    assert not kafka3.brokers[2].proc.alive()
    delivered, _ = _produce(kafka3.client_config(), topic, count=5)
    assert delivered == 5
    kafka3.start_broker(2)
    assert sorted(admin.list_topics(timeout=10).brokers) == [1, 2, 3]


@pytest.mark.slow
def test_authorizer_cluster_enforces_acls(tmp_path: Path) -> None:
    cluster = KafkaCluster.start(tmp_path / "acl", brokers=1, authorizer=True)
    try:
        name, password = unique_name("acl"), secrets.token_hex(8)
        cluster.create_scram_user(name, password)
        topic = unique_name("acl")
        admin = AdminClient(cluster.client_config())
        for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
            future.result()

        delivered, errors = _produce(cluster.client_config(name, password), topic, count=1, timeout=5)
        assert delivered == 0
        assert any(e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for e in errors), errors

        cluster.create_acls("--allow-principal", f"User:{name}", "--operation", "Write", "--topic", topic)
        listed = cluster.kafka_acls("--list", "--topic", topic, check=True)
        assert f"User:{name}" in listed.stdout

        delivered, errors = _wait_for(
            lambda: (r := _produce(cluster.client_config(name, password), topic, count=1, timeout=5))[0] and r,
            what="produce allowed by the new ACL",
        )
        assert delivered == 1
    finally:
        cluster.stop()


@pytest.mark.slow
def test_tls_listeners_need_a_trusted_certificate_and_name_the_principal_by_its_dn(tmp_path: Path) -> None:
    cluster = KafkaCluster.start(tmp_path / "tls", brokers=1, authorizer=True, tls=True)
    try:
        topic = unique_name("tls")
        admin = AdminClient(cluster.client_config())
        for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
            future.result()
        app = cluster.mint_client_cert("CN=app,OU=team-a")
        stranger = cluster.mint_client_cert("CN=stranger,OU=team-a")
        user, password = unique_name("tls-user"), secrets.token_hex(8)
        cluster.create_scram_user(user, password)
        for principal in ("User:CN=app,OU=team-a", f"User:{user}"):
            cluster.create_acls("--allow-principal", principal, "--operation", "Write", "--topic", topic)

        def delivers(config: dict[str, Any]) -> bool:
            return _produce(dict(config, log_level=0), topic, count=1, timeout=5)[0] == 1

        # Mutual TLS: the certificate's DN is the principal the ACL names ...
        _wait_for(lambda: delivers(cluster.tls_client_config(app)), what="produce over SSL as CN=app,OU=team-a")
        # ... so a certificate from the same CA with another DN gets through TLS and is then not authorized.
        delivered, errors = _produce(dict(cluster.tls_client_config(stranger), log_level=0), topic, 1, timeout=5)
        assert delivered == 0
        assert any(e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for e in errors), errors
        # SASL_SSL: SCRAM over TLS, no client certificate needed.
        _wait_for(lambda: delivers(cluster.tls_client_config(user=user, password=password)), what="SASL_SSL produce")

        # Refused: no client certificate, or one with the right DN from another CA.
        other = CertificateAuthority.create(tmp_path / "other", cn="another CA")
        forged = other.issue("CN=app,OU=team-a", name="forged")
        for cert in (None, forged):
            delivered, errors = _produce(dict(cluster.tls_client_config(cert), log_level=0), topic, 1, timeout=5)
            assert delivered == 0
            assert any("alert" in e.str() and "certificate" in e.str() for e in errors), (cert, errors)
        # A client that trusts another CA does not accept the brokers' certificate.
        untrusting = cluster.tls_client_config(user=user, password=password, ca=other.cert)
        delivered, errors = _produce(dict(untrusting, log_level=0), topic, 1, timeout=5)
        assert delivered == 0
        assert any("certificate verify failed" in e.str() for e in errors), errors
    finally:
        cluster.stop()
