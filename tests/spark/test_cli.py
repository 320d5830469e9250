"""``kquota advise`` end to end in local mode on small CSV, JSON and Parquet inputs."""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kquota.advisor.cli import add_subcommands
from kquota.api import parse_manifest
from tests.spark.helpers import NOW, at

pytestmark = [pytest.mark.spark, pytest.mark.slow]

HEADER = [
    "timestamp",
    "broker",
    "user",
    "client_id",
    "produce_byte_rate",
    "fetch_byte_rate",
    "produce_throttle_time_ms",
]
MI = 2**20


def usage_rows() -> list[dict[str, Any]]:
    """Four ordinary users around 100-200 KiB/s and one heavy producer at 8 MiB/s, on two brokers."""
    rows = []
    users = {"alice": 100e3, "bob": 150e3, "carol": 120e3, "dave": 180e3, "CN=etl,OU=data": 8.0 * MI}
    for i in range(20):
        for broker in ("1", "2"):
            for user, rate in users.items():
                rows.append(
                    {
                        "timestamp": at(10 * i).isoformat(),
                        "broker": broker,
                        "user": user,
                        "client_id": "",
                        "produce_byte_rate": rate * (0.5 + i / 20),
                        "fetch_byte_rate": 2 * rate,
                        "produce_throttle_time_ms": 0.0,
                    }
                )
    return rows


def write_input(tmp_path: Path, fmt: str, spark: Any) -> Path:
    rows = usage_rows()
    if fmt == "csv":
        path = tmp_path / "usage.csv"
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, HEADER)
            writer.writeheader()
            writer.writerows(rows)
        return path
    if fmt == "json":
        path = tmp_path / "usage.json"
        path.write_text(
            "".join(json.dumps({k: (v or None) if k == "client_id" else v for k, v in r.items()}) + "\n" for r in rows)
        )
        return path
    path = tmp_path / "usage.parquet"
    df = spark.createDataFrame(
        [tuple(r[c] for c in HEADER) for r in rows],
        "timestamp string, broker string, user string, client_id string, "
        "produce_byte_rate double, fetch_byte_rate double, produce_throttle_time_ms double",
    )
    df.withColumn("timestamp", df["timestamp"].cast("timestamp")).write.parquet(str(path))
    return path


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="kquota")
    add_subcommands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_advise_writes_valid_manifests_and_reports(
    spark: Any, tmp_path: Path, fmt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write_input(tmp_path, fmt, spark)
    out = tmp_path / "advice"
    code = run(
        [
            "advise",
            "--input",
            str(source),
            "--out",
            str(out),
            "--namespace",
            "team-a",
            "--cluster-ref",
            "prod",
            "--broker-capacity",
            "20Mi",
            "--quiet",
        ]
    )
    assert code == 0, capsys.readouterr().err
    summary = capsys.readouterr().out
    assert "override users/CN=etl,OU=data produce" in summary
    manifests = {p.name: yaml.safe_load(p.read_text()) for p in (out / "manifests").glob("*.yaml")}
    kustomization = manifests.pop("kustomization.yaml")
    assert sorted(kustomization["resources"]) == sorted(manifests)
    for manifest in manifests.values():
        parse_manifest(manifest)
    by_name = {m["metadata"]["name"]: m["spec"] for m in manifests.values()}
    # Defaults: largest ordinary produce p99 is dave's 180e3 x 1.45 = 261000 B/s; x 1.2 -> 313200 -> 400Ki.
    assert by_name["default-user"]["quota"] == {"producerByteRate": "400Ki", "consumerByteRate": "500Ki"}
    heavy = next(spec for name, spec in by_name.items() if name.startswith("user-cn-etl-ou-data-"))
    # 8Mi x 1.45 x 1.2 = 13.92Mi -> 15Mi; fetch 16Mi x 1.2 = 19.2Mi -> 20Mi.
    assert heavy == {
        "clusterRef": "prod",
        "entity": {"user": {"name": "CN=etl,OU=data"}},
        "quota": {"producerByteRate": "15Mi", "consumerByteRate": "20Mi"},
    }
    report = json.loads((out / "report.json").read_text())
    assert report["validation"]["clients"]["rows_valid"] == 200
    # Where it ran and what the driver held at most (the test session's JVM: 1g of heap, more resident).
    assert report["spark"]["driver_memory"] == "1g" and report["spark"]["driver_peak_rss_mib"] > 200
    assert f"driver peak memory {report['spark']['driver_peak_rss_mib']:,} MiB" in summary
    # Fetch quotas add up to 21.95Mi on each broker (4 x 500Ki + 20Mi), above 20Mi; produce to 16.56Mi. No
    # broker's own traffic comes near 20Mi, so none is over capacity and the summary says so.
    status = {(c["broker"], c["resource"]): c["status"] for c in report["capacity"]}
    assert status == {
        (b, r): "oversubscribed" if r == "fetch" else "ok" for b in ("1", "2") for r in ("produce", "fetch")
    }
    assert "capacity: no broker over capacity" in summary
    assert "quotas add up to more than the capacity on 2 of 4" in summary
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") >= 5
    assert "CN=etl,OU=data" in html


def applied_now(path: Path) -> Path:
    """What a team applies today: the default as recommended for produce, too generous for fetch; the heavy
    producer held at 10Mi with no fetch quota; alice with an override the advice no longer needs."""

    def cq(name: str, user: dict[str, Any], quota: dict[str, Any]) -> dict[str, Any]:
        meta = {"name": name, "namespace": "team-a"}
        return {"apiVersion": "kquota.io/v1alpha1", "kind": "ClientQuota", "metadata": meta,
                "spec": {"entity": {"user": user}, "quota": quota}}  # fmt: skip

    path.mkdir()
    (path / "defaults.yaml").write_text(
        yaml.safe_dump(cq("default-user", {"default": True}, {"producerByteRate": "400Ki", "consumerByteRate": "1Mi"}))
    )
    (path / "teams.yaml").write_text(
        yaml.safe_dump_all(
            [
                cq("etl", {"name": "CN=etl,OU=data"}, {"producerByteRate": "10Mi"}),
                cq("alice", {"name": "alice"}, {"producerByteRate": "1Mi"}),
                {"apiVersion": "kquota.io/v1alpha1", "kind": "KafkaCluster", "metadata": {"name": "prod"}},
            ]
        )
    )
    return path


def test_advise_says_what_changes_against_the_quotas_applied_now(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write_input(tmp_path, "csv", spark)
    out = tmp_path / "advice"
    current = applied_now(tmp_path / "applied")
    assert run(["advise", "--input", str(source), "--out", str(out), "--current", str(current), "--quiet"]) == 0
    summary = capsys.readouterr().out
    assert f"Against the quotas applied now ({current}, 3 ClientQuotas): " in summary
    assert "1 added, 1 raised, 1 lowered, 1 dropped, 1 unchanged." in summary
    report = json.loads((out / "report.json").read_text())["changes"]
    got = {(r["entity"], r["resource"]): (r["action"], r["current"], r["recommended"]) for r in report["rows"]}
    assert got == {
        ("users/<default>", "produce"): ("keep", 400 * 1024, 400 * 1024),
        ("users/<default>", "fetch"): ("lower", MI, 500 * 1024),
        ("users/CN=etl,OU=data", "produce"): ("raise", 10 * MI, 15 * MI),
        ("users/CN=etl,OU=data", "fetch"): ("add", None, 20 * MI),
        ("users/alice", "produce"): ("drop", MI, None),
    }
    assert report["skipped"] == [f"{current / 'teams.yaml'} (document 3): a KafkaCluster, not a ClientQuota"]
    assert "  drop users/alice produce: 1 MiB/s -> not set" in summary
    assert "  raise users/CN=etl,OU=data produce: 10 MiB/s -> 15 MiB/s (+50%)" in summary
    html = (out / "report.html").read_text()
    # The comparison sits right under the headline, before the recommended quotas.
    assert html.index("Against what is applied now") < html.index("Recommended quotas")
    assert "1 added, 1 raised, 1 lowered, 1 dropped, 1 unchanged" in html


def test_a_bad_current_manifest_stops_advise_before_any_work(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write_input(tmp_path, "csv", spark)
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"apiVersion": "kquota.io/v1alpha1", "kind": "ClientQuota",
                                   "metadata": {"name": "a"}, "spec": {"entity": {"user": {"name": "a"}},
                                   "quota": {"producerByteRate": "lots"}}}))  # fmt: skip
    code = run(["advise", "--input", str(source), "--out", str(tmp_path / "o"),
                "--current", str(bad), "--quiet"])  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert f"bad input: --current {bad}: not a valid ClientQuota: spec.quota.producerByteRate" in err
    assert not (tmp_path / "o").exists()


def test_advise_reports_bad_input_and_exits_2(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("timestamp,broker,user\n2024-05-01T00:00:00Z,1,alice\n")
    assert run(["advise", "--input", str(bad), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "bad input" in err and "missing required column(s) client_id, produce_byte_rate, fetch_byte_rate" in err
    assert not (tmp_path / "o" / "manifests").exists()


def test_advise_rejects_bad_parameters_before_starting_spark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["advise", "--input", "x.csv", "--default-percentile", "0"]) == 2
    assert "default percentile" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run(["advise", "--input", "x.csv", "--broker-capacity", "lots"])


@pytest.mark.parametrize(
    ("flag", "says"), [("--accuracy", "percentiles are now exact"), ("--outlier-iqr", "--outlier-alpha")]
)
def test_a_flag_removed_in_0_2_0_is_refused_with_what_replaced_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, says: str
) -> None:
    assert run(["advise", "--input", "x.csv", "--out", str(tmp_path / "o"), flag, "3"]) == 2
    err = capsys.readouterr().err
    assert f"{flag} was removed in 0.2.0" in err and says in err


def test_advise_is_reproducible_for_a_fixed_now(spark: Any, tmp_path: Path) -> None:
    from kquota.advisor.pipeline import AdviseOptions, advise

    source = write_input(tmp_path, "csv", spark)
    results = [
        advise(spark, AdviseOptions(input=str(source), out=tmp_path / f"o{i}", now=NOW, progress=False))
        for i in range(2)
    ]
    assert results[0].report["recommendations"] == results[1].report["recommendations"]
    names = [sorted(p.name for p in r.manifests) for r in results]
    assert names[0] == names[1]


def test_progress_reports_each_step_and_its_stage_progress(spark: Any) -> None:
    import io

    from kquota.advisor.session import Progress

    stream = io.StringIO()
    with Progress(spark, stream=stream, interval=0.05, line_every=0.0) as progress:
        progress.step("counting")
        spark.range(2_000_000).selectExpr("sum(id * id)").collect()
        progress.step("counting again")
        spark.range(10).count()
    text = stream.getvalue()
    assert "counting: done in" in text and "counting again: done in" in text
    assert [name for name, _ in progress.steps] == ["counting", "counting again"]


def test_a_spark_failure_is_one_readable_message_not_a_py4j_dump(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyspark.sql import functions as sf

    from kquota.advisor import pipeline

    def failing(session: Any, options: Any, echo: Any = None) -> Any:
        session.range(1).select(sf.raise_error(sf.lit("the executor said boom"))).collect()

    monkeypatch.setattr(pipeline, "advise", failing)
    source = write_input(tmp_path, "csv", spark)
    assert run(["advise", "--input", str(source), "--out", str(tmp_path / "o"), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kquota advise: Spark failed:") and "the executor said boom" in err
    assert "Traceback" not in err and "py4j" not in err.lower()


def test_out_of_memory_names_the_setting_to_change() -> None:
    from kquota.advisor.commands import spark_failure_message

    text = "An error occurred while calling o123.collect.\n: java.lang.OutOfMemoryError: Java heap space\n\tat ..."
    message = spark_failure_message(text, "1g")
    assert "ran out of memory (java.lang.OutOfMemoryError: Java heap space)" in message
    assert "spark.driver.memory=1g" in message and "--conf spark.driver.memory=" in message
