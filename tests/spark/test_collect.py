"""``kquota collect``: parsing the exporter's text, decoding Kafka's label encodings, turning scrapes into samples."""

from __future__ import annotations

import datetime as dt
import json
import math
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from kquota.advisor import collect
from kquota.metrics.exposition import parse_text
from kquota.metrics.jmx import decode_client_id, decode_user
from tests.spark.helpers import NOW, T0

pytestmark = pytest.mark.spark

EXPOSITION = r"""
# HELP kafka_server_quota_byte_rate Tracking byte-rate per user/client-id
# TYPE kafka_server_quota_byte_rate gauge
kafka_server_quota_byte_rate{resource="Produce",user="alice",} 1024.5
kafka_server_quota_byte_rate{resource="Fetch",user="alice",} 2048.0
kafka_server_quota_byte_rate{resource="Produce",user="CN%3Dapp%2COU%3Dx",clientId="\"c,1=x\"",} 10.0
kafka_server_quota_byte_rate{resource="Fetch",clientId="reporting",} 99.0
kafka_server_quota_throttle_time{resource="Produce",user="alice",} 12.5
kafka_server_quota_throttle_time{resource="Fetch",user="alice",} NaN
kafka_server_quota_request_time{resource="Request",user="alice",} 3.25
kafka_server_brokertopicmetrics_bytesinpersec_total{topic="orders",} 1000.0
kafka_server_brokertopicmetrics_bytesoutpersec_total{topic="orders",} 500.0
kafka_server_brokertopicmetrics_bytesinpersec_total 1000.0
jvm_memory_bytes_used{area="heap",} 1.0E8
"""


def test_the_text_format_is_parsed_with_escapes_and_nan() -> None:
    samples = parse_text(EXPOSITION, strict=True)
    assert len(samples) == 11
    quoted = samples[2]
    assert quoted.labels == {"resource": "Produce", "user": "CN%3Dapp%2COU%3Dx", "clientId": '"c,1=x"'}
    assert math.isnan(samples[5].value)
    assert samples[-1].value == 1e8
    only = collect.parse_page(EXPOSITION, [collect.QUOTA_REQUEST_TIME])
    assert [s.value for s in only] == [3.25]


def test_a_malformed_line_of_a_collected_metric_fails_the_collection() -> None:
    page = 'jvm_x{a="1"} 1\nkafka_server_quota_byte_rate{resource="Produce" 1\n'
    with pytest.raises(ValueError, match="line 2"):
        collect.parse_page(page, [collect.QUOTA_BYTE_RATE])


def test_kafka_label_encodings_are_undone() -> None:
    assert decode_user("CN%3Dapp%2COU%3Dx") == "CN=app,OU=x"
    assert decode_user("user%20with%20space") == "user with space"
    assert decode_user("%3Cdefault%3E") == "<default>"
    assert decode_client_id('"c,1=x"') == "c,1=x"
    assert decode_client_id(r'"a\"b\\c\*"') == 'a"b\\c*'
    assert decode_client_id("plain") == "plain"


def test_quota_gauges_become_one_client_row_per_bucket() -> None:
    rows = collect.client_rows(parse_text(EXPOSITION), "1", T0)
    by_key = {(r["user"], r["client_id"]): r for r in rows}
    assert set(by_key) == {("alice", None), ("CN=app,OU=x", "c,1=x"), (None, "reporting")}
    alice = by_key[("alice", None)]
    assert (alice["produce_byte_rate"], alice["fetch_byte_rate"], alice["request_time"]) == (1024.5, 2048.0, 3.25)
    # NaN throttle time ("never throttled") is a missing value.
    assert (alice["produce_throttle_time_ms"], alice["fetch_throttle_time_ms"]) == (12.5, None)
    assert alice["timestamp"] == T0 and alice["broker"] == "1"


def test_topic_rates_come_from_counter_differences_and_resets_give_no_sample() -> None:
    before = {"orders": (1000.0, 500.0), "logs": (5000.0, 0.0)}
    after = {"orders": (3000.0, 1500.0), "logs": (10.0, 0.0), "new": (5.0, 0.0)}
    rows = collect.topic_rates("1", T0, 10.0, before, after)
    assert [(r["topic"], r["bytes_in_rate"], r["bytes_out_rate"]) for r in rows] == [("orders", 200.0, 100.0)]


def test_scrape_reads_every_target_each_round_with_one_timestamp_per_round() -> None:
    counters = {"b1": 0.0, "b2": 0.0}
    fake_now = [T0.timestamp()]

    def fetch(url: str, timeout: float) -> str:
        broker = urllib.parse.urlparse(url).netloc
        counters[broker] += 1000.0
        return (
            f'kafka_server_quota_byte_rate{{resource="Produce",user="u-{broker}",}} 7.0\n'
            f'kafka_server_brokertopicmetrics_bytesinpersec_total{{topic="t",}} {counters[broker]}\n'
        )

    def sleep(seconds: float) -> None:
        fake_now[0] += seconds

    result = collect.scrape(
        ["http://b1/metrics", "two=http://b2/metrics"],
        duration=10,
        interval=5,
        fetch=fetch,
        clock=lambda: fake_now[0],
        sleep=sleep,
    )
    assert result.rounds == 3
    assert len(result.clients) == 6
    assert {r["broker"] for r in result.clients} == {"b1", "two"}
    assert len({r["timestamp"] for r in result.clients}) == 3
    # Two differences per broker, 1000 bytes over 5 s each.
    assert [r["bytes_in_rate"] for r in result.topics] == [200.0] * 4


def test_prometheus_range_queries_are_chunked_and_joined_by_timestamp_and_instance() -> None:
    urls: list[str] = []
    t = T0.timestamp()

    def fetch(url: str, timeout: float) -> bytes:
        urls.append(url)
        query = urllib.parse.parse_qs(urllib.parse.urlparse(url).query)["query"][0]
        if query == collect.QUOTA_BYTE_RATE:
            result = [
                {
                    "metric": {"resource": "Produce", "user": "alice", "instance": "b1:7071"},
                    "values": [[t, "100"], [t + 60, "200"]],
                }
            ]
        elif query.startswith("rate(kafka_server_brokertopicmetrics_bytesinpersec_total"):
            result = [{"metric": {"topic": "orders", "instance": "b1:7071"}, "values": [[t, "5"]]}]
        else:
            result = []
        return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}).encode()

    chunks = list(collect.prometheus_rows("http://prom:9090", T0, T0 + dt.timedelta(seconds=60), 60, fetch=fetch))
    assert len(chunks) == 1
    clients, topics = chunks[0]
    assert [(r["broker"], r["user"], r["produce_byte_rate"]) for r in clients] == [
        ("b1:7071", "alice", 100.0),
        ("b1:7071", "alice", 200.0),
    ]
    assert [(r["topic"], r["bytes_in_rate"], r["bytes_out_rate"]) for r in topics] == [("orders", 5.0, 0.0)]
    assert len(urls) == 5
    assert list(collect.chunks(0, 100, 10, max_points=4)) == [(0, 30), (40, 70), (80, 100)]


def test_prometheus_errors_name_the_query() -> None:
    def fetch(url: str, timeout: float) -> bytes:
        return json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error"}).encode()

    with pytest.raises(collect.CollectError, match=r"kafka_server_quota_byte_rate.*bad_data: parse error"):
        next(collect.prometheus_rows("http://prom:9090", T0, NOW, 60, fetch=fetch))


def test_collected_parquet_is_valid_advisor_input(spark: Any, tmp_path: Path) -> None:
    from kquota.advisor import extract, validate

    rows = collect.client_rows(parse_text(EXPOSITION), "1", T0)
    topics = collect.topic_rates("1", T0, 10.0, {"orders": (0.0, 0.0)}, {"orders": (100.0, 50.0)})
    collect.write_parquet(spark, rows, topics, tmp_path)
    inputs = extract.locate(str(tmp_path), None, None)
    assert inputs.format == "parquet" and inputs.topics == str(tmp_path / "topics")
    _, report = validate.validate_clients(extract.read(spark, inputs.clients, "parquet"), now=NOW)
    assert report.rows_valid == 3
    topic_clean, _ = validate.validate_topics(extract.read(spark, inputs.topics or "", "parquet"), now=NOW)
    assert topic_clean.count() == 1
