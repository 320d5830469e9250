"""deploy/strimzi/kafka-metrics-kquota.yaml in a real broker's JMX exporter agent gives the series kquota reads.

The module starts a broker of its own whose agent runs the ConfigMap's configuration with a generic rule
appended, as a user who adds Strimzi's stock rules after the quota rules gets. Three producers go over
three quotas, one of each label shape Kafka gives a quota bucket: a user quota (``user`` only), a client-id
quota (``clientId`` only, with a client-id Kafka JMX-quotes) and a (user, client-id) quota (both). kquota's
own pipeline with its default names (``ScrapeSource`` -> ``attribute`` -> ``observe``, as the operator runs
it) must see each of the three throttled, and the generic rule must have taken none of the quota MBeans.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from harness.kafka_cluster import KafkaCluster

from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.observed import Observed, attribute, observe
from kquota.domain.plan import EntityChange, QuotaOp
from kquota.kafka.admin import QuotaAdmin
from kquota.kafka.settings import ConnectionSettings
from kquota.metrics.exposition import parse_text
from kquota.metrics.names import MetricNames
from kquota.metrics.sources import ScrapeSource
from tests.support.load import ProducerLoad, create_topic
from tests.support.paths import REPO

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CONFIGMAP = REPO / "deploy" / "strimzi" / "kafka-metrics-kquota.yaml"
QUOTA = 50_000
WINDOW = 20.0
THROTTLED_WITHIN = 45.0
QUOTA_TYPES = ("Produce", "Fetch", "Request", "ControllerMutation")
#: A rule of the shape of Strimzi's generic rules: it would take the quota MBeans if it came first. The
#: MBean's keys are a label so that no two MBeans give one series (the exporter would refuse the scrape).
GENERIC_RULE = {
    "pattern": f"kafka.server<type=({'|'.join(QUOTA_TYPES)}|BrokerTopicMetrics), (.+)><>(.+)",
    "name": "kafka_server_generic_$1_$3",
    "type": "GAUGE",
    "labels": {"keys": "$2"},
}


def exporter_config() -> dict[str, Any]:
    """The JMX exporter configuration the ConfigMap holds (its one data key)."""
    configmap = yaml.safe_load(CONFIGMAP.read_text(encoding="utf-8"))
    assert configmap["kind"] == "ConfigMap"
    (text,) = configmap["data"].values()
    config: dict[str, Any] = yaml.safe_load(text)
    return config


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    config = exporter_config()
    config["rules"].append(GENERIC_RULE)
    rules = tmp_path_factory.mktemp("strimzi-rules") / "kafka-metrics-config.yml"
    rules.write_text(yaml.safe_dump(config), encoding="utf-8")
    cluster = KafkaCluster.start(tmp_path_factory.mktemp("kafka-strimzi-rules"), jmx_rules=rules)
    try:
        yield cluster
    finally:
        cluster.stop()


def test_the_quota_rules_give_kquota_its_series(broker: KafkaCluster) -> None:
    tag = secrets.token_hex(3)
    user, pair_user, pair_client = f"alone-{tag}", f"pair-{tag}", f"pair-app-{tag}"
    # A comma and an equals sign: Kafka JMX-quotes this client-id in the MBean name.
    client = f"reports,eu={tag}"
    password = secrets.token_hex(12)
    for name in (user, pair_user):
        broker.create_scram_user(name, password)
    entities = {
        "user": Entity.for_user(user),
        "client-id": Entity.for_client(client),
        "user and client-id": Entity.for_pair(pair_user, pair_client),
    }
    admin = QuotaAdmin(ConnectionSettings(broker.bootstrap))
    topic = f"strimzi-rules-{tag}"
    create_topic(broker, topic)
    loads = [
        ProducerLoad(broker.client_config(user, password), topic, rate=3 * QUOTA),
        ProducerLoad(broker.client_config(), topic, rate=3 * QUOTA, **{"client.id": client}),
        ProducerLoad(broker.client_config(pair_user, password), topic, rate=3 * QUOTA, **{"client.id": pair_client}),
    ]
    source = ScrapeSource([b.metrics_url for b in broker.brokers], timeout=5)
    seen: dict[str, Observed] = {}
    try:
        results = admin.alter(
            [EntityChange(e, (QuotaOp(QuotaKey.PRODUCER_BYTE_RATE, QUOTA),)) for e in entities.values()]
        )
        assert all(r.ok for r in results), results
        for load in loads:
            load.start()
        started = time.monotonic()
        while len(seen) < len(entities):
            assert time.monotonic() - started < THROTTLED_WITHIN, (
                f"not seen throttled through the rules within {THROTTLED_WITHIN:.0f}s: "
                f"{sorted(set(entities) - set(seen))}"
            )
            time.sleep(1)
            reading = source.read(WINDOW)
            assert reading.available, reading.error
            attribution = attribute(reading, admin.describe_all())
            for shape, entity in entities.items():
                obs = observe(attribution, entity, [QuotaKey.PRODUCER_BYTE_RATE])
                if obs is not None and obs.throttled:
                    seen[shape] = obs
        print(f"\nall three throttled through the Strimzi rules after {time.monotonic() - started:.1f}s")
        assert all(load.throttles for load in loads), "the broker throttled every producer"
        page = broker.brokers[0].metrics_text()
    finally:
        for load in loads:
            load.finish()
        admin.close()
    for shape, obs in seen.items():
        total = obs.total[QuotaKey.PRODUCER_BYTE_RATE]
        assert total.rate is not None and total.rate > 0, shape
        assert total.throttle_ms > 0, shape
    # Label shapes as the readers expect them, and nothing under any other name.
    quota = [s for s in parse_text(page, MetricNames().prefixes) if s.name.startswith("kafka_server_quota_")]
    ours = [s for s in quota if tag in s.labels.get("user", "") + s.labels.get("clientId", "")]
    shapes = {frozenset(s.labels) for s in ours if s.labels.get("resource") == "Produce"}
    assert shapes == {
        frozenset({"resource", "user"}),
        frozenset({"resource", "clientId"}),
        frozenset({"resource", "user", "clientId"}),
    }
    generic = [line for line in page.splitlines() if line.startswith("kafka_server_generic_")]
    assert generic, "the generic rule after the quota rules is live"
    quota_prefixes = tuple(f"kafka_server_generic_{t.lower()}_" for t in QUOTA_TYPES)
    taken = [line for line in generic if line.startswith(quota_prefixes)]
    assert not taken, f"the generic rule took quota MBeans: {taken[:3]}"
