"""``kquota plan --impact`` on Spark, without a cluster: the planted history against an independent numpy oracle.

The plan's before and after quotas are given directly here; tests/spark/test_plan_impact.py runs the
whole command against the real API server and broker.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from kquota.advisor import collect
from kquota.advisor.impact import ImpactOptions, assess
from kquota.advisor.report.impact import Impact, ImpactRow, cells, md, render_markdown
from kquota.advisor.report.page import render_impact_html
from kquota.advisor.transform.entities import usage_long
from kquota.advisor.transform.impact import MAPPING_SCHEMA, destination_traffic
from kquota.domain.entities import Entity
from tests.spark.helpers import at, clients
from tests.support.impact import MI, expected_impact, names, planted_quotas, write_history
from tests.support.quotas import C, P

pytestmark = pytest.mark.spark


def check_against_oracle(impact: Impact, expected: dict[tuple[str, str, str], dict[str, Any]]) -> None:
    """Exactly the planted entities, each figure the oracle's (the throttle time to rounding: numpy sums in
    another order)."""
    got = {(r.verdict, r.entity, r.key): r for r in impact.rows}
    assert sorted(got) == sorted(expected)
    for key, want in expected.items():
        row = got[key]
        assert (row.share, row.p99, row.samples) == (want["share"], want["p99"], want["samples"]), key
        if key[0] != "un-throttles":
            assert row.throttle_seconds_per_hour == pytest.approx(want["throttle_seconds_per_hour"], rel=1e-12), key


def test_the_planted_change_throttles_and_frees_exactly_the_planted_entities(spark: Any, tmp_path: Path) -> None:
    n = names("imp")
    rows = write_history(tmp_path / "history.csv", n)
    before, after = planted_quotas(n)
    changed = [(Entity.for_pair(n["bob"], "app"), C), (Entity.for_user(n["alice"]), P)]
    impact = assess(spark, before, after, ImpactOptions(str(tmp_path / "history.csv"), progress=False), changed)
    check_against_oracle(impact, expected_impact(rows, n, removals=True))
    assert (impact.samples, impact.brokers) == (len(rows), 2)
    assert len(impact.over_threshold()) == 4
    # gina's row adds up her user bucket and the etl pair the plan removes.
    gina = next(r for r in impact.rows if r.entity == f"users/{n['gina']}")
    assert gina.buckets == (f"users/{n['gina']}", f"users/{n['gina']}/clients/etl")
    # bob's pair gets a consumer key no client in the history uses: said, not silently skipped.
    assert f"users/{n['bob']}/clients/app consumer_byte_rate: no client in the usage history" in impact.notes[0]

    # The same numbers in the markdown table and in the HTML section, one line per entity.
    markdown = render_markdown(impact)
    table = [line for line in markdown.splitlines() if line.startswith(("| throttles", "| un-throttles"))]
    assert len(table) == 6
    page = render_impact_html(impact)
    for row in impact.rows:
        c = cells(row)
        figures = [c["share"], c["p99"], c["ratio"], c["throttle"]]
        if row.verdict != "within":
            [line] = [line for line in table if f"| {md(row.entity)} | {md(row.key)} |" in line]
            assert " | ".join(md(f) for f in figures) in line, line
        assert all(html.escape(f) in page for f in figures), (row.entity, figures)


def test_a_destinations_figures_are_the_same_bits_whatever_the_partitioning(spark: Any) -> None:
    # Three buckets of one user land in one destination; their rates added in another order would
    # change the total's last bits, and with it the share above a limit set at one total exactly.
    rows = [
        {"timestamp": at(10 * i), "broker": b, "user": "u", "client_id": c, "produce_byte_rate": v}
        for i in range(300)
        for b in ("b0", "b1")
        for c, v in (("x", 0.1 * (i + 1)), ("y", 0.2 * (i + 1)), ("z", 1e16 / (i + 1)))
    ]
    mapping = spark.createDataFrame(
        [("produce", "u", c, "dest", None, 1e16 / 7 + 0.3) for c in ("x", "y", "z")], MAPPING_SCHEMA
    )
    usage = usage_long(clients(spark, rows))
    figures = {
        parts: destination_traffic(usage.repartition(parts), mapping).collect()[0].asDict() for parts in (1, 3, 7)
    }
    assert figures[1] == figures[3] == figures[7]
    assert figures[1]["samples"] == 600


def test_the_markdown_cell_of_a_hostile_name_stays_one_cell() -> None:
    row = ImpactRow(
        verdict="throttles",
        key="producer_byte_rate",
        entity="users/a|b`*_[x](y)<script>\x1b[31m",
        limit_now=2.0 * MI,
        limit_now_from="users/a",
        limit_after=MI,
        limit_after_from="users/a",
        samples=10,
        share=0.5,
        p99=1.5 * MI,
        p99_ratio=1.5,
        throttle_seconds_per_hour=900.0,
    )
    impact = Impact([row], 0.0, "history.csv (csv)", 10, 1, "2024-05-01T00:00:00", "2024-05-01T00:01:30")
    [line] = [line for line in render_markdown(impact).splitlines() if line.startswith("| throttles")]
    # Ten columns, so eleven unescaped pipes; no raw markup or terminal escape gets through.
    assert line.replace("\\|", "").count("|") == 11
    assert "<script>" not in line and "\x1b" not in line and "\\x1b" in line
    assert "| 50% above | 1.5 MiB/s | 1.50x | 900.0 s/h | 10 |" in line


def prometheus_serving(rows: list[dict[str, Any]]) -> Any:
    """A Prometheus API transport answering range queries with the history's series (as the JMX exporter names
    them, one instance per broker)."""
    columns = {
        (collect.QUOTA_BYTE_RATE, "Produce"): "produce_byte_rate",
        (collect.QUOTA_BYTE_RATE, "Fetch"): "fetch_byte_rate",
        (collect.QUOTA_THROTTLE_TIME, "Produce"): "produce_throttle_time_ms",
        (collect.QUOTA_THROTTLE_TIME, "Fetch"): "fetch_throttle_time_ms",
    }

    def fetch(url: str, timeout: float) -> bytes:
        query = urllib.parse.parse_qs(urllib.parse.urlparse(url).query)["query"][0]
        series: dict[tuple[str, ...], list[list[Any]]] = {}
        for (metric, resource), column in columns.items():
            if metric != query:
                continue
            for r in rows:
                if r[column] == "":
                    continue
                labels = ("resource", resource, "user", r["user"], "instance", r["broker"])
                labels += ("clientId", r["client_id"]) if r["client_id"] else ()
                series.setdefault(labels, []).append([r["timestamp"], str(r[column])])
        result = [
            {"metric": dict(zip(labels[::2], labels[1::2], strict=True)), "values": values}
            for labels, values in series.items()
        ]
        return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}).encode()

    return fetch


def test_a_prometheus_range_gives_the_same_answer_as_the_files(spark: Any, tmp_path: Path) -> None:
    n = names("prom")
    rows = write_history(tmp_path / "history.csv", n)
    before, after = planted_quotas(n)
    end = dt.datetime.fromtimestamp(max(r["timestamp"] for r in rows), dt.UTC)
    options = ImpactOptions(
        "http://prometheus:9090", since=dt.timedelta(hours=1), step=10, now=end, progress=False,
        fetch=prometheus_serving(rows),
    )  # fmt: skip
    impact = assess(spark, before, after, options)
    assert impact.source.startswith("Prometheus http://prometheus:9090, ")
    check_against_oracle(impact, expected_impact(rows, n, removals=True))
