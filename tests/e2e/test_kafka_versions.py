"""The e2e core against every Kafka a user still runs (issue 23, item 3).

Each case is a broker of its own (KRaft or ZooKeeper mode), an operator pointing
at it and the session's API server, and runs the core: every entity form through
create, modify and delete (read back with Kafka's own kafka-configs, an
independent client), an out-of-band change corrected, a conflict between two
resources on one key, and a producer over its quota seen as Throttled in status.

The rest of the suite runs on the newest Kafka (harness default, 4.3.1). By default
this module runs only the 3.9 ZooKeeper case, the one mode nothing else covers;
``KQUOTA_KAFKA_MATRIX=all`` (``make test-matrix``) runs every case: the newest,
4.0, 3.9 in KRaft and ZooKeeper mode, and the floor, 3.0 in ZooKeeper mode
(README, "Supported versions", says why that is the floor). Cases not selected
are reported as skipped, with the variable that runs them.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest

# confluent-kafka's type hints do not re-export NewTopic, which is its documented import path.
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from harness.kafka_cluster import DEFAULT_VERSION, LAST_3X_VERSION, KafkaCluster
from harness.kube_apiserver import KubeAPIServer
from harness.operator_proc import apply, client_quota, condition, get, wait_for
from harness.stack import Stack

from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.manifests import entity_spec
from tests.support.load import ProducerLoad
from tests.support.names import uniq
from tests.support.quotas import FORMS, C, M, N, P, R
from tests.support.stacks import metrics_cluster, own_stack

pytestmark = [pytest.mark.e2e, pytest.mark.kafka_matrix]


@dataclass(frozen=True)
class Case:
    version: str
    zookeeper: bool

    @property
    def id(self) -> str:
        return f"{self.version}-{'zookeeper' if self.zookeeper else 'kraft'}"


#: The default ``make test`` case: ZooKeeper mode, which no other module runs.
DEFAULT_CASE = Case(LAST_3X_VERSION, zookeeper=True)
#: The whole matrix (``KQUOTA_KAFKA_MATRIX=all``). 3.0 is the floor; KRaft below 3.5 cannot
#: hold SCRAM credentials (KIP-900), so the floor runs in ZooKeeper mode, as 3.0 users did.
MATRIX = (
    Case(DEFAULT_VERSION, zookeeper=False),
    Case("4.0.2", zookeeper=False),
    Case(LAST_3X_VERSION, zookeeper=False),
    DEFAULT_CASE,
    Case("3.0.2", zookeeper=True),
)
SELECTION = os.environ.get("KQUOTA_KAFKA_MATRIX", "default")
if SELECTION not in ("default", "all"):
    raise pytest.UsageError(f"KQUOTA_KAFKA_MATRIX={SELECTION!r}: expected 'all' or unset")


def _params() -> list[Any]:
    params = []
    for case in MATRIX:
        marks = []
        if SELECTION != "all" and case != DEFAULT_CASE:
            marks.append(pytest.mark.skip(reason="KQUOTA_KAFKA_MATRIX=all (make test-matrix) runs this case"))
        params.append(pytest.param(case, id=case.id, marks=marks))
    return params


@pytest.fixture(scope="module", params=_params())
def stack(
    request: pytest.FixtureRequest, kube: KubeAPIServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    case: Case = request.param
    name = "kv-" + re.sub(r"[^a-z0-9]", "", case.id)[:10]
    started = time.monotonic()
    with own_stack(kube, tmp_path_factory, name, {}, version=case.version, zookeeper=case.zookeeper) as (broker, s):
        assert broker.mode == ("zookeeper" if case.zookeeper else "kraft")
        print(f"Kafka {case.id}: broker and operator up in {time.monotonic() - started:.1f}s")
        yield s


# -- Kafka's own view ------------------------------------------------------------------------------------------------

_LINE = re.compile(r"^Quota configs for (?P<entity>.+) are (?P<values>.*)$")
_PART = re.compile(
    r"^(?:the default (?P<default>user-principal|client-id|ip)"
    r"|(?P<type>user-principal|client-id|ip) '(?P<name>[^']*)')$"
)
_TYPES = {"user-principal": "user", "client-id": "client-id", "ip": "ip"}


def parse_kafka_configs(text: str) -> dict[Entity, dict[QuotaKey, float]]:
    """kafka-configs --describe output (the same from 3.0 to 4.3) -> {entity: {key: value}}.

    Lines look like ``Quota configs for user-principal 'u', the default client-id are
    producer_byte_rate=1000.0, request_percentage=12.5``. Good for the names this module
    makes (no commas or quotes in them); SCRAM lines are not quota lines and are skipped.
    """
    out: dict[Entity, dict[QuotaKey, float]] = {}
    for line in text.splitlines():
        match = _LINE.match(line.strip())
        if not match:
            continue
        parts: dict[str, str | None] = {}
        for part in match["entity"].split(", "):
            m = _PART.match(part)
            assert m, f"unexpected entity {part!r} in {line!r}"
            if m["default"]:
                parts[_TYPES[m["default"]]] = None
            else:
                parts[_TYPES[m["type"]]] = m["name"]
        values = {}
        for item in match["values"].split(", "):
            key, _, value = item.partition("=")
            values[QuotaKey(key)] = float(value)
        out[Entity.from_parts(parts)] = values
    return out


def kafka_configs_quotas(kafka: KafkaCluster) -> dict[Entity, dict[QuotaKey, float]]:
    """Every client quota on the broker as Kafka's kafka-configs lists it (four listings, run side by side)."""
    listings = (["users"], ["clients"], ["users", "clients"], ["ips"])

    def describe(types: list[str]) -> str:
        args = ["--describe"]
        for t in types:
            args += ["--entity-type", t]
        result = kafka.kafka_configs(*args)
        assert result.returncode == 0, result.stderr
        return result.stdout

    with ThreadPoolExecutor(len(listings)) as pool:
        texts = list(pool.map(describe, listings))
    out: dict[Entity, dict[QuotaKey, float]] = {}
    for text in texts:
        out |= parse_kafka_configs(text)
    return out


def wait_kafka_configs(
    kafka: KafkaCluster, expected: dict[Entity, dict[QuotaKey, float]], timeout: float = 45
) -> dict[Entity, dict[QuotaKey, float]]:
    """Wait until kafka-configs shows exactly ``expected`` for those entities ({} = the entity has no quota)."""
    seen: dict[Entity, dict[QuotaKey, float]] = {}

    def matches() -> bool:
        nonlocal seen
        seen = kafka_configs_quotas(kafka)
        return all(seen.get(e, {}) == v for e, v in expected.items())

    wait_for(
        matches,
        timeout,
        "kafka-configs --describe shows the expected quotas",
        interval=1.0,
        on_timeout=lambda: "\n".join(f"{e.path()}: want {v}, kafka-configs {seen.get(e)}" for e, v in expected.items()),
    )
    return seen


def wait_condition(
    stack: Stack,
    ns: str,
    name: str,
    reason: str,
    status: str = "True",
    kind: str = "clientquota",
    ctype: str = "Ready",
    timeout: float = 30,
) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        obj = get(stack.kube, kind, ns, name)
        if obj is None:
            return None
        cond = condition(obj, ctype)
        # Ready must be about the current spec; the observed conditions carry no generation.
        observed = (obj.get("status") or {}).get("observedGeneration")
        current = ctype != "Ready" or observed == obj["metadata"]["generation"]
        if current and cond.get("status") == status and cond.get("reason") == reason:
            return obj
        return None

    found: dict[str, Any] = wait_for(
        reached,
        timeout,
        f"{kind} {ns}/{name} {ctype}={status} ({reason})",
        on_timeout=lambda: json.dumps(get(stack.kube, kind, ns, name)) + "\n" + stack.operator.log()[-4000:],
    )
    return found


# -- the core ---------------------------------------------------------------------------------------------------------


def _quota(entity: Entity, step: int) -> tuple[dict[str, Any], dict[QuotaKey, float]]:
    """(spec.quota, what the broker must then hold) for step 0 (create) and 1 (modify)."""
    if entity.is_ip:
        return ({"connectionCreationRate": 20}, {N: 20.0}) if step == 0 else ({"connectionCreationRate": 40}, {N: 40.0})
    if step == 0:
        return {"producerByteRate": "1Mi", "requestPercentage": 50}, {P: 1048576.0, R: 50.0}
    return {"producerByteRate": 2048, "consumerByteRate": "4Ki"}, {P: 2048.0, C: 4096.0}


def test_every_entity_form_is_created_modified_and_deleted(stack: Stack) -> None:
    # test_reconcile's forms: user, client-id, pairs, every default, ip, a TLS principal, a user
    # literally named <default>. Default entities are per broker; each case has a broker of its own.
    ns = stack.new_namespace()
    entities = {f"q{i}": make() for i, make in enumerate(FORMS.values())}
    mutator = Entity.for_client(uniq("mutator"))
    mutation_quota: dict[str, Any] = {
        "apiVersion": "kquota.io/v1alpha1",
        "kind": "ControllerMutationQuota",
        "metadata": {"name": "m", "namespace": ns},
        "spec": {"entity": {"clientId": {"name": mutator.client_id}}, "rate": 2},
    }
    for step in (0, 1):
        apply(
            stack.kube,
            *(client_quota(ns, name, entity_spec(e), _quota(e, step)[0]) for name, e in entities.items()),
            dict(mutation_quota, spec=dict(mutation_quota["spec"], rate=2 + step)),
        )
        expected = {e: _quota(e, step)[1] for e in entities.values()} | {mutator: {M: 2.0 + step}}
        wait_kafka_configs(stack.kafka, expected)
        for name, entity in entities.items():
            obj = wait_condition(stack, ns, name, "Applied")
            assert obj["status"]["entity"] == entity.path()
            assert obj["status"]["applied"]["values"] == {k.value: v for k, v in _quota(entity, step)[1].items()}
        mutation = wait_condition(stack, ns, "m", "Applied", kind="controllermutationquota")
        # The burst comes from the brokers' own settings (DescribeConfigs), Kafka's defaults here.
        assert mutation["status"]["burst"]["windowNum"] == 11, mutation["status"]
        assert mutation["status"]["burst"]["windowSizeSeconds"] == 1, mutation["status"]

    stack.kube.kubectl("delete", "clientquota,controllermutationquota", "--all", "-n", ns, "--timeout=60s")
    seen = wait_kafka_configs(stack.kafka, {e: {} for e in [*entities.values(), mutator]})
    assert not ({*entities.values(), mutator} & seen.keys()), seen


def test_kafka_cluster_is_connected(stack: Stack) -> None:
    """The KafkaCluster's status comes from DescribeCluster (Kafka 2.8+), one of the APIs that set the floor."""

    def connected() -> dict[str, Any] | None:
        obj = json.loads(stack.kube.kubectl("get", "kafkacluster", stack.cluster, "-o", "json").stdout)
        return obj if condition(obj).get("reason") == "Connected" else None

    obj = wait_for(connected, 30, f"KafkaCluster {stack.cluster} Ready=True, reason Connected")
    assert condition(obj)["status"] == "True"
    assert obj["status"]["brokers"] == 1


def test_out_of_band_change_is_corrected(stack: Stack) -> None:
    ns = stack.new_namespace()
    user = Entity.for_user(uniq("drift"))
    apply(stack.kube, client_quota(ns, "q", entity_spec(user), {"producerByteRate": 100000}))
    wait_condition(stack, ns, "q", "Applied")
    wait_kafka_configs(stack.kafka, {user: {P: 100000.0}})
    drift_before = stack.operator.metric("kquota_drift_corrections_total")

    changed = stack.kafka.kafka_configs(
        "--alter", "--entity-type", "users", "--entity-name", str(user.user), "--add-config", "producer_byte_rate=5"
    )
    assert changed.returncode == 0, changed.stderr
    wait_kafka_configs(stack.kafka, {user: {P: 100000.0}}, timeout=stack.operator.drift_interval + 30)
    assert stack.operator.metric("kquota_drift_corrections_total") > drift_before
    stack.kube.kubectl("delete", "clientquota", "q", "-n", ns, "--timeout=30s")


def test_conflict_older_resource_wins_the_key(stack: Stack) -> None:
    ns = stack.new_namespace()
    user = Entity.for_user(uniq("contested"))
    apply(stack.kube, client_quota(ns, "first", entity_spec(user), {"producerByteRate": 1000}))
    wait_condition(stack, ns, "first", "Applied")
    apply(
        stack.kube, client_quota(ns, "second", entity_spec(user), {"producerByteRate": 9999, "consumerByteRate": 2000})
    )
    second = wait_condition(stack, ns, "second", "Conflict", status="False")
    assert f"ClientQuota {ns}/first" in condition(second)["message"]
    # The loser's uncontested key is applied; the contested one is the winner's.
    wait_kafka_configs(stack.kafka, {user: {P: 1000.0, C: 2000.0}})

    stack.kube.kubectl("delete", "clientquota", "first", "-n", ns, "--timeout=30s")
    wait_kafka_configs(stack.kafka, {user: {P: 9999.0, C: 2000.0}})
    wait_condition(stack, ns, "second", "Applied")
    stack.kube.kubectl("delete", "clientquota", "second", "-n", ns, "--timeout=30s")


QUOTA = 100_000


def test_producer_over_its_quota_is_throttled_in_status(stack: Stack) -> None:
    user, password = uniq("producer"), uuid.uuid4().hex
    stack.kafka.create_scram_user(user, password)
    cluster = metrics_cluster(stack)  # a KafkaCluster on the same broker, reading its metrics
    ns = stack.new_namespace()
    try:
        apply(
            stack.kube,
            client_quota(
                ns, "producer", entity_spec(Entity.for_user(user)), {"producerByteRate": QUOTA}, cluster=cluster
            ),
        )
        wait_condition(stack, ns, "producer", "Applied")
        topic = uniq("throttled")
        admin = AdminClient(stack.kafka.client_config())  # kept: a collected client cancels its futures
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        load = ProducerLoad(stack.kafka.client_config(user, password), topic, rate=3 * QUOTA)
        load.start()
        try:
            obj = wait_condition(stack, ns, "producer", "ThrottleObserved", ctype="Throttled", timeout=45)
        finally:
            load.finish()
        assert obj["status"]["observed"]["total"]["produceThrottleTimeMs"] > 0, obj["status"]["observed"]
        assert load.throttles and max(load.throttles) > 0, "the client itself saw throttling"
        assert condition(obj)["status"] == "True", "throttling is not a failure of the resource"
    finally:
        stack.kube.kubectl("delete", "clientquota", "--all", "-n", ns, "--timeout=30s", check=False)
        stack.kube.kubectl("delete", "kafkacluster", cluster, "--timeout=30s", check=False)
