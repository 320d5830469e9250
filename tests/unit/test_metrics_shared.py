"""The operator and the advisor read metrics through one stack: the same principal, the same size cap.

Each case goes over real HTTP (an in-process server) through both readers as
they run: the operator's ScrapeSource and PrometheusSource, and the advisor's
``kquota collect`` scraper and Prometheus range reader.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator

import pytest

from kquota.advisor import collect
from kquota.metrics import http
from kquota.metrics.sources import PrometheusSource, ScrapeSource
from tests.support.pages import Page, serve_pages

T0 = dt.datetime(2024, 5, 1, tzinfo=dt.UTC)
T1 = T0 + dt.timedelta(minutes=1)

#: Label values as Kafka and the JMX exporter write them -> the principal and client.id they name.
ENCODED = [
    pytest.param("CN%3Dapp%2COU%3Dx%20y", None, ("CN=app,OU=x y", None), id="a TLS distinguished name with a space"),
    pytest.param("a%2Ab", None, ("a*b", None), id="an asterisk Kafka's Sanitizer encodes for JMX"),
    pytest.param("%E2%98%83", None, ("\N{SNOWMAN}", None), id="UTF-8"),
    pytest.param("a+b", None, ("a b", None), id="a plus, a space to Kafka's URLDecoder"),
    pytest.param('"q%3Dx"', None, ("q=x", None), id="a JMX-quoted user label"),
    pytest.param(
        "%3Cdefault%3E", '"c,1=x"', ("<default>", "c,1=x"), id="a user literally <default> and a quoted client"
    ),
]


@pytest.fixture(scope="module")
def pages() -> Iterator[tuple[str, dict[str, Page]]]:
    with serve_pages() as served:
        yield served


def _labels(user: str, client: str | None) -> dict[str, str]:
    labels = {"resource": "Produce", "user": user}
    if client is not None:
        labels["clientId"] = client
    return labels


def _quoted(value: str) -> str:
    """A label value as the text format writes it: backslash and double quote escaped."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _exposition(user: str, client: str | None) -> str:
    pairs = ",".join(f"{k}={_quoted(v)}" for k, v in _labels(user, client).items())
    return f"kafka_server_quota_byte_rate{{{pairs},}} 1024.0\njvm_threads_current 40\n"


def _promql_answer(user: str, client: str | None, t: float) -> Page:
    def answer(query: dict[str, list[str]]) -> tuple[str, bytes]:
        result = []
        if "kafka_server_quota" in query["query"][0]:
            metric = {"__name__": "kafka_server_quota_byte_rate", "instance": "b1:7071", **_labels(user, client)}
            result = [{"metric": metric, "values": [[t, "1024"]]}]
        doc = {"status": "success", "data": {"resultType": "matrix", "result": result}}
        return "application/json", json.dumps(doc).encode()

    return answer


def _advisor_scrape(url: str) -> collect.ScrapeResult:
    clock = [T0.timestamp()]

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    return collect.scrape([url], duration=1, interval=1, timeout=5, clock=lambda: clock[0], sleep=sleep)


@pytest.mark.parametrize(("user", "client", "expected"), ENCODED)
def test_a_scraped_principal_reads_the_same_to_the_operator_and_the_advisor(
    pages: tuple[str, dict[str, Page]], user: str, client: str | None, expected: tuple[str, str | None]
) -> None:
    base, content = pages
    content["/metrics"] = _exposition(user, client)
    reading = ScrapeSource([f"{base}/metrics"], timeout=5).read(window=60)
    operator = {(s.user, s.client_id) for s in reading.series}
    advisor = {(r["user"], r["client_id"]) for r in _advisor_scrape(f"{base}/metrics").clients}
    assert operator == advisor == {expected}


@pytest.mark.parametrize(("user", "client", "expected"), ENCODED)
def test_a_principal_from_prometheus_reads_the_same_to_the_operator_and_the_advisor(
    pages: tuple[str, dict[str, Page]], user: str, client: str | None, expected: tuple[str, str | None]
) -> None:
    base, content = pages
    now = T0.timestamp() + 60
    content["/api/v1/query"] = content["/api/v1/query_range"] = _promql_answer(user, client, now - 30)
    reading = PrometheusSource(base, timeout=5).read(window=60, now=now)
    assert reading.available, reading.error
    operator = {(s.user, s.client_id) for s in reading.series}
    ((clients, _),) = collect.prometheus_rows(base, T0, T1, 60, timeout=5)
    advisor = {(r["user"], r["client_id"]) for r in clients}
    assert operator == advisor == {expected}


LIMIT = 4096


@pytest.fixture
def small_cap(monkeypatch: pytest.MonkeyPatch) -> int:
    """The response cap lowered so a test need not serve 64 MiB; every reader takes it from kquota.metrics.http."""
    monkeypatch.setattr(http, "MAX_RESPONSE_BYTES", LIMIT)
    return LIMIT


def _padded(page: str, size: int) -> str:
    return page + "#" * (size - len(page.encode()) - 1) + "\n"


def test_a_metrics_page_over_the_cap_is_refused_by_the_advisor_as_by_the_operator(
    pages: tuple[str, dict[str, Page]], small_cap: int
) -> None:
    base, content = pages
    page = _exposition("alice", None)
    content["/fits"] = _padded(page, small_cap)
    content["/big"] = _padded(page, small_cap + 1)
    assert [r["user"] for r in _advisor_scrape(f"{base}/fits").clients] == ["alice", "alice"]
    assert ScrapeSource([f"{base}/fits"], timeout=5).read(window=60).available
    with pytest.raises(collect.CollectError, match=f"larger than {small_cap} bytes"):
        _advisor_scrape(f"{base}/big")
    reading = ScrapeSource([f"{base}/big"], timeout=5).read(window=60)
    assert not reading.available
    assert f"larger than {small_cap} bytes" in (reading.error or "")


def test_a_prometheus_answer_over_the_cap_is_refused_by_the_advisor_as_by_the_operator(
    pages: tuple[str, dict[str, Page]], small_cap: int
) -> None:
    base, content = pages
    big = b'{"status": "success", "data": {"resultType": "matrix", "result": []}}'.ljust(small_cap + 1)
    content["/api/v1/query"] = content["/api/v1/query_range"] = lambda _query: ("application/json", big)
    with pytest.raises(collect.CollectError, match=f"larger than {small_cap} bytes"):
        next(collect.prometheus_rows(base, T0, T1, 60, timeout=5))
    reading = PrometheusSource(base, timeout=5).read(window=60, now=T0.timestamp())
    assert not reading.available
    assert f"larger than {small_cap} bytes" in (reading.error or "")
