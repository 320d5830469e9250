"""End to end on the real components: load a real broker, collect its metrics, advise, apply to a real API server.

Three SCRAM users produce gently under generous quotas; one produces hard
under a small quota, so the broker throttles it. ``kquota collect``'s scraper
reads the broker's metrics endpoint while that runs; ``kquota advise`` turns
the samples into manifests, which the real kube-apiserver accepts
(``kubectl apply --dry-run=server -k``) once the CRDs are installed.
"""

from __future__ import annotations

import argparse
import json
import secrets
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness.kafka_cluster import KafkaCluster
from harness.kube_apiserver import KubeAPIServer

from kquota.advisor import collect
from kquota.advisor.cli import add_subcommands
from kquota.api import parse_manifest
from tests.plugins.kafka import unique_name

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.e2e, pytest.mark.slow]

HEAVY_QUOTA = 256 * 1024
LIGHT_QUOTA = 10 * 1024 * 1024
SCRAPE_SECONDS = 24.0


def _produce_until(
    stop: threading.Event, config: dict[str, Any], topic: str, size: int, pause: float, errors: list[str]
) -> None:
    from confluent_kafka import Producer

    producer = Producer(dict(config, **{"linger.ms": 5, "error_cb": lambda e: errors.append(str(e))}))
    payload = secrets.token_bytes(size)
    while not stop.is_set():
        try:
            producer.produce(topic, value=payload)
        except BufferError:
            # The heavy user is throttled: the broker delays responses, so librdkafka's queue fills up.
            producer.poll(0.05)
            continue
        producer.poll(0)
        time.sleep(pause)
    # Whatever the throttled producer still queues is of no interest: drop it instead of waiting.
    producer.purge()
    producer.flush(5)


def _consume_until(stop: threading.Event, config: dict[str, Any], topic: str) -> None:
    from confluent_kafka import Consumer

    consumer = Consumer(dict(config, **{"group.id": unique_name("g"), "auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    while not stop.is_set():
        consumer.poll(0.2)
    consumer.close()


def _advise(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="kquota")
    add_subcommands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


def test_samples_from_a_throttled_broker_become_manifests_the_api_server_accepts(
    spark: Any, kafka: KafkaCluster, kube: KubeAPIServer, tmp_path: Path
) -> None:
    prefix = unique_name("adv")
    users = {f"{prefix}-light{i}": LIGHT_QUOTA for i in range(3)} | {f"{prefix}-heavy": HEAVY_QUOTA}
    heavy = f"{prefix}-heavy"
    passwords = {u: secrets.token_hex(8) for u in users}
    for user, quota in users.items():
        kafka.create_scram_user(user, passwords[user])
        result = kafka.kafka_configs(
            "--alter",
            "--add-config",
            f"producer_byte_rate={quota},consumer_byte_rate={LIGHT_QUOTA}",
            "--entity-type",
            "users",
            "--entity-name",
            user,
        )
        assert result.returncode == 0, result.stderr
    topic = unique_name("advisor-load")

    stop = threading.Event()
    errors: list[str] = []
    threads = [
        threading.Thread(
            target=_produce_until,
            args=(
                stop,
                kafka.client_config(u, passwords[u]),
                topic,
                4096 if u == heavy else 1024,
                0.002 if u == heavy else 0.02,
                errors,
            ),
            daemon=True,
        )
        for u in users
    ]
    light0 = next(iter(users))
    threads.append(
        threading.Thread(
            target=_consume_until, args=(stop, kafka.client_config(light0, passwords[light0]), topic), daemon=True
        )
    )
    for t in threads:
        t.start()
    try:
        time.sleep(4)  # let the quota windows fill before the first scrape
        scraped = collect.scrape([f"broker-0={kafka.brokers[0].metrics_url}"], SCRAPE_SECONDS, 2.0)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not [e for e in errors if "Authentication" in e], errors

    ours = [r for r in scraped.clients if r["user"] in users]
    assert {r["user"] for r in ours} == set(users), "every loaded user appears in the quota metrics"
    assert any((r["produce_throttle_time_ms"] or 0) > 0 for r in ours if r["user"] == heavy), "heavy was throttled"
    assert any(r["topic"] == topic and r["bytes_in_rate"] > 0 for r in scraped.topics)
    samples = tmp_path / "samples"
    collect.write_parquet(spark, scraped.clients, scraped.topics, samples)

    out = tmp_path / "advice"
    namespace = kube.create_namespace("advisor")
    code = _advise(
        [
            "advise",
            "--input",
            str(samples),
            "--out",
            str(out),
            "--namespace",
            namespace,
            "--cluster-ref",
            "local",
            "--broker-capacity",
            "50Mi",
            "--topic-bucket",
            "4",
            "--quiet",
        ]
    )
    assert code == 0

    report = json.loads((out / "report.json").read_text())
    heavy_produce = next(e for e in report["entities"] if e["user"] == heavy and e["resource"] == "produce")
    assert heavy_produce["throttled_share"] > 0
    light_p99 = max(
        e["p99"] for e in report["entities"] if e["user"] in users and e["user"] != heavy and e["resource"] == "produce"
    )
    # The broker held the heavy user near its quota on average (bursts above it are measured before the
    # throttle delay catches up); the light users stayed far below theirs.
    assert light_p99 < heavy_produce["p99"]
    assert heavy_produce["mean"] < HEAVY_QUOTA * 2
    heavy_rec = next(r for r in report["recommendations"] if r["user"] == heavy and r["resource"] == "produce")
    assert heavy_rec["demand_capped"] and heavy_rec["quota"] > heavy_produce["p99"]
    assert any(t["topic"] == topic for t in report["topics"])

    manifests = [
        yaml.safe_load(p.read_text())
        for p in sorted((out / "manifests").glob("*.yaml"))
        if p.name != "kustomization.yaml"
    ]
    for manifest in manifests:
        parse_manifest(manifest)
    heavy_manifest = next(m for m in manifests if m["spec"].get("entity", {}).get("user", {}).get("name") == heavy)
    assert "throttled" in heavy_manifest["metadata"]["annotations"]["kquota.io/advisor-reason"]

    kube.apply_crds()
    applied = kube.kubectl("apply", "--dry-run=server", "-k", str(out / "manifests"), check=False)
    assert applied.returncode == 0, applied.stderr
    assert f"clientquota.kquota.io/{heavy_manifest['metadata']['name']} created (server dry run)" in applied.stdout
    assert applied.stdout.count("created (server dry run)") == len(manifests)

    html = (out / "report.html").read_text()
    assert heavy in html and "data:image/png;base64," in html
