"""Metrics readers without a broker: the text-format parser, label decoding, series grouping, the scrape
source against an in-process HTTP server, Prometheus result parsing, and the Grafana dashboard's metric names."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kquota.domain.observed import Point, QuotaResource
from kquota.metrics.exposition import Sample, parse_float, parse_line, parse_text
from kquota.metrics.http import MetricsUnavailable
from kquota.metrics.jmx import decode_client_id, decode_user
from kquota.metrics.names import MetricNames
from kquota.metrics.prometheus import PrometheusAPI, duration, prom_result
from kquota.metrics.scrape import instance_of, scrape_brokers
from kquota.metrics.series import RawSeries, counter_rate, quota_series, topic_samples
from kquota.metrics.sources import PrometheusSource, ScrapeSource, source_for
from kquota.reconcile import metrics as operator_metrics
from tests.support.pages import Page, serve_pages
from tests.support.paths import REPO as ROOT

NAMES = MetricNames()


# -- text format ---------------------------------------------------------------------------------------------------

LINES = [
    pytest.param("up 1", Sample("up", {}, 1.0), id="a bare name and value"),
    pytest.param(
        'kafka_server_quota_byte_rate{resource="Produce",user="alice",} 1.0E5',
        Sample("kafka_server_quota_byte_rate", {"resource": "Produce", "user": "alice"}, 100000.0),
        id="a trailing comma in the labels and a Java exponent",
    ),
    pytest.param(
        'm{a="x\\"y",b="back\\\\slash",c="new\\nline"} 2',
        Sample("m", {"a": 'x"y', "b": "back\\slash", "c": "new\nline"}, 2.0),
        id="escaped quote, backslash and newline in label values",
    ),
    pytest.param(
        'm{clientId="\\"c,1=x\\"",resource="Fetch"} 3',
        Sample("m", {"clientId": '"c,1=x"', "resource": "Fetch"}, 3.0),
        id="a JMX-quoted client id keeps its quotes and the comma inside",
    ),
    pytest.param('m{a="}{,="} 4', Sample("m", {"a": "}{,="}, 4.0), id="braces, commas and = inside a value"),
    pytest.param("m 5 1712345678901", Sample("m", {}, 5.0, 1712345678901), id="a millisecond timestamp"),
    pytest.param("m 6 1712345678.5", Sample("m", {}, 6.0, 1712345678500), id="an OpenMetrics timestamp in seconds"),
    pytest.param('m{a="1"} 7 # {trace_id="x"} 1.0', Sample("m", {"a": "1"}, 7.0), id="an exemplar is ignored"),
    pytest.param('m { a = "1" , b="2" } 8', Sample("m", {"a": "1", "b": "2"}, 8.0), id="blanks around labels"),
    pytest.param('m{a="\\q"} 9', Sample("m", {"a": "\\q"}, 9.0), id="an unknown escape is kept as written"),
    pytest.param('m{a="é☃"} 10', Sample("m", {"a": "é☃"}, 10.0), id="non-ASCII label values"),
    pytest.param("ns:m_total 11", Sample("ns:m_total", {}, 11.0), id="a colon in the metric name"),
]


@pytest.mark.parametrize(("line", "expected"), LINES)
def test_parse_line(line: str, expected: Sample) -> None:
    assert parse_line(line) == expected


@pytest.mark.parametrize(
    ("text", "check"),
    [
        pytest.param("NaN", math.isnan, id="NaN"),
        pytest.param("+Inf", lambda v: v == math.inf, id="+Inf"),
        pytest.param("-Inf", lambda v: v == -math.inf, id="-Inf"),
        pytest.param("Inf", lambda v: v == math.inf, id="Inf without sign"),
        pytest.param("-0.5e-3", lambda v: v == -0.0005, id="negative exponent"),
    ],
)
def test_special_values(text: str, check: Any) -> None:
    assert check(parse_float(text))
    assert check(parse_line(f"m {text}").value)


@pytest.mark.parametrize(
    "line",
    [
        pytest.param('m{a="1"', id="unterminated label set"),
        pytest.param('m{a="1} 2', id="unterminated label value"),
        pytest.param("m{a=1} 2", id="unquoted label value"),
        pytest.param('m{1a="x"} 2', id="label name starting with a digit"),
        pytest.param("m", id="no value"),
        pytest.param("m abc", id="value not a number"),
        pytest.param("m 1_000", id="underscores Python would accept"),
        pytest.param('m{a="1"}2', id="no blank before the value"),
        pytest.param('m{a="1" b="2"} 3', id="missing comma between labels"),
        pytest.param("9m 1", id="name starting with a digit"),
    ],
)
def test_malformed_lines_raise(line: str) -> None:
    with pytest.raises(ValueError):
        parse_line(line)


PAGE = """\
# HELP kafka_server_quota_byte_rate Tracking byte-rate per user/client-id
# TYPE kafka_server_quota_byte_rate gauge
kafka_server_quota_byte_rate{resource="Produce",user="alice",} 100.0
kafka_server_quota_throttle_time{resource="Produce",user="alice",} NaN
jvm_memory_bytes_used{area="heap",} 1.0E8
this line is broken {
kafka_server_quota_throttle_time{resource="Fetch",clientId="app"} 12.5\r

# EOF
"""


def test_parse_text_skips_comments_blank_lines_and_broken_lines() -> None:
    samples = parse_text(PAGE)
    assert [s.name for s in samples] == [
        "kafka_server_quota_byte_rate",
        "kafka_server_quota_throttle_time",
        "jvm_memory_bytes_used",
        "kafka_server_quota_throttle_time",
    ]
    assert math.isnan(samples[1].value)
    assert samples[3].labels == {"resource": "Fetch", "clientId": "app"}


def test_parse_text_keeps_only_wanted_prefixes() -> None:
    assert {s.name for s in parse_text(PAGE, prefixes=("kafka_server_quota_",))} == {
        "kafka_server_quota_byte_rate",
        "kafka_server_quota_throttle_time",
    }


def test_parse_text_strict_reports_the_line() -> None:
    with pytest.raises(ValueError, match="line 6"):
        parse_text(PAGE, strict=True)


# -- label decoding ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "user"),
    [
        pytest.param("alice", "alice", id="a plain name is unchanged"),
        pytest.param("CN%3Dapp%2COU%3Dx%3Dy", "CN=app,OU=x=y", id="a TLS distinguished name"),
        pytest.param("user%20with%20space", "user with space", id="a space"),
        pytest.param("%3Cdefault%3E", "<default>", id="the user literally named <default>"),
        pytest.param("a%2Ab", "a*b", id="an asterisk Kafka encodes for JMX"),
        pytest.param("%E2%98%83", "☃", id="UTF-8"),
    ],
)
def test_decode_user(raw: str, user: str) -> None:
    assert decode_user(raw) == user


@pytest.mark.parametrize(
    ("raw", "client"),
    [
        pytest.param("app-1.x_y%", "app-1.x_y%", id="allowed characters stay unquoted"),
        pytest.param('"c,1=x"', "c,1=x", id="quoted because of comma and equals"),
        pytest.param('"a\\"b"', 'a"b', id="an escaped quote inside"),
        pytest.param('"a\\\\b"', "a\\b", id="an escaped backslash inside"),
        pytest.param('"a\\*b\\?"', "a*b?", id="escaped pattern characters"),
        pytest.param('"line\\nbreak"', "line\nbreak", id="an escaped newline"),
        pytest.param('"', '"', id="a lone quote is not a quoted value"),
    ],
)
def test_decode_client_id(raw: str, client: str) -> None:
    assert decode_client_id(raw) == client


# -- grouping ------------------------------------------------------------------------------------------------------


def _raw(name: str, labels: dict[str, str], *points: tuple[float, float], broker: str = "b1:7071") -> RawSeries:
    return RawSeries(broker, name, labels, points)


def test_quota_series_groups_attributes_of_one_bucket_by_time() -> None:
    raw = [
        _raw("kafka_server_quota_byte_rate", {"resource": "Produce", "user": "CN%3Da"}, (1, 10), (2, 20)),
        _raw("kafka_server_quota_throttle_time", {"resource": "Produce", "user": "CN%3Da"}, (1, math.nan), (2, 5)),
        _raw("kafka_server_quota_request_time", {"resource": "Request", "clientId": '"x,y"'}, (2, 0.5)),
        _raw("kafka_server_quota_tokens", {"resource": "ControllerMutation", "user": "u", "clientId": "c"}, (2, 9)),
        _raw(
            "kafka_server_quota_mutation_rate", {"resource": "ControllerMutation", "user": "u", "clientId": "c"}, (2, 1)
        ),
        _raw("kafka_server_quota_byte_rate", {"resource": "Bogus", "user": "u"}, (2, 1)),
        _raw("kafka_server_quota_queue_size", {"resource": "Produce"}, (2, 1)),
        _raw("jvm_threads", {}, (2, 1)),
    ]
    series = {(s.resource, s.user, s.client_id): s for s in quota_series(raw, NAMES)}
    assert set(series) == {
        (QuotaResource.PRODUCE, "CN=a", None),
        (QuotaResource.REQUEST, None, "x,y"),
        (QuotaResource.CONTROLLER_MUTATION, "u", "c"),
    }
    produce = series[(QuotaResource.PRODUCE, "CN=a", None)]
    assert produce.points[0].t == 1 and produce.points[0].activity == 10
    assert produce.points[0].throttle_ms is not None and math.isnan(produce.points[0].throttle_ms)
    assert produce.points[1] == Point(2, 5, 20, None)
    assert series[(QuotaResource.REQUEST, None, "x,y")].points == (Point(2, None, 0.5, None),)
    assert series[(QuotaResource.CONTROLLER_MUTATION, "u", "c")].points == (Point(2, None, 1, 9),)


def test_empty_labels_count_as_missing() -> None:
    raw = [_raw("kafka_server_quota_byte_rate", {"resource": "Fetch", "user": "", "clientId": "c"}, (1, 1))]
    (series,) = quota_series(raw, NAMES)
    assert (series.user, series.client_id) == (None, "c")


@pytest.mark.parametrize(
    ("points", "start", "rate"),
    [
        pytest.param([(0, 100), (10, 200)], 5, 10.0, id="from the baseline before the window to the newest"),
        pytest.param([(0, 100), (4, 140), (10, 200)], 5, 60 / 6, id="only the last reading before the window counts"),
        pytest.param([(10, 200)], 5, None, id="one reading is not enough"),
        pytest.param([(0, 100), (5, 150), (10, 20)], 0, (50 + 20) / 10, id="a reset counts from zero"),
        pytest.param([(0, 100), (10, math.nan)], 0, None, id="NaN readings are skipped"),
    ],
)
def test_counter_rate(points: list[tuple[float, float]], start: float, rate: float | None) -> None:
    got = counter_rate(points, start)
    assert got == pytest.approx(rate) if rate is not None else got is None


def test_topic_samples_prefer_counter_rate_and_fall_back_to_one_minute_rate() -> None:
    raw = [
        _raw(NAMES.bytes_in_total, {"topic": "t"}, (0, 0), (10, 1000)),
        _raw(NAMES.bytes_in_rate, {"topic": "t"}, (10, 55)),
        _raw(NAMES.bytes_out_total, {"topic": "t"}, (10, 500)),
        _raw(NAMES.bytes_out_rate, {"topic": "t"}, (10, 42)),
        _raw(NAMES.bytes_in_total, {}, (0, 0), (10, 5000)),
    ]
    (sample,) = topic_samples(raw, NAMES, start=5)
    assert (sample.topic, sample.bytes_in_rate, sample.bytes_out_rate) == ("t", 100.0, 42)


@pytest.mark.parametrize(
    ("url", "instance"),
    [
        pytest.param("http://kafka-0.kafka:7071/metrics", "kafka-0.kafka:7071", id="host and port"),
        pytest.param("http://10.0.0.1/metrics", "10.0.0.1:80", id="default http port"),
        pytest.param("https://user:pw@[::1]:9404/m", "[::1]:9404", id="IPv6 and credentials left out"),
    ],
)
def test_instance_of(url: str, instance: str) -> None:
    assert instance_of(url) == instance


def test_duration_rounds_up_to_whole_seconds() -> None:
    assert (duration(0.2), duration(60), duration(90.5)) == ("1s", "60s", "91s")


# -- scrape source against an in-process HTTP server ---------------------------------------------------------------


@pytest.fixture
def pages() -> Iterator[tuple[str, dict[str, Page]]]:
    with serve_pages() as served:
        yield served


def _page(rate: float, throttle: str) -> str:
    return (
        f'kafka_server_quota_byte_rate{{resource="Produce",user="alice",}} {rate}\n'
        f'kafka_server_quota_throttle_time{{resource="Produce",user="alice",}} {throttle}\n'
        "jvm_threads_current 40\n"
    )


def test_scrape_brokers_reports_a_dead_broker_without_failing(pages: tuple[str, dict[str, Page]]) -> None:
    base, content = pages
    content["/metrics"] = _page(1.0, "NaN")
    snap = scrape_brokers([f"{base}/metrics", f"{base}/missing", "http://127.0.0.1:1/metrics"], timeout=2)
    assert [b.ok for b in snap.brokers] == [True, False, False]
    assert snap.brokers[1].error == "HTTP 404"
    assert {s.name for s in snap.answered[0].samples} == {
        "kafka_server_quota_byte_rate",
        "kafka_server_quota_throttle_time",
        "jvm_threads_current",
    }


def test_scrape_source_builds_history_over_reads(pages: tuple[str, dict[str, Page]]) -> None:
    base, content = pages
    clock = [1000.0]
    source = ScrapeSource([f"{base}/metrics"], timeout=2, clock=lambda: clock[0])
    for t, rate, throttle in [(1000.0, 50, "NaN"), (1010.0, 150, "300.0"), (1020.0, 160, "350.0")]:
        clock[0] = t
        content["/metrics"] = _page(rate, throttle)
        reading = source.read(window=15)
    assert reading.available and reading.brokers == (instance_of(base),)
    (series,) = reading.series
    # The window starts at 1005: 1000 stays as the baseline, the latest reading before it.
    assert [p.t for p in series.points] == [1000.0, 1010.0, 1020.0]
    assert [p.activity for p in series.points] == [50, 150, 160]
    assert series.points[2].throttle_ms == 350.0
    clock[0] = 1030.0
    (series,) = source.read(window=15).series
    assert [p.t for p in series.points] == [1010.0, 1020.0, 1030.0]
    assert not any(s.name.startswith("jvm") for s in parse_text(str(content["/metrics"]), NAMES.prefixes))


def test_scrape_source_forgets_series_that_disappear(pages: tuple[str, dict[str, Page]]) -> None:
    base, content = pages
    source = ScrapeSource([f"{base}/metrics"], timeout=2)
    content["/metrics"] = _page(1, "NaN")
    assert len(source.read(60).series) == 1
    content["/metrics"] = "jvm_threads_current 40\n"
    assert source.read(60).series == ()


def test_scrape_source_with_no_answer_is_unavailable() -> None:
    reading = ScrapeSource(["http://127.0.0.1:1/metrics"], timeout=1).read(60)
    assert not reading.available
    assert reading.unreachable == ("127.0.0.1:1",)
    assert reading.error is not None and "no broker metrics endpoint answered" in reading.error


def test_sources_reject_non_http_urls() -> None:
    with pytest.raises(ValueError, match="http"):
        ScrapeSource(["file:///etc/passwd"])
    with pytest.raises(ValueError, match="http"):
        PrometheusAPI("ftp://prometheus")


def test_source_for_keeps_an_equally_configured_source() -> None:
    first = source_for(None, ["http://b:1/metrics"])
    assert isinstance(first, ScrapeSource)
    assert source_for(None, ["http://b:1/metrics"], previous=first) is first
    assert source_for(None, ["http://b:2/metrics"], previous=first) is not first
    prom = source_for("http://p:9090", ["http://b:1/metrics"], previous=first)
    assert isinstance(prom, PrometheusSource)
    assert source_for(None, None) is None


# -- Prometheus results --------------------------------------------------------------------------------------------


def test_prometheus_vector_matrix_and_scalar_results() -> None:
    vector = prom_result({"resultType": "vector", "result": [{"metric": {"user": "a"}, "value": [1712.5, "NaN"]}]})
    assert vector[0].labels == {"user": "a"} and math.isnan(vector[0].points[0][1])
    matrix = prom_result({"resultType": "matrix", "result": [{"metric": {}, "values": [[1, "1"], [2, "+Inf"]]}]})
    assert matrix[0].points == ((1.0, 1.0), (2.0, math.inf))
    assert prom_result({"resultType": "scalar", "result": [3, "4"]})[0].points == ((3.0, 4.0),)


def test_malformed_prometheus_result_is_unavailable() -> None:
    with pytest.raises(MetricsUnavailable, match="malformed"):
        prom_result({"resultType": "vector", "result": [{"metric": {}}]})


def test_unreachable_prometheus_is_an_unavailable_reading() -> None:
    reading = PrometheusSource("http://127.0.0.1:1", timeout=1).read(60)
    assert not reading.available
    assert reading.error is not None and reading.error.startswith("Prometheus:")


def test_prometheus_selector_and_instances_become_matchers() -> None:
    source = PrometheusSource("http://p:9090", selector='{job="kafka"}', instances=["10.0.0.1:7071"])
    assert source._matchers('__name__=~"x"') == '{__name__=~"x", job="kafka", instance=~"10\\\\.0\\\\.0\\\\.1:7071"}'


# -- the Grafana dashboard -----------------------------------------------------------------------------------------


def _operator_series() -> set[str]:
    """Series names the operator's /metrics exposes (prometheus_client naming rules)."""
    out: set[str] = set()
    for obj in vars(operator_metrics).values():
        kind = type(obj).__name__
        name = getattr(obj, "_name", None)
        if name is None or kind not in ("Counter", "Gauge", "Histogram"):
            continue
        if kind == "Counter":
            out.add(f"{name}_total")
        elif kind == "Histogram":
            out |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
        else:
            out.add(name)
    return out


def _strimzi_exporter_config() -> dict[str, Any]:
    """The JMX exporter configuration in deploy/strimzi's ConfigMap (its one data key)."""
    configmap = yaml.safe_load((ROOT / "deploy/strimzi/kafka-metrics-kquota.yaml").read_text())
    assert configmap["apiVersion"] == "v1" and configmap["kind"] == "ConfigMap"
    (text,) = configmap["data"].values()
    config: dict[str, Any] = yaml.safe_load(text)
    return config


def _exporter_series(rules: dict[str, Any] | None = None) -> set[str]:
    """Series names the JMX exporter rules produce: each $n in a name expanded over its capture's alternatives."""
    rules = rules or yaml.safe_load((ROOT / "harness/jmx-exporter.yaml").read_text())
    out: set[str] = set()
    for rule in rules["rules"]:
        groups = re.findall(r"\(([^()]*)\)", rule["pattern"])
        names = [rule["name"]]
        for ref in re.findall(r"\$(\d+)", rule["name"]):
            options = groups[int(ref) - 1].split("|")
            names = [n.replace(f"${ref}", o) for n in names for o in options]
        for raw in names:
            n = raw.lower().replace("-", "_")
            out.add(n + "_total" if rule.get("type") == "COUNTER" else n)
    return out


def _dashboard_exprs() -> list[str]:
    doc = json.loads((ROOT / "grafana/kquota-dashboard.json").read_text())
    exprs: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("expr", "query") and isinstance(value, str):
                    exprs.append(value)
                elif key == "query" and isinstance(value, dict) and isinstance(value.get("query"), str):
                    exprs.append(value["query"])
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(doc)
    return exprs


def test_readme_lists_every_operator_metric() -> None:
    readme = (ROOT / "README.md").read_text()
    table = set(re.findall(r"^\| `(kquota_[a-z_]+)", readme, re.MULTILINE))
    declared = {getattr(o, "_name", None) for o in vars(operator_metrics).values()} - {None}
    # prometheus_client strips _total from a counter's stored name; README shows the exposed one.
    assert {n.removesuffix("_total") for n in table} == {n for n in declared if isinstance(n, str)}


def test_exporter_rules_produce_the_names_the_readers_use() -> None:
    exported = _exporter_series()
    assert set(NAMES.quota_names) <= exported
    assert set(NAMES.topic_names) <= exported


def test_strimzi_rules_produce_the_quota_names_the_readers_use_by_default() -> None:
    config = _strimzi_exporter_config()
    # Strimzi's stock rules lower-case names; the quota rules must read the same either way.
    assert config["lowercaseOutputName"] is True
    exported = _exporter_series(config)
    assert exported == set(NAMES.quota_names)
    for rule in config["rules"]:
        assert set(rule["labels"]) <= {NAMES.resource_label, NAMES.user_label, NAMES.client_label}, rule


def test_strimzi_rules_match_only_the_quota_mbeans() -> None:
    """They go before Strimzi's generic rules: anything more they matched would leave those rules."""
    for rule in _strimzi_exporter_config()["rules"]:
        assert rule["pattern"].startswith("kafka.server<type=(Produce|Fetch|Request|ControllerMutation), "), rule


def test_dashboard_references_only_exported_metrics() -> None:
    known = _operator_series() | _exporter_series()
    exprs = _dashboard_exprs()
    assert len(exprs) >= 15
    used = {m for e in exprs for m in re.findall(r"\b(?:kquota|kafka_server)_[a-z0-9_]+", e)}
    assert used, "the dashboard queries no metric at all"
    assert used <= known, f"unknown metrics: {sorted(used - known)}"
    # Every operator metric has a panel.
    operator_bases = {re.sub(r"_(bucket|sum|count)$", "", n) for n in _operator_series()}
    used_bases = {re.sub(r"_(bucket|sum|count)$", "", n) for n in used if n.startswith("kquota_")}
    assert operator_bases == used_bases


def test_every_broker_query_of_the_dashboard_filters_by_cluster() -> None:
    """One Prometheus may scrape several Kafka clusters: each broker series is kept to the chosen ones."""
    broker_exprs = [e for e in _dashboard_exprs() if "kafka_server_" in e]
    assert len(broker_exprs) >= 9, "the broker panels and the user, client and topic variables"
    for expr in broker_exprs:
        selectors = re.findall(r"\bkafka_server_[a-z0-9_]+(\{[^}]*\})?", expr)
        assert selectors, expr
        for matchers in selectors:
            assert 'cluster=~"$cluster"' in matchers, expr
        # Summed or ranked over clusters, two clusters' users of one name would be one line.
        for grouping in re.findall(r"\bby \(([^)]*)\)", expr):
            assert "cluster" in [g.strip() for g in grouping.split(",")], expr


def test_the_dashboards_cluster_variable_lists_the_kafkaclusters() -> None:
    doc = json.loads((ROOT / "grafana/kquota-dashboard.json").read_text())
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert variables["cluster"]["query"]["query"] == "label_values(kquota_reconcile_passes_total, cluster)"
    # "All" must also match broker series without a cluster label (a Prometheus that adds none).
    assert variables["cluster"]["includeAll"] and variables["cluster"]["allValue"] == ".*"


def test_dashboard_panels_have_unique_ids_and_a_datasource() -> None:
    doc = json.loads((ROOT / "grafana/kquota-dashboard.json").read_text())
    panels = [p for p in doc["panels"] if p["type"] != "row"]
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
