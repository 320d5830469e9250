"""The kquota CLI against the real stack: export -> apply -> plan round trip, plan's diff, explain vs the broker.

The session's broker is shared with other test modules, so every command is
scoped to the entities a test seeded (``--entity``), names are unique, and
default-entity quotas are put back as they were found.
"""

from __future__ import annotations

import contextlib
import glob
import io
import json
import math
import random
import re
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness.kafka_cluster import KafkaCluster
from harness.operator_proc import apply, client_quota, condition, wait_for
from harness.stack import Stack

from kquota.cli.export import to_yaml
from kquota.cli.main import main
from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.manifests import object_name
from kquota.domain.plan import EntityChange, QuotaOp
from kquota.kafka.admin import QuotaAdmin
from kquota.kafka.settings import ConnectionSettings
from tests.support.quotas import C, P, R
from tests.unit.test_resolver import DOC, DOC_CASES

pytestmark = pytest.mark.e2e

Quotas = dict[Entity, dict[QuotaKey, float]]


def kquota(*args: str) -> tuple[int, str, str]:
    """Run the CLI in this process (as the console script would): exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def kquota_json(*args: str, expect: int = 0) -> dict[str, Any]:
    code, out, err = kquota(*args, "-o", "json")
    assert code == expect, f"exit {code}\n{out}\n{err}"
    doc: dict[str, Any] = json.loads(out)
    return doc


def admin(kafka: KafkaCluster) -> QuotaAdmin:
    return QuotaAdmin(ConnectionSettings(bootstrap_servers=kafka.bootstrap))


def set_exactly(kafka: KafkaCluster, wanted: Quotas, keys: Sequence[QuotaKey] | None = None) -> None:
    """Make each entity's keys (all, or ``keys``) exactly ``wanted`` on the broker, and wait until it shows."""
    qa = admin(kafka)
    try:
        live = qa.describe_all()
        alterations = []
        for entity, values in wanted.items():
            have = live.get(entity, {})
            scope = set(keys) if keys else set(have) | set(values)
            ops = [QuotaOp(k, values[k]) for k in sorted(scope) if k in values]
            ops += [QuotaOp(k, None) for k in sorted(scope) if k not in values and k in have]
            if ops:
                alterations.append(EntityChange(entity, tuple(ops)))
        results = qa.alter(alterations)
        assert all(r.ok for r in results), results

        def applied() -> bool:
            now = qa.describe_all()
            return all(
                {k: v for k, v in now.get(e, {}).items() if not keys or k in keys}
                == {k: v for k, v in values.items() if not keys or k in keys}
                for e, values in wanted.items()
            )

        wait_for(applied, 30, f"broker quotas {wanted}")
    finally:
        qa.close()


def entity_globs(entities: Sequence[Entity]) -> list[str]:
    out: list[str] = []
    for e in entities:
        out += ["--entity", glob.escape(e.path())]
    return out


def configs_args(entity: Entity, config: str) -> list[str]:
    args = ["--alter", "--add-config", config]
    for etype, flag in (("user", "users"), ("client-id", "clients"), ("ip", "ips")):
        if etype in entity.parts():
            name = entity.parts()[etype]
            args += ["--entity-type", flag, *(["--entity-default"] if name is None else ["--entity-name", name])]
    return args


def values_of(config: str) -> dict[QuotaKey, float]:
    return {QuotaKey(k): float(v) for k, v in (item.split("=") for item in config.split(","))}


@contextlib.contextmanager
def restored(kafka: KafkaCluster, entities: Sequence[Entity]) -> Iterator[Quotas]:
    """Put ``entities`` back as they were (other modules share the broker's default entities)."""
    qa = admin(kafka)
    try:
        before = qa.describe_all()
    finally:
        qa.close()
    try:
        yield before
    finally:
        set_exactly(kafka, {e: dict(before.get(e, {})) for e in entities})


def test_export_apply_plan_round_trip(stack: Stack, tmp_path: Path) -> None:
    """Quotas of every entity form set by kafka-configs survive export -> kubectl apply -> plan unchanged."""
    tag = uuid.uuid4().hex[:6]
    ip = f"10.{random.randint(0, 255)}.{random.randint(0, 255)}.{random.randint(1, 254)}"
    numeric = "9" + "".join(random.choices("0123456789", k=9))  # YAML reads it as a number unless quoted
    seeds = [
        (Entity.for_user(f"cli-u1-{tag}"), "producer_byte_rate=10485760,request_percentage=33.3"),
        (Entity.for_client(f"cli-c1-{tag}"), "consumer_byte_rate=1536"),
        (Entity.for_pair(f"cli-u2-{tag}", f"cli-c2-{tag}"), "producer_byte_rate=2048,controller_mutation_rate=2.5"),
        (Entity.for_user(None), "consumer_byte_rate=1073741824"),
        (Entity.for_client(None), "producer_byte_rate=1073741824"),
        (Entity.for_pair(f"cli-u3-{tag}", None), "producer_byte_rate=4096"),
        (Entity.for_pair(None, f"cli-c3-{tag}"), "consumer_byte_rate=8192"),
        (Entity.for_pair(None, None), "controller_mutation_rate=1000"),
        (Entity.for_ip(ip), "connection_creation_rate=17"),
        (Entity.for_ip(None), "connection_creation_rate=1000"),
        (Entity.for_user(f"CN=svc-{tag},OU=payments,O=Example=Corp"), "producer_byte_rate=1024"),
        (Entity.for_client(numeric), "producer_byte_rate=3072"),
    ]
    unicode_client = Entity.for_client(f"ünïcödé 客户 {tag}")
    entities = [e for e, _ in seeds] + [unicode_client]
    kube = stack.kube
    ns = stack.new_namespace()
    out = tmp_path / "quotas"
    cluster = ["--cluster", stack.cluster, "--kubeconfig", str(kube.kubeconfig)]
    scope = entity_globs(entities)

    with restored(stack.kafka, entities) as before:
        try:
            # Kafka's own tool sets them, a few JVMs at a time.
            with ThreadPoolExecutor(max_workers=3) as pool:
                for result in pool.map(lambda s: stack.kafka.kafka_configs(*configs_args(*s), check=True), seeds):
                    assert result.returncode == 0
            set_exactly(stack.kafka, {unicode_client: {P: 5120.0}})
            live = stack.broker_quotas()
            seeded = {e: dict(before.get(e, {})) | values_of(cfg) for e, cfg in seeds}
            seeded[unicode_client] = {P: 5120.0}
            for e, values in seeded.items():
                assert live.get(e) == values, f"{e}: {live.get(e)} != {values}"

            code, _, err = kquota("export", *cluster, "--namespace", ns, "--out", str(out), *scope)
            assert code == 0, err
            files = sorted(out.glob("*.yaml"))
            assert sorted(f.stem for f in files) == sorted(object_name(e) for e in entities)
            assert f'name: "{numeric}"' in (out / f"{object_name(Entity.for_client(numeric))}.yaml").read_text()

            # Before the apply the brokers already match: keys only become owned.
            doc = kquota_json("plan", "-f", str(out), *cluster, *scope)
            assert doc["changes"] == 0
            assert {r["action"] for r in doc["rows"]} == {"own"}
            owned = {(r["entity"]["path"], r["key"]) for r in doc["rows"]}
            assert owned == {(e.path(), k.value) for e, values in seeded.items() for k in values}

            kube.kubectl("apply", "-f", str(out))
            wait_all_ready(stack, ns, sum(len(list(yaml.safe_load_all(f.read_text()))) for f in files))

            # The round trip: no change, nothing left to own, nothing unmanaged among these entities.
            doc = kquota_json("plan", "-f", str(out), *cluster, *scope)
            assert doc["rows"] == [], doc["rows"]
            assert doc["summary"] == "No changes: the brokers already match."
            assert {e: v for e, v in stack.broker_quotas().items() if e in seeded} == seeded
            # The same through the installed entry point, as CI would run it.
            result = subprocess.run(
                [sys.executable, "-m", "kquota.cli.main", "plan", "-f", str(out), *cluster, *scope],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert result.returncode == 0, result.stdout + result.stderr
            assert "No changes" in result.stdout

            # explain names the resource that set each value.
            pair = Entity.for_pair(f"cli-u2-{tag}", f"cli-c2-{tag}")
            doc = kquota_json("explain", *cluster, "--user", f"cli-u2-{tag}", "--client-id", f"cli-c2-{tag}")
            keys = {k["key"]: k for k in doc["keys"]}
            assert keys["producer_byte_rate"]["value"] == 2048
            assert keys["producer_byte_rate"]["owner"]["resource"] == {
                "kind": "ClientQuota",
                "namespace": ns,
                "name": object_name(pair),
            }
            assert keys["controller_mutation_rate"]["owner"]["resource"]["kind"] == "ControllerMutationQuota"

            check_plan_shows_changes(stack, out, cluster, scope, seeds[0][0])
        finally:
            kube.kubectl("delete", "-f", str(out), "--ignore-not-found", "--timeout=60s", check=False)


def wait_all_ready(stack: Stack, ns: str, count: int) -> None:
    def ready() -> bool:
        result = stack.kube.kubectl("get", "clientquota,controllermutationquota", "-n", ns, "-o", "json")
        items = json.loads(result.stdout)["items"]
        return len(items) == count and all(
            condition(o).get("status") == "True"
            and o["status"].get("observedGeneration") == o["metadata"]["generation"]
            for o in items
        )

    wait_for(ready, 60, f"{count} resources Ready in {ns}", on_timeout=stack.operator.log)


def check_plan_shows_changes(stack: Stack, out: Path, cluster: list[str], scope: list[str], user: Entity) -> None:
    """Edit one manifest and set a key by hand: plan shows change, remove and left-alone, exit 2."""
    path = out / f"{object_name(user)}.yaml"
    [doc] = list(yaml.safe_load_all(path.read_text()))
    doc["spec"]["quota"] = {"producerByteRate": "20Mi"}  # was 10Mi and requestPercentage 33.3
    path.write_text(to_yaml([doc]))
    set_exactly(stack.kafka, {user: {C: 999.0}}, keys=[C])
    try:
        report = kquota_json("plan", "-f", str(out), *cluster, *scope, "--broker-validate", expect=2)
        rows = {(r["action"], r["entity"]["path"], r["key"], r["live"], r["desired"]) for r in report["rows"]}
        assert rows == {
            ("change", user.path(), "producer_byte_rate", 10485760, 20971520),
            ("remove", user.path(), "request_percentage", 33.3, None),
            ("unmanaged", user.path(), "consumer_byte_rate", 999, None),
        }
        assert report["brokerValidation"] == {"rejected": []}
        assert report["changes"] == 2
        # validate_only changed nothing.
        assert stack.broker_quotas()[user] == {P: 10485760.0, R: 33.3, C: 999.0}
    finally:
        set_exactly(stack.kafka, {user: {}}, keys=[C])


# --- what kquota already manages, and the operator's default cluster --------------------


def applied_without_cluster_ref(stack: Stack, user: str, quota: dict[str, Any]) -> str:
    """A ClientQuota without clusterRef (the operator's default cluster), applied and Ready; its namespace."""
    ns = stack.new_namespace()
    apply(stack.kube, client_quota(ns, "managed", {"user": {"name": user}}, quota))
    wait_all_ready(stack, ns, 1)
    return ns


def test_export_leaves_out_the_keys_kquota_manages(stack: Stack) -> None:
    """The operator applies one key of an entity, kafka-configs sets another: export returns only the hand-set one."""
    user = Entity.for_user(f"cli-managed-{uuid.uuid4().hex[:6]}")
    cluster = ["--cluster", stack.cluster, "--kubeconfig", str(stack.kube.kubeconfig)]
    ns = applied_without_cluster_ref(stack, str(user.user), {"producerByteRate": 2048})
    try:
        stack.kafka.kafka_configs(*configs_args(user, "consumer_byte_rate=4096"), check=True)
        wait_for(lambda: stack.broker_quotas().get(user) == {P: 2048.0, C: 4096.0}, 30, "both keys on the broker")

        code, out, err = kquota("export", *cluster, *entity_globs([user]))
        assert code == 0, err
        [doc] = [d for d in yaml.safe_load_all(out) if d]
        assert doc["spec"]["quota"] == {"consumerByteRate": "4Ki"}
        assert "left out 1 key kquota already manages" in err

        code, out, err = kquota("export", *cluster, *entity_globs([user]), "--all")
        assert code == 0, err
        [doc] = [d for d in yaml.safe_load_all(out) if d]
        assert doc["spec"]["quota"] == {"producerByteRate": "2Ki", "consumerByteRate": "4Ki"}
    finally:
        stack.kube.kubectl("delete", "clientquota", "managed", "-n", ns, "--timeout=60s", check=False)
        set_exactly(stack.kafka, {user: {}})


def test_plan_takes_the_default_cluster_from_the_operator(stack: Stack, tmp_path: Path) -> None:
    """The operator runs with a default cluster not named "default": plan, without --default-cluster, agrees.

    Assuming "default" put the applied resource (no clusterRef) on another
    cluster, so plan showed its owned key as a removal that will not happen.
    """
    assert stack.cluster != "default"
    tag = uuid.uuid4().hex[:6]
    applied, new = Entity.for_user(f"cli-dc-a-{tag}"), Entity.for_user(f"cli-dc-b-{tag}")
    cluster = ["--cluster", stack.cluster, "--kubeconfig", str(stack.kube.kubeconfig)]
    ns = applied_without_cluster_ref(stack, str(applied.user), {"producerByteRate": 2048})
    try:
        manifest = tmp_path / "new.yaml"
        manifest.write_text(
            json.dumps(client_quota(ns, "new", {"user": {"name": new.user}}, {"producerByteRate": 1024}))
        )
        doc = kquota_json("plan", "-f", str(manifest), *cluster, *entity_globs([applied, new]), expect=2)
        assert [(r["action"], r["entity"]["path"]) for r in doc["rows"]] == [("add", new.path())]
        assert doc["defaultCluster"] == {
            "name": stack.cluster,
            "source": "the operator's, from ConfigMap kquota-system/kquota-operator",
        }

        # Where no operator published its settings, plan refuses to guess.
        code, _, err = kquota("plan", "-f", str(manifest), *cluster, "--ledger-namespace", f"nothing-{tag}")
        assert code == 1
        assert f"no ConfigMap nothing-{tag}/kquota-operator" in err
        assert "pass --default-cluster NAME" in err
    finally:
        stack.kube.kubectl("delete", "clientquota", "managed", "-n", ns, "--timeout=60s", check=False)


def test_plan_piped_into_head_exits_with_its_own_code(stack: Stack, tmp_path: Path) -> None:
    """``kquota plan | head -n 3``: far more rows than a pipe holds, no traceback, and still exit 2 (changes)."""
    tag = uuid.uuid4().hex[:6]
    quotas = [
        client_quota("team-a", f"q-{i}", {"user": {"name": f"cli-pipe-{tag}-{i}"}}, {"producerByteRate": 1024})
        for i in range(1500)
    ]
    manifest = tmp_path / "many.yaml"
    manifest.write_text("\n---\n".join(json.dumps(q) for q in quotas))
    command = [
        sys.executable, "-m", "kquota.cli.main", "plan", "-f", str(manifest),
        "--bootstrap-server", stack.kafka.bootstrap, "--entity", f"users/cli-pipe-{tag}-*",
    ]  # fmt: skip
    script = " ".join(f"'{a}'" for a in command) + ' | head -n 3; echo "exit=${PIPESTATUS[0]}" >&2'
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=180, check=False)
    assert result.stdout.startswith("Plan for "), result.stdout
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr, result.stderr
    assert result.stderr.strip().endswith("exit=2"), result.stderr


# --- explain against what the broker enforces -----------------------------------------

TINY = 1024.0
HUGE = 1073741824.0
PURE_DEFAULTS = [Entity.for_user(None), Entity.for_client(None), Entity.for_pair(None, None)]


def _one_per_level() -> list[Any]:
    seen: set[object] = set()
    out = []
    for case in DOC_CASES:
        if case.values[3] not in seen:
            seen.add(case.values[3])
            out.append(case)
    return out


#: The first row of the resolver's documentation table for each precedence level.
LEVEL_CASES = _one_per_level()


def rename(entity: Entity, names: dict[str, str]) -> Entity:
    def sub(name: str | None) -> str | None:
        return None if name is None else names[name]

    if entity.has_user and entity.has_client_id:
        return Entity.for_pair(sub(entity.user), sub(entity.client_id))
    return Entity.for_user(sub(entity.user)) if entity.has_user else Entity.for_client(sub(entity.client_id))


_SERIES = re.compile(r"^(\w+)\{([^}]*)\}\s+(\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def produce_series(kafka: KafkaCluster, user: str, client: str) -> dict[str, tuple[dict[str, str], float]]:
    """The broker's Produce quota series that mention this user or client-id: metric -> (labels, value)."""
    out: dict[str, tuple[dict[str, str], float]] = {}
    for line in kafka.brokers[0].metrics_text().splitlines():
        match = _SERIES.match(line)
        if not match or not match.group(1).startswith("kafka_server_quota_"):
            continue
        labels = dict(_LABEL.findall(match.group(2)))
        if labels.pop("resource", None) != "Produce":
            continue
        if labels.get("user") == user or labels.get("clientId") == client:
            assert match.group(1) not in out, f"two {match.group(1)} series for {user}/{client}: {line}"
            out[match.group(1)] = (labels, float(match.group(3)))
    return out


def throttled_produce(kafka: KafkaCluster, user: str, password: str, client: str, topic: str) -> float:
    """Produce until the broker throttles this client; the largest throttle time it reported (ms)."""
    from confluent_kafka import Producer

    throttles: list[float] = []
    producer = Producer(
        {
            **kafka.client_config(user, password),
            "client.id": client,
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
            "linger.ms": 0,
        }
    )
    deadline = time.monotonic() + 30
    while not any(t > 0 for t in throttles) and time.monotonic() < deadline:
        producer.produce(topic, b"x" * 32768)
        producer.flush(15)
        producer.poll(0.5)
    producer.flush(5)
    return max(throttles, default=0.0)


@pytest.mark.slow
@pytest.mark.parametrize(("paths", "connection", "expected_path", "expected_level"), LEVEL_CASES)
def test_explain_agrees_with_what_the_broker_enforces(
    kafka: KafkaCluster, paths: list[str], connection: Any, expected_path: str, expected_level: int
) -> None:
    """The value explain names is the one the broker throttles with, in the bucket explain names.

    The winning entity gets a tiny producer rate, every entity it overrides a huge
    one: a throttle proves the broker enforces the tiny value, and the labels of the
    broker's quota metrics show which bucket (user, client-id, or both) it used.
    """
    tag = secrets.token_hex(4)
    names = {n: f"x{n.lower()}-{tag}" for n in ("user1", "user2", "clientA", "clientB")}
    user, client = names[connection.user], names[connection.client_id]
    password = secrets.token_hex(12)
    entries = {rename(DOC[p], names): {P: TINY if p == expected_path else HUGE} for p in paths}
    winner = rename(DOC[expected_path], names)
    topic = f"cli-explain-{tag}"

    from confluent_kafka.admin import AdminClient, NewTopic

    topics = AdminClient(kafka.client_config())  # kept: futures fail when their client is destroyed
    for future in topics.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(timeout=60)
    kafka.create_scram_user(user, password)
    # Other modules may have left default quotas; they would compete with the table's.
    with restored(kafka, [*PURE_DEFAULTS, *entries]):
        set_exactly(kafka, {e: {} for e in PURE_DEFAULTS}, keys=[P])
        set_exactly(kafka, entries, keys=[P])

        doc = kquota_json("explain", "--bootstrap-server", kafka.bootstrap, "--user", user, "--client-id", client)
        produce = next(k for k in doc["keys"] if k["key"] == "producer_byte_rate")
        assert (produce["entity"]["path"], produce["level"], produce["value"]) == (winner.path(), expected_level, TINY)
        assert {o["entity"]["path"] for o in produce["overrides"]} <= {e.path() for e in entries}
        bucket = produce["bucket"]

        throttle = throttled_produce(kafka, user, password, client, topic)
        assert throttle > 0, "the broker did not throttle: it does not enforce the value explain names"
        series = wait_for(
            lambda: produce_series(kafka, user, client).get("kafka_server_quota_throttle_time"),
            20,
            "the broker's Produce throttle-time series for this client",
        )
        labels, value = series
        expected_labels = {k: v for k, v in (("user", bucket["user"]), ("clientId", bucket["clientId"])) if v}
        assert labels == expected_labels, f"explain says bucket {bucket}; the broker throttles {labels}"
        assert not math.isnan(value)
        assert value > 0
