"""Where the operator reads a KafkaCluster's quota metrics, and the names its exporter writes (spec.metrics)."""

from __future__ import annotations

import re
from typing import Annotated, ClassVar, Final

from pydantic import Field

from kquota.api.base import SpecModel
from kquota.api.cel import Cel, Rule
from kquota.api.fields import DURATION_PATTERN, HTTP_URL_PATTERN

WINDOW_NOT_POSITIVE: Final = "window must be a positive duration such as 60s or 5m"
LABELS_NOT_DISTINCT: Final = (
    "resourceLabel, userLabel, clientIdLabel and instanceLabel must be four different labels, and topicLabel "
    "must differ from instanceLabel: they are labels of one series"
)
PROMETHEUS_SELECTOR_INVALID: Final = (
    'prometheusSelector must be PromQL label matchers without braces, such as job="kafka-prod", namespace="kafka": '
    "each a label name, =, !=, =~ or !~, and a double-quoted value, separated by commas"
)
TOPIC_NAMES_NOT_DISTINCT: Final = (
    "bytesInTotal, bytesOutTotal, bytesInRate and bytesOutRate must be four different names"
)

#: A Prometheus metric name (the classic character set, which every exporter writes).
METRIC_NAME_PATTERN: Final = r"^[a-zA-Z_:][a-zA-Z0-9_:]*$"
#: A Prometheus label name.
LABEL_NAME_PATTERN: Final = r"^[a-zA-Z_][a-zA-Z0-9_]*$"
# PromQL label matchers as they go between the braces of a selector: name, operator, double-quoted
# value. The escapes are PromQL's (Go's) in a double-quoted string; a raw newline ends the string.
# Blanks are spelled [ \t], not \s, which is ASCII in RE2 (the API server) but Unicode in Python.
_BLANK = r"[ \t]*"
_PROMQL_STRING = r'"([^"\\\n]|\\([abfnrtv\\"]|x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[0-3][0-7]{2}))*"'
_MATCHER = rf"{_BLANK}[a-zA-Z_][a-zA-Z0-9_]*{_BLANK}(=|!=|=~|!~){_BLANK}{_PROMQL_STRING}{_BLANK}"
#: One or more label matchers separated by commas (a trailing comma allowed, as in PromQL), no braces.
PROMETHEUS_SELECTOR_PATTERN: Final = rf"^{_MATCHER}(,{_MATCHER})*(,{_BLANK})?$"

HttpUrl = Annotated[str, Field(min_length=1, max_length=2048, pattern=HTTP_URL_PATTERN)]


_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_seconds(text: str) -> float:
    """Seconds in a Go duration matching DURATION_PATTERN (``1m30s`` -> 90)."""
    return sum(float(n) * _UNITS[u] for n, u in re.findall(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)", text))


MetricName = Annotated[str, Field(min_length=1, max_length=255, pattern=METRIC_NAME_PATTERN)]
LabelName = Annotated[str, Field(min_length=1, max_length=255, pattern=LABEL_NAME_PATTERN)]


class ExporterNames(SpecModel):
    """Metric and label names as the brokers' metrics exporter writes them.

    The defaults are the names of kquota's own JMX exporter rules
    (deploy/strimzi/kafka-metrics-kquota.yaml, harness/jmx-exporter.yaml);
    ``kquota.metrics.names.MetricNames`` holds the same defaults for the
    readers, and a unit test keeps the two equal.
    """

    quota_prefix: MetricName = Field(
        "kafka_server_quota_",
        description="Prefix of the client quota metrics. kquota reads <prefix>byte_rate, <prefix>throttle_time, "
        "<prefix>request_time, <prefix>tokens and <prefix>mutation_rate: the attributes byte-rate, "
        "throttle-time, request-time, tokens and mutation-rate of the MBeans "
        "kafka.server:type=Produce|Fetch|Request|ControllerMutation,user=...,client-id=..., with '-' written "
        "as '_'. Other metrics with this prefix are ignored.",
    )
    resource_label: LabelName = Field(
        "resource",
        description="Label of a quota metric that holds its MBean's type, exactly as Kafka spells it: Produce, "
        "Fetch, Request or ControllerMutation. Series with another value are ignored.",
    )
    user_label: LabelName = Field(
        "user",
        description="Label of a quota metric that holds its MBean's user tag: the quota user as Kafka writes it, "
        "URL-encoded (CN%3Dapp for the principal CN=app). Absent or empty when the quota bucket has no user "
        "(a client-id quota).",
    )
    client_id_label: LabelName = Field(
        "clientId",
        description="Label of a quota metric that holds its MBean's client-id tag, as Kafka writes it: JMX-quoted "
        "when the client-id has characters outside [A-Za-z0-9_%. -]. Absent or empty when the quota bucket has "
        "no client-id (a user quota).",
    )
    topic_label: LabelName = Field(
        "topic",
        description="Label of the per-topic byte metrics (bytesInTotal, bytesOutTotal, bytesInRate, bytesOutRate) "
        "that holds the topic name. Series without it (the all-topics totals) are ignored.",
    )
    instance_label: LabelName = Field(
        "instance",
        description="Label that names the broker of a series read through prometheusURL: Prometheus' scrape "
        "target label (host:port), which status.observed reports per broker. Not used with brokerEndpoints, "
        "where a broker is the host:port of its endpoint.",
    )
    bytes_in_total: MetricName = Field(
        "kafka_server_brokertopicmetrics_bytesinpersec_total",
        description="Counter of the bytes produced to a topic, with topicLabel: the Count of "
        "kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=... Its rate over the window is a "
        "TopicQuota's observed bytesInPerSec.",
    )
    bytes_out_total: MetricName = Field(
        "kafka_server_brokertopicmetrics_bytesoutpersec_total",
        description="Counter of the bytes consumers fetched from a topic, with topicLabel: the Count of "
        "kafka.server:type=BrokerTopicMetrics,name=BytesOutPerSec,topic=... Its rate over the window is a "
        "TopicQuota's observed bytesOutPerSec.",
    )
    bytes_in_rate: MetricName = Field(
        "kafka_server_brokertopicmetrics_bytesinpersec_oneminuterate",
        description="Gauge of the bytes produced to a topic per second, with topicLabel: the OneMinuteRate of "
        "BytesInPerSec. Used for bytesInPerSec only while fewer than two readings of bytesInTotal exist (or "
        "when the exporter writes no bytesInTotal); without it, bytesInPerSec appears from the second reading.",
    )
    bytes_out_rate: MetricName = Field(
        "kafka_server_brokertopicmetrics_bytesoutpersec_oneminuterate",
        description="Gauge of the bytes consumers fetched from a topic per second, with topicLabel: the "
        "OneMinuteRate of BytesOutPerSec. Used for bytesOutPerSec only while fewer than two readings of "
        "bytesOutTotal exist (or when the exporter writes no bytesOutTotal).",
    )

    __rules__: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "[self.resourceLabel, self.userLabel, self.clientIdLabel, self.instanceLabel].all(x, "
            "[self.resourceLabel, self.userLabel, self.clientIdLabel, self.instanceLabel].exists_one(y, y == x))"
            " && self.topicLabel != self.instanceLabel",
            LABELS_NOT_DISTINCT,
            lambda s: (
                len({s.resource_label, s.user_label, s.client_id_label, s.instance_label}) == 4
                and s.topic_label != s.instance_label
            ),
        ),
        Rule(
            "[self.bytesInTotal, self.bytesOutTotal, self.bytesInRate, self.bytesOutRate].all(x, "
            "[self.bytesInTotal, self.bytesOutTotal, self.bytesInRate, self.bytesOutRate].exists_one(y, y == x))",
            TOPIC_NAMES_NOT_DISTINCT,
            lambda s: len({s.bytes_in_total, s.bytes_out_total, s.bytes_in_rate, s.bytes_out_rate}) == 4,
        ),
    )


class Metrics(SpecModel):
    """Where the operator reads quota metrics (throttling, usage) for the resources' status."""

    prometheus_url: HttpUrl | None = Field(
        None,
        alias="prometheusURL",
        description="Base URL of a Prometheus server that scrapes the brokers' quota metrics, e.g. "
        "http://prometheus.monitoring:9090. When set, brokerEndpoints are not read.",
    )
    broker_endpoints: list[HttpUrl] | None = Field(
        None,
        max_length=256,
        description="Metrics endpoints of the brokers' Prometheus JMX exporters, e.g. "
        "http://kafka-0.kafka:7071/metrics, scraped directly by the operator when prometheusURL is not set.",
    )
    prometheus_selector: Annotated[
        str | None,
        Cel(
            # A rule rather than a pattern: the API server quotes a failed pattern whole, and this
            # one is unreadable; the message says what is expected instead.
            Rule(
                f"self.matches(r'{PROMETHEUS_SELECTOR_PATTERN}')",
                PROMETHEUS_SELECTOR_INVALID,
                lambda v: v is None or re.fullmatch(PROMETHEUS_SELECTOR_PATTERN, v) is not None,
            )
        ),
    ] = Field(
        None,
        min_length=1,
        max_length=1024,
        description="PromQL label matchers added to every query sent to prometheusURL, as written between the "
        'braces of a selector but without them, e.g. job="kafka-prod", namespace="kafka". Set it when one '
        "Prometheus scrapes several Kafka clusters: without it, the quota series of every cluster it scrapes "
        "are read, so the same user's clients on another cluster count here. Each matcher is a label name, "
        "one of =, !=, =~ and !~, and a double-quoted value; Prometheus checks the regular expressions of =~ "
        "and !~ and reports one it rejects in status.observed. Used with prometheusURL only, not with "
        "brokerEndpoints.",
    )
    names: ExporterNames | None = Field(
        None,
        description="Metric and label names as the brokers' metrics exporter writes them, for exporter rules "
        "other than kquota's (deploy/strimzi/kafka-metrics-kquota.yaml, whose names are the defaults). A field "
        "left out keeps its default. Used with prometheusURL and brokerEndpoints alike.",
    )
    window: Annotated[
        str,
        Cel(
            # Guarded by the pattern so a malformed value reports only the pattern, not a CEL error.
            Rule(
                f"!self.matches(r'{DURATION_PATTERN}') || duration(self) > duration('0s')",
                WINDOW_NOT_POSITIVE,
                lambda v: re.fullmatch(DURATION_PATTERN, v) is None or duration_seconds(v) > 0,
            )
        ),
    ] = Field(
        "60s",
        max_length=64,
        pattern=DURATION_PATTERN,
        description="Time over which throttling is looked for, as a duration (60s, 5m, 1h). Usage (rates, "
        "usedPercent, NearLimit) is the highest of the broker's own rate readings over its latest quota window "
        "(11 s, and at least the latest two readings): each is already a rate over that window, and a single one "
        "can read a tenth of a throttled consumer's rate.",
    )
    near_limit_percent: int = Field(
        80,
        ge=1,
        le=100,
        description="Usage at or above this percent of a quota sets the NearLimit condition (for a "
        "TopicQuota: of its budget) in the resources' status.",
    )
