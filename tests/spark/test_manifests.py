"""Manifests, names and quantities the advisor writes, and its report's text: valid, safe and readable."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from kquota.advisor import current
from kquota.advisor.manifests import client_quota_manifests, quantity, slug, topic_quota_manifests, write_manifests
from kquota.advisor.report.page import render_html
from kquota.advisor.report.summary import summarise
from kquota.advisor.units import human_bytes
from kquota.api import ClientQuota, TopicQuota, byte_rate

pytestmark = pytest.mark.spark

DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (1024, "1Ki"),
        (1280, "1.25Ki"),
        (5 * 2**20, "5Mi"),
        (1310720, "1.25Mi"),
        (2**30, "1Gi"),
        (1000 * 2**20, "1000Mi"),
        (1300, 1300),
        (1000, 1000),
        (3 * 2**40, "3Ti"),
    ],
)
def test_quantity_is_an_exact_binary_quantity_or_the_integer(n: int, expected: int | str) -> None:
    assert quantity(n) == expected
    assert byte_rate(quantity(n)) == n


@pytest.mark.parametrize(
    ("name", "pattern"),
    [
        ("alice", r"^alice$"),
        ("CN=app,OU=x", r"^cn-app-ou-x-[0-9a-f]{8}$"),
        ("Alice", r"^alice-[0-9a-f]{8}$"),  # lower-casing loses information: hashed
        ("Ålice ünïcode", r"^lice-n-code-[0-9a-f]{8}$"),
        ("日本語", r"^x-[0-9a-f]{8}$"),
        ("a" * 80, r"^a{30}-[0-9a-f]{8}$"),
    ],
)
def test_slug_is_a_dns_label_part_with_a_hash_when_lossy(name: str, pattern: str) -> None:
    assert re.match(pattern, slug(name))


def rec(
    kind: str,
    user: str | None,
    client_id: str | None,
    resource: str,
    quota: float,
    *,
    default: bool = False,
    reason: str = "outlier",
) -> dict[str, Any]:
    return {
        "kind": kind,
        "user": user,
        "client_id": client_id,
        "resource": resource,
        "is_default": default,
        "quota": quota,
        "basis": quota / 1.2,
        "population": 3 if default else None,
        "reason": "default" if default else reason,
        "throttled_share": 0.0,
        "demand_capped": False,
    }


HOSTILE = ["CN=app,OU=x", "Ålice", "alice", "Alice", "user with space", "<default>", "a--client-b"]


def test_client_quota_manifests_validate_and_keep_the_real_principal() -> None:
    recs = [
        rec("user", None, None, "produce", 400 * 1024, default=True),
        rec("user", None, None, "request", 25.0, default=True),
    ]
    recs += [rec("user", u, None, "produce", 6 * 2**20) for u in HOSTILE]
    recs += [rec("client-id", None, "c,1=x", "fetch", 2**20), rec("user+client-id", "a", "client-b", "fetch", 2**20)]
    manifests = client_quota_manifests(recs, namespace="team-a", cluster_ref="prod")
    names = [m["metadata"]["name"] for m in manifests]
    assert len(set(names)) == len(names) == 2 - 1 + len(HOSTILE) + 2
    for manifest in manifests:
        resource = ClientQuota.model_validate(manifest)
        assert DNS1123.match(manifest["metadata"]["name"]) and len(manifest["metadata"]["name"]) <= 63
        assert resource.metadata.namespace == "team-a"
        entity = resource.spec.entity
        if entity.user is not None and entity.user.name is not None:
            assert manifest["metadata"]["annotations"]["kquota.io/user"] == entity.user.name
    by_user = {m["spec"]["entity"].get("user", {}).get("name"): m for m in manifests}
    assert by_user["CN=app,OU=x"]["spec"]["quota"] == {"producerByteRate": "6Mi"}
    assert by_user["<default>"]["spec"]["entity"] == {"user": {"name": "<default>"}}
    default = next(m for m in manifests if m["metadata"]["name"] == "default-user")
    assert default["spec"] == {
        "clusterRef": "prod",
        "entity": {"user": {"default": True}},
        "quota": {"producerByteRate": "400Ki", "requestPercentage": 25.0},
    }


def test_topic_quota_manifests_validate_and_skip_directions_without_traffic() -> None:
    topics = [
        {
            "topic": "orders",
            "in_p99": 6.0 * 2**20,
            "out_p99": 0.0,
            "produce_budget": 8.0 * 2**20,
            "consume_budget": 1024.0,
        },
        {"topic": "Logs.App_1", "in_p99": 1.0, "out_p99": 2.0, "produce_budget": 1024.0, "consume_budget": 1024.0},
        {"topic": "idle", "in_p99": 0.0, "out_p99": 0.0, "produce_budget": 1024.0, "consume_budget": 1024.0},
    ]
    brokers = [
        {"topic": "orders", "broker": "1", "produce_allowance": 5592405, "consume_allowance": 682, "basis": "leaders"}
    ]
    manifests = topic_quota_manifests(topics, brokers, namespace="team-a")
    assert [m["spec"]["topic"]["name"] for m in manifests] == ["Logs.App_1", "orders"]
    for manifest in manifests:
        TopicQuota.model_validate(manifest)
    orders = manifests[1]
    assert orders["spec"]["budget"] == {"producerByteRate": "8Mi"}
    assert orders["spec"]["enforcement"] == "Monitor"
    assert '"produce": 5592405' in orders["metadata"]["annotations"]["kquota.io/advisor-broker-allowances"]


def test_write_manifests_writes_one_file_per_resource_and_a_kustomization(tmp_path: Path) -> None:
    manifests = client_quota_manifests([rec("user", "alice", None, "produce", 2**20)], namespace="ns")
    (tmp_path / "stale.yaml").write_text("old: true\n")
    files = write_manifests(manifests, tmp_path, "ns", "generated\nby a test")
    assert [f.name for f in files] == ["clientquota-user-alice.yaml"]
    assert not (tmp_path / "stale.yaml").exists()
    kustomization = yaml.safe_load((tmp_path / "kustomization.yaml").read_text())
    assert kustomization == {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": "ns",
        "resources": ["clientquota-user-alice.yaml"],
    }
    text = files[0].read_text()
    assert text.startswith("# generated\n# by a test\n")
    ClientQuota.model_validate(yaml.safe_load(text))


def report_with(overrides: int) -> dict[str, Any]:
    """A report as the pipeline builds it: one default, ``overrides`` outliers (the last one demand-capped),
    broker 2 over capacity, one entity row per override."""
    recs = [dict(rec("user", None, None, "produce", 400.0 * 1024, default=True), population=2000)]
    for i in range(overrides):
        r = rec("user", f"heavy-{i:03d}", None, "produce", 9.646e9 + i)
        if i == overrides - 1:
            r |= {"throttled_share": 0.4, "demand_capped": True}
        recs.append(r)
    for r in recs:
        r["entity"] = current.entity_display(r["kind"], r["user"], r["client_id"], r["is_default"])
    capacity = [
        {
            "broker": b,
            "resource": "produce",
            "entities": 10,
            "committed": 9.7e10,
            "capacity": 1e8,
            "oversubscription": 970.0,
            "observed_peak": peak,
            "observed_p99": peak,
            "peak_utilisation": peak / 1e8,
            "status": "over-capacity" if peak > 1e8 else "oversubscribed",
        }
        for b, peak in (("1", 5e7), ("2", 3.2e9))
    ]
    entities = [
        {
            "kind": "user",
            "user": r["user"],
            "client_id": None,
            "entity": r["entity"],
            "resource": "produce",
            "samples": 3000,
            "brokers": 3,
            "p50": 1.2345e9,
            "p95": 5.4321e9,
            "p99": r["basis"],
            "max": 9.9e9,
            "mean": 2e9,
            "peak_to_mean": 4.95,
            "throttled_share": r["throttled_share"],
            "outlier": True,
            "fence": 1e9,
            "quota": r["quota"],
        }
        for r in recs[1:]
    ]
    return {
        "generated_at": "2026-11-25T00:00:00+00:00",
        "input": {"clients": "samples/clients", "topics": None, "format": "parquet"},
        "parameters": {"headroom": 0.2},
        "validation": {"clients": {}},
        "recommendations": recs,
        "capacity": capacity,
        "topics": [],
        "entities": entities,
        "summary": "summary text",
    }


def test_the_html_report_puts_the_decision_first_with_units_and_hides_no_override() -> None:
    page = render_html(report_with(overrides=250))
    headline = page.index("<h2>Recommendation</h2>")
    assert headline < page.index("<h2>Recommended quotas</h2>") < page.index("<h2>Summary</h2>")
    top = page[headline : page.index("<h2>Recommended quotas</h2>")]
    assert "users/&lt;default&gt;</b> produce = <b>400 KiB/s</b>" in top
    assert "250 override(s)" in top
    # The one demand-capped entity and the one broker over capacity are named on top.
    assert "1 demand-capped" in top and "users/heavy-249 produce" in top
    assert "broker 2 produce over capacity" in top and "broker 1 produce over capacity" not in top
    # Both brokers' quotas add up to 970x their capacity: one line says so, naming the first.
    assert "on 2 of 2 broker/resource pair(s) (up to 970.00x on broker 1 produce)" in top
    # Every override is listed (more than any table limit), and the demand-capped one is in the table.
    overrides_table = page[page.index("<h2>Recommended quotas</h2>") : page.index("<h2>Summary</h2>")]
    assert all(f"users/heavy-{i:03d}" in overrides_table for i in range(250))
    # Rates carry units; no raw floats such as 9.646e+09 and no Python dict in the header.
    assert "8.98 GiB/s" in overrides_table
    assert not re.search(r"\de[+-]\d", page.split("<h2>Input and parameters</h2>")[0])
    assert "{'clients'" not in page and "client samples samples/clients (parquet)" in page


@pytest.mark.parametrize(
    ("x", "text"),
    [
        (0.0, "0 B/s"),
        (81920.0, "80 KiB/s"),
        (58572.8, "57.2 KiB/s"),
        (1000.0 * 1024, "1000 KiB/s"),
        (9.646e9, "8.98 GiB/s"),
    ],
)
def test_rates_for_people_have_three_digits_a_unit_and_never_an_exponent(x: float, text: str) -> None:
    assert human_bytes(x) == text


def summarised(report: dict[str, Any]) -> str:
    """The summary of a report built by ``report_with``, with the fields only the summary reads."""
    report["validation"] = {
        "clients": {
            "rows_valid": 3000,
            "brokers": 2,
            "first_timestamp": "2026-11-24T00:00:00",
            "last_timestamp": "2026-11-25T00:00:00",
            "notes": [],
        }
    }
    report["parameters"] = {"headroom": 0.2, "default_percentile": 1.0}
    return summarise(report)


def test_the_summary_names_a_demand_capped_override_however_many_overrides_rank_above_it() -> None:
    # 250 overrides; the demand-capped one is the smallest, far below the 15 the summary lists by size.
    report = report_with(overrides=250)
    for r in report["recommendations"]:
        capped = r["user"] == "heavy-000"
        r |= {"throttled_share": 0.4 if capped else 0.0, "demand_capped": capped}
    lines = summarised(report).splitlines()
    [capped] = [line for line in lines if "users/heavy-000 " in line]
    assert "demand capped: throttled 40% of the time, real demand is higher" in capped
    assert "  ... and 234 more overrides (see the report)" in lines
    assert sum(1 for line in lines if line.startswith("  override ")) == 16


def capacity_row(broker: str, observed: float, committed: float, capacity: float = 100 * 2**20) -> dict[str, Any]:
    return {
        "broker": broker,
        "resource": "produce",
        "entities": 10,
        "committed": committed,
        "capacity": capacity,
        "oversubscription": committed / capacity,
        "observed_peak": observed,
        "observed_p99": observed,
        "peak_utilisation": observed / capacity,
        "status": "over-capacity" if observed > capacity else "oversubscribed" if committed > capacity else "ok",
    }


def test_the_headline_says_which_broker_the_quotas_oversubscribe_beside_no_broker_over_capacity() -> None:
    report = report_with(overrides=3)
    report["capacity"] = [capacity_row("b1", 2**20, 50 * 2**20), capacity_row("b2", 30 * 2**20, 170 * 2**20)]
    page = render_html(report)
    top = page[page.index("<h2>Recommendation</h2>") : page.index("<h2>Recommended quotas</h2>")]
    assert "no broker over capacity" in top
    assert "up to 1.70x on broker b2 produce" in top and "on 1 of 2 broker/resource pair(s)" in top
    # The summary says the same in the same words.
    assert "quotas add up to more than the capacity on 1 of 2 broker/resource pair(s) (up to 1.70x on broker b2" in (
        summarised(report)
    )


def test_each_populations_outlier_fence_has_one_legend_entry_naming_it() -> None:
    from kquota.advisor.report.plots import distribution_figure

    report = report_with(overrides=3)
    report["recommendations"].append(
        dict(rec("client-id", None, None, "produce", 800.0 * 1024, default=True), entity="clients/<default>")
    )
    for i, e in enumerate(list(report["entities"])):
        report["entities"].append(e | {"kind": "client-id", "user": None, "client_id": f"c{i}", "fence": 5e8})
    fig = distribution_figure(report, "produce")
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert sorted(labels) == [
        "default (client-id)",
        "default (user)",
        "outlier fence (client-id)",
        "outlier fence (user)",
    ]


def test_the_parameters_show_the_capacity_in_human_units() -> None:
    report = report_with(overrides=3)
    report["parameters"] = {
        "headroom": 0.2,
        "min_byte_rate": 1024.0,
        "capacity": {"produce": 100.0 * 2**20, "fetch": 200.0 * 2**20, "request": 800.0},
    }
    section = render_html(report).split("<h2>Input and parameters</h2>")[1]
    assert "fetch 200 MiB/s (209715200 bytes/s); produce 100 MiB/s (104857600 bytes/s); request 800%" in section
    assert "1 KiB/s (1024 bytes/s)" in section
    assert "104857600.0" not in section and "2.097152e" not in section
