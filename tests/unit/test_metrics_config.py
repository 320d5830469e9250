"""KafkaCluster ``spec.metrics.prometheusSelector`` and ``spec.metrics.names``: what they accept, and how they
reach the metrics readers (``MetricsConfig`` -> ``source_for`` -> ``PrometheusSource``/``ScrapeSource``).

The selector tables are shared (tests/support/selectors.py): tests/e2e/test_admission.py sends them to the
real API server (the CEL rule's RE2 half) and tests/integration/test_prometheus_selector.py to a real
Prometheus (the PromQL parser the selector ends up in).
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, cast

import pytest

from kquota.api import KafkaCluster, ManifestError, parse_manifest
from kquota.api.cluster_metrics import (
    LABELS_NOT_DISTINCT,
    PROMETHEUS_SELECTOR_INVALID,
    TOPIC_NAMES_NOT_DISTINCT,
    ExporterNames,
)
from kquota.k8s.api import Kube
from kquota.metrics.names import MetricNames
from kquota.metrics.sources import PrometheusSource, ScrapeSource, source_for
from kquota.reconcile.build import cluster_config, metric_names
from kquota.reconcile.settings import OperatorSettings
from tests.support.selectors import INVALID_SELECTORS, VALID_SELECTORS, Refused


def kafka_cluster(metrics: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kquota.io/v1alpha1",
        "kind": "KafkaCluster",
        "metadata": {"name": "prod"},
        "spec": {"bootstrapServers": "kafka-0.kafka:9092", "metrics": metrics},
    }


# -- prometheusSelector --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("selector", VALID_SELECTORS)
def test_a_selector_of_promql_label_matchers_is_accepted(selector: str) -> None:
    model = parse_manifest(kafka_cluster({"prometheusSelector": selector}))
    assert isinstance(model, KafkaCluster)
    assert model.spec.metrics.prometheus_selector == selector


@pytest.mark.parametrize("refused", INVALID_SELECTORS)
def test_a_selector_that_is_not_label_matchers_is_refused_with_what_is_expected(refused: Refused) -> None:
    with pytest.raises(ManifestError) as info:
        parse_manifest(kafka_cluster({"prometheusSelector": refused.selector}))
    assert "spec.metrics.prometheusSelector" in str(info.value)
    assert PROMETHEUS_SELECTOR_INVALID in str(info.value)


def test_an_empty_selector_is_refused_rather_than_meaning_none() -> None:
    with pytest.raises(ManifestError) as info:
        parse_manifest(kafka_cluster({"prometheusSelector": ""}))
    assert "spec.metrics.prometheusSelector" in str(info.value)


def test_without_a_selector_there_is_none() -> None:
    model = parse_manifest(kafka_cluster({"prometheusURL": "http://prometheus:9090"}))
    assert isinstance(model, KafkaCluster)
    assert model.spec.metrics.prometheus_selector is None


# -- names -----------------------------------------------------------------------------------------------------

#: ExporterNames field -> the MetricNames attribute the readers use.
READER_ATTRIBUTE = {name: name for name in ExporterNames.model_fields} | {"client_id_label": "client_label"}


def test_the_api_defaults_are_the_readers_defaults() -> None:
    assert metric_names(ExporterNames()) == MetricNames()
    assert metric_names(None) == MetricNames()


def test_every_reader_name_can_be_set_from_the_api() -> None:
    assert set(READER_ATTRIBUTE.values()) == {f.name for f in dataclasses.fields(MetricNames)}


@pytest.mark.parametrize("field", sorted(ExporterNames.model_fields))
def test_each_name_reaches_the_reader_attribute_it_names(field: str) -> None:
    alias = ExporterNames.model_fields[field].alias or field
    names = ExporterNames.model_validate({alias: "kquota_custom"})
    readers = metric_names(names)
    changed = {
        f.name: getattr(readers, f.name)
        for f in dataclasses.fields(MetricNames)
        if getattr(readers, f.name) != getattr(MetricNames(), f.name)
    }
    assert changed == {READER_ATTRIBUTE[field]: "kquota_custom"}


def test_names_left_out_keep_their_defaults() -> None:
    model = parse_manifest(
        kafka_cluster({"brokerEndpoints": ["http://b:7071/metrics"], "names": {"quotaPrefix": "kafka_quota_"}})
    )
    assert isinstance(model, KafkaCluster)
    assert metric_names(model.spec.metrics.names) == dataclasses.replace(MetricNames(), quota_prefix="kafka_quota_")


INVALID_NAMES = [
    pytest.param({"quotaPrefix": "kafka-quota-"}, "spec.metrics.names.quotaPrefix in body should match", id="a dash"),
    pytest.param({"quotaPrefix": ""}, "spec.metrics.names.quotaPrefix", id="an empty prefix"),
    pytest.param({"bytesInTotal": "9bytes"}, "spec.metrics.names.bytesInTotal", id="a name starting with a digit"),
    pytest.param({"userLabel": "kafka:user"}, "spec.metrics.names.userLabel", id="a colon in a label name"),
    pytest.param({"clientIdLabel": "client-id"}, "spec.metrics.names.clientIdLabel", id="a dash in a label name"),
    pytest.param({"userLabel": "resource"}, LABELS_NOT_DISTINCT, id="the user label also the resource label"),
    pytest.param({"clientIdLabel": "instance"}, LABELS_NOT_DISTINCT, id="the client-id label also the broker label"),
    pytest.param({"topicLabel": "instance"}, LABELS_NOT_DISTINCT, id="the topic label also the broker label"),
    pytest.param(
        {"bytesInRate": "kafka_topic_bytes", "bytesOutRate": "kafka_topic_bytes"},
        TOPIC_NAMES_NOT_DISTINCT,
        id="bytes in and out under one name",
    ),
    pytest.param({"user": "kafka_user"}, 'unknown field "spec.metrics.names.user"', id="a field that does not exist"),
]


@pytest.mark.parametrize(("names", "says"), INVALID_NAMES)
def test_names_an_exporter_cannot_write_or_that_collide_are_refused(names: dict[str, str], says: str) -> None:
    with pytest.raises(ManifestError) as info:
        parse_manifest(kafka_cluster({"names": names}))
    assert says in str(info.value)


def test_a_topic_label_equal_to_a_quota_label_is_fine() -> None:
    """Topic and quota metrics are different series; only labels of one series must differ."""
    parse_manifest(kafka_cluster({"names": {"topicLabel": "resource"}}))


# -- from the KafkaCluster to the readers ---------------------------------------------------------------------------


def resolved(metrics: dict[str, Any]) -> Any:
    body = kafka_cluster(metrics)
    # A PLAINTEXT cluster reads no Secret, so the API client is never used.
    cfg = asyncio.run(cluster_config(body, cast(Kube, object()), OperatorSettings()))
    assert cfg is not None
    return cfg.metrics


def test_the_selector_and_names_reach_the_metrics_config() -> None:
    m = resolved(
        {
            "prometheusURL": "http://prometheus:9090",
            "prometheusSelector": 'job="kafka-prod"',
            "names": {"userLabel": "kafka_user"},
        }
    )
    assert m.prometheus_selector == 'job="kafka-prod"'
    assert m.names == dataclasses.replace(MetricNames(), user_label="kafka_user")


def test_without_them_the_metrics_config_is_as_before() -> None:
    m = resolved({"brokerEndpoints": ["http://b:7071/metrics"]})
    assert m.prometheus_selector is None
    assert m.names == MetricNames()


KAFKA_QUOTA = dataclasses.replace(MetricNames(), quota_prefix="kafka_quota_", user_label="kafka_user")


def test_source_for_gives_both_sources_their_names_and_prometheus_its_selector() -> None:
    prom = source_for("http://p:9090", None, selector='job="a"', names=KAFKA_QUOTA)
    assert isinstance(prom, PrometheusSource)
    assert (prom.selector, prom.names) == ('job="a"', KAFKA_QUOTA)
    scrape = source_for(None, ["http://b:1/metrics"], selector='job="a"', names=KAFKA_QUOTA)
    assert isinstance(scrape, ScrapeSource)
    assert scrape.names == KAFKA_QUOTA


def test_source_for_without_names_reads_the_default_names() -> None:
    source = source_for(None, ["http://b:1/metrics"])
    assert isinstance(source, ScrapeSource)
    assert source.names == MetricNames()


SAME_OR_NEW = [
    pytest.param({}, {}, True, id="nothing changed keeps the source"),
    pytest.param({}, {"names": MetricNames()}, True, id="the default names spelt out keep the source"),
    pytest.param({}, {"names": KAFKA_QUOTA}, False, id="new names give a new scrape source"),
    pytest.param({"names": KAFKA_QUOTA}, {}, False, id="names removed give a new scrape source"),
    pytest.param({}, {"selector": 'job="a"'}, True, id="a selector does not apply to a scrape source"),
]


@pytest.mark.parametrize(("before", "after", "same"), SAME_OR_NEW)
def test_a_scrape_source_is_kept_only_while_its_names_stay(
    before: dict[str, Any], after: dict[str, Any], same: bool
) -> None:
    first = source_for(None, ["http://b:1/metrics"], **before)
    second = source_for(None, ["http://b:1/metrics"], previous=first, **after)
    assert (second is first) is same
    assert second is not None and second.config[-1] == after.get("names", MetricNames())


PROM_SAME_OR_NEW = [
    pytest.param({"selector": 'job="a"'}, {"selector": 'job="a"'}, True, id="the same selector keeps the source"),
    pytest.param({"selector": 'job="a"'}, {"selector": 'job="b"'}, False, id="a new selector gives a new source"),
    pytest.param({}, {"selector": 'job="a"'}, False, id="a selector added gives a new source"),
    pytest.param({"selector": 'job="a"'}, {}, False, id="a selector removed gives a new source"),
    pytest.param({}, {"names": KAFKA_QUOTA}, False, id="new names give a new Prometheus source"),
]


@pytest.mark.parametrize(("before", "after", "same"), PROM_SAME_OR_NEW)
def test_a_prometheus_source_is_kept_only_while_its_selector_and_names_stay(
    before: dict[str, Any], after: dict[str, Any], same: bool
) -> None:
    first = source_for("http://p:9090", None, **before)
    second = source_for("http://p:9090", None, previous=first, **after)
    assert (second is first) is same
    assert isinstance(second, PrometheusSource)
    assert (second.selector, second.names) == (after.get("selector"), after.get("names", MetricNames()))


MATCHERS = [
    pytest.param('job="kafka"', None, '{__name__=~"x", job="kafka"}', id="the selector after kquota's own matcher"),
    pytest.param(
        'job="kafka",', ["b:7071"], '{__name__=~"x", job="kafka", instance=~"b:7071"}', id="a trailing comma dropped"
    ),
    pytest.param(None, None, '{__name__=~"x"}', id="no selector, no matcher"),
]


@pytest.mark.parametrize(("selector", "instances", "query"), MATCHERS)
def test_the_selector_joins_every_query(selector: str | None, instances: list[str] | None, query: str) -> None:
    source = PrometheusSource("http://p:9090", selector=selector, instances=instances)
    assert source._matchers('__name__=~"x"') == query


class RecordingAPI:
    """Stands in for Prometheus' HTTP API: records the queries, answers with no series."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    def instant(self, query: str, at: float | None = None) -> list[Any]:
        self.queries.append(query)
        return []


def test_names_and_selector_change_what_prometheus_is_asked_for() -> None:
    source = PrometheusSource("http://p:9090", names=KAFKA_QUOTA, selector='job="kafka"')
    api = source.api = RecordingAPI()  # type: ignore[assignment]
    assert source.read(20, now=1000.0).available
    quota, topics = api.queries
    assert quota.startswith('{__name__=~"kafka_quota_byte_rate|') and 'job="kafka"' in quota
    assert "kafka_server_quota_" not in quota
    assert 'topic!=""' in topics and 'job="kafka"' in topics
