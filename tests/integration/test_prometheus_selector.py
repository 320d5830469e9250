"""KafkaCluster ``spec.metrics.prometheusSelector`` against a real Prometheus scraping the session broker.

* The selector narrows what kquota reads: matching the scrape job, the broker's series are read; matching
  another job, nothing is.
* The selector tables of tests/unit/test_metrics_config.py agree with Prometheus' own PromQL parser: every
  accepted selector parses, inside kquota's queries too, and every refused one that the table marks as
  not PromQL fails to parse (the others are refused by choice: one way to quote, nothing but matchers).
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer
from harness.kafka_cluster import KafkaCluster
from harness.prometheus import Prometheus

from kquota.metrics.http import MetricsUnavailable
from kquota.metrics.prometheus import PrometheusAPI
from kquota.metrics.sources import PrometheusSource
from tests.plugins.kafka import unique_name
from tests.support.load import create_topic
from tests.support.selectors import INVALID_SELECTORS, VALID_SELECTORS, Refused

pytestmark = [pytest.mark.integration]

WINDOW = 20.0


@pytest.fixture(scope="module")
def topic(kafka: KafkaCluster, prometheus: Prometheus) -> str:
    """A topic with traffic, seen by Prometheus (the harness' job is "kafka")."""
    name = unique_name("selector")
    create_topic(kafka, name)
    producer = Producer(kafka.client_config())
    for _ in range(100):
        producer.produce(name, b"x" * 100)
    assert producer.flush(30) == 0
    source = PrometheusSource(prometheus.url, selector='job="kafka"')
    deadline = time.monotonic() + 30
    while not any(t.topic == name for t in source.read(WINDOW).topics):
        assert time.monotonic() < deadline, "Prometheus never returned the topic's bytes"
        time.sleep(1)
    return name


@pytest.mark.parametrize(
    ("selector", "reads"),
    [
        pytest.param('job="kafka"', True, id="the scrape job's selector reads the broker"),
        pytest.param('job="kafka", instance=~".+"', True, id="two matchers that hold read the broker"),
        pytest.param('job="kafka-elsewhere"', False, id="another job's selector reads nothing"),
        pytest.param('job!="kafka"', False, id="a negative matcher excludes the broker"),
    ],
)
def test_the_selector_keeps_the_reading_to_the_matching_series(
    prometheus: Prometheus, kafka: KafkaCluster, topic: str, selector: str, reads: bool
) -> None:
    reading = PrometheusSource(prometheus.url, selector=selector).read(WINDOW)
    assert reading.available, reading.error
    instances = {b.metrics_url.split("/")[2] for b in kafka.brokers}
    assert (set(reading.brokers) == instances) is reads, reading.brokers
    assert any(t.topic == topic for t in reading.topics) is reads


@pytest.mark.parametrize("selector", VALID_SELECTORS)
def test_an_accepted_selector_is_promql(prometheus: Prometheus, selector: str) -> None:
    PrometheusAPI(prometheus.url).instant(f"up{{{selector}}}")
    reading = PrometheusSource(prometheus.url, selector=selector, instances=["127.0.0.1:1"]).read(WINDOW)
    assert reading.available, reading.error


@pytest.mark.parametrize("refused", INVALID_SELECTORS)
def test_a_refused_selector_is_not_promql_unless_refused_by_choice(prometheus: Prometheus, refused: Refused) -> None:
    api = PrometheusAPI(prometheus.url)
    if refused.promql_valid:
        api.instant(f"up{{{refused.selector}}}")
    else:
        with pytest.raises(MetricsUnavailable, match="bad_data"):
            api.instant(f"up{{{refused.selector}}}")
