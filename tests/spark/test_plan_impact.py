"""``kquota plan --impact`` end to end: the real API server, broker and operator, a planted history, Spark.

The operator applies the planted "before" quotas (tests/support/impact.py) as ClientQuotas, so the
brokers hold them and its ledger owns them. ``kquota plan -f after/ --delete ... --cluster`` then
plans the change exactly as the operator would make it, removals included, and runs it against the
history: the entities it throttles and frees must be exactly the planted ones, with every figure equal
to an independent numpy computation. The same manifests with ``--bootstrap-server`` alone (no ledger,
so no removals) give the planted outcome without the removals. The markdown table for a pull request,
the HTML page and exit codes 4, 2 and 0 are checked on the way.
"""

from __future__ import annotations

import contextlib
import html
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.kafka_cluster import KafkaCluster
from harness.kube_apiserver import KubeAPIServer
from harness.operator_proc import apply, client_quota, condition, wait_for
from harness.stack import Stack, start_stack, stop_stack

from kquota.advisor.report.impact import md
from kquota.cli.main import main
from tests.plugins.kafka import unique_name
from tests.support.impact import expected_impact, names, quotas, write_history

pytestmark = [pytest.mark.spark, pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def stack(kube: KubeAPIServer, kafka: KafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """An operator of this module's own, watching only its namespaces (impact-*) on the shared API server."""
    s = start_stack(kube, kafka, tmp_path_factory.mktemp("operator"), namespace_prefix="impact")
    try:
        yield s
    finally:
        stop_stack(s)


def kquota(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def write_manifests(directory: Path, namespace: str, cluster: str, specs: dict[str, dict[str, Any]]) -> None:
    directory.mkdir()
    for name, spec in specs.items():
        manifest = client_quota(namespace, name, spec["entity"], spec["quota"], cluster)
        (directory / f"{name}.yaml").write_text(json.dumps(manifest))


def check_rows(doc: dict[str, Any], expected: dict[tuple[str, str, str], dict[str, Any]]) -> None:
    got = {(r["verdict"], r["entity"], r["key"]): r for r in doc["rows"]}
    assert sorted(got) == sorted(expected)
    for key, want in expected.items():
        row = got[key]
        assert (row["share"], row["p99"], row["samples"]) == (want["share"], want["p99"], want["samples"]), key
        if key[0] != "un-throttles":
            assert row["throttle_seconds_per_hour"] == pytest.approx(want["throttle_seconds_per_hour"], rel=1e-12)


def test_plan_impact_names_exactly_the_planted_entities_against_the_real_cluster(
    spark: Any, stack: Stack, tmp_path: Path
) -> None:
    prefix = unique_name("imp")
    n = names(prefix)
    before, after, deleted = quotas(n)
    ns = stack.new_namespace()
    apply(stack.kube, *(client_quota(ns, k, s["entity"], s["quota"], stack.cluster) for k, s in before.items()))

    def ready() -> bool:
        items = json.loads(stack.kube.kubectl("get", "clientquota", "-n", ns, "-o", "json").stdout)["items"]
        return len(items) == len(before) and all(condition(o).get("status") == "True" for o in items)

    wait_for(ready, 90, "the planted quotas Ready", on_timeout=stack.operator.log)
    history = tmp_path / "history.csv"
    rows = write_history(history, n)
    write_manifests(tmp_path / "after", ns, stack.cluster, after)
    write_manifests(tmp_path / "deleted", ns, stack.cluster, {k: before[k] for k in deleted})
    scope = ["--entity", f"users/{prefix}-*"]
    cluster = ["--cluster", stack.cluster, "--kubeconfig", str(stack.kube.kubeconfig)]
    cluster += ["--default-cluster", stack.cluster]
    deletions = [a for k in deleted for a in ("--delete", str(tmp_path / "deleted" / f"{k}.yaml"))]
    page = tmp_path / "impact.html"

    # Against the cluster: the operator's plan, removals included. Exit 4: a change throttles.
    code, out, err = kquota(
        "plan", "-f", str(tmp_path / "after"), *deletions, *cluster, *scope,
        "--impact", str(history), "--impact-report", str(page), "-o", "json",
    )  # fmt: skip
    assert code == 4, f"exit {code}\n{out}\n{err}"
    doc = json.loads(out)
    removed = {(r["entity"]["path"], r["key"]) for r in doc["rows"] if r["action"] == "remove"}
    assert removed == {
        (f"users/{n['bob']}/clients/app", "producer_byte_rate"),
        (f"users/{n['gina']}/clients/etl", "producer_byte_rate"),
        (f"users/{n['dave']}", "producer_byte_rate"),
    }
    expected = expected_impact(rows, n, removals=True)
    check_rows(doc["impact"], expected)
    assert doc["impact"]["overThreshold"] == 4
    # The HTML page shows the same figures.
    text = page.read_text()
    for row in doc["impact"]["rows"]:
        assert html.escape(row["entity"]) in text

    # The manifests alone, against the brokers: no ledger, so no removals; the rest as planted. The
    # pull-request comment: one markdown line per throttled or freed entity, and exit 4.
    code, out, err = kquota(
        "plan", "-f", str(tmp_path / "after"), "--bootstrap-server", stack.kafka.bootstrap, *scope,
        "--impact", str(history), "--format", "markdown",
    )  # fmt: skip
    assert code == 4, f"exit {code}\n{out}\n{err}"
    table = [line for line in out.splitlines() if line.startswith(("| throttles |", "| un-throttles |"))]
    listed = {(line.split(" | ")[0].lstrip("| "), line.split(" | ")[1], line.split(" | ")[2]) for line in table}
    shown = {(v, md(e), md(k)) for v, e, k in expected_impact(rows, n, removals=False) if v != "within"}
    assert listed == shown
    assert "**Impact: 2 entities throttled (2 of them more than 0% of the time, the threshold), 1 entity" in out
    assert "| action | entity | key | live | desired | source |" in out  # the plan itself, collapsed

    # A manifest that changes nothing: nobody's limit moves, so Spark is not even started: exit 0.
    code, out, err = kquota(
        "plan", "-f", str(tmp_path / "after" / "erin.yaml"), "--bootstrap-server", stack.kafka.bootstrap,
        "--entity", f"users/{n['erin']}", "--impact", str(history),
    )  # fmt: skip
    assert code == 0, f"exit {code}\n{out}\n{err}"
    assert "--impact: the plan changes nothing, so it throttles and frees nobody" in err
    assert "Impact on the usage history" not in out

    # Only the change that frees carol: changes, none throttling: exit 2, as plan without --impact.
    code, out, err = kquota(
        "plan", "-f", str(tmp_path / "after" / "carol.yaml"), "--bootstrap-server", stack.kafka.bootstrap,
        "--entity", f"users/{n['carol']}", "--impact", str(history), "-o", "json",
    )  # fmt: skip
    assert code == 2, f"exit {code}\n{out}\n{err}"
    assert [(r["verdict"], r["entity"]) for r in json.loads(out)["impact"]["rows"]] == [
        ("un-throttles", f"users/{n['carol']}")
    ]
