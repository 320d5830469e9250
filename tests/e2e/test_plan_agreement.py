"""`kquota plan` is the operator's decision: on each scenario, the plan's rows are exactly what the operator does.

Each scenario sets a state (hand-set quotas, a KafkaCluster, resources applied
and settled, maybe a key changed by hand), then plans a change (manifests to
apply, including the KafkaCluster itself, and resources to delete) with the
CLI, applies it with kubectl, lets the operator settle, and compares the
brokers before and after with the plan: every add, change and remove row
happened with the plan's values, nothing else changed (``keep``, ``held``,
``own``, ``unmanaged`` and ``protected`` rows change nothing), every removal
is a ``QuotaRemoved`` event naming the key, and Kafka's own ``kafka-configs``
agrees on the first entity changed.

The module runs on a broker of its own (Adopt scenarios remove every
unclaimed quota on the brokers) and an operator run as the chart runs it,
with the mass-removal guard on.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from harness.kafka_cluster import KafkaCluster
from harness.kube_apiserver import KubeAPIServer
from harness.operator_proc import LEDGER_NAMESPACE, client_quota, condition, kafka_cluster_manifest, wait_for
from harness.stack import Stack

from kquota.cli.main import main
from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.guard import APPROVAL_ANNOTATION
from kquota.domain.plan import EntityChange, QuotaOp
from kquota.kafka.admin import QuotaAdmin
from kquota.kafka.settings import ConnectionSettings
from tests.support.quotas import C, N, P, R
from tests.support.stacks import own_stack

pytestmark = pytest.mark.e2e

Quotas = dict[Entity, dict[QuotaKey, float]]
KEYS = {"producerByteRate": P, "consumerByteRate": C, "requestPercentage": R, "connectionCreationRate": N}


@pytest.fixture(scope="module")
def own(kube: KubeAPIServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KafkaCluster, Stack]]:
    with own_stack(kube, tmp_path_factory, "agreement", {"KQUOTA_DELETION_GUARD": "true"}) as pair:
        yield pair


@pytest.fixture(scope="module")
def broker(own: tuple[KafkaCluster, Stack]) -> KafkaCluster:
    return own[0]


@pytest.fixture(scope="module")
def stack(own: tuple[KafkaCluster, Stack]) -> Stack:
    return own[1]


# --- scenarios -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Res:
    """A ClientQuota: name, entity spec, quota spec (camelCase, as in a manifest)."""

    name: str
    entity: dict[str, Any]
    quota: dict[str, Any]


@dataclass
class Scenario:
    #: Quotas set by hand before anything else (unmanaged).
    hand: Quotas = field(default_factory=dict)
    #: The KafkaCluster's extra spec before, and in the planned manifests (None: not in -f).
    cluster_before: dict[str, Any] = field(default_factory=dict)
    cluster_after: dict[str, Any] | None = None
    before: list[Res] = field(default_factory=list)
    after: list[Res] = field(default_factory=list)
    #: Names of resources of ``before`` deleted by the change.
    delete: list[str] = field(default_factory=list)
    #: Keys changed by hand after ``before`` settled (drift).
    drift: Quotas = field(default_factory=dict)
    #: Actions the plan must show (a sanity check that the scenario tests what it says).
    expect: set[str] = field(default_factory=set)


def user(name: str) -> dict[str, Any]:
    return {"user": {"name": name}}


def u(tag: str, name: str) -> str:
    return f"{tag}-{name}"


Builder = Callable[[str, str], Scenario]


def _scenarios() -> dict[str, Builder]:
    """Scenario builders: (tag for unique names, namespace) -> Scenario."""
    s: dict[str, Builder] = {}
    s["add a user quota"] = lambda t, ns: Scenario(
        after=[Res("a", user(u(t, "alice")), {"producerByteRate": "20Mi"})], expect={"add"}
    )
    s["change a value"] = lambda t, ns: Scenario(
        before=[Res("a", user(u(t, "alice")), {"producerByteRate": "1Mi"})],
        after=[Res("a", user(u(t, "alice")), {"producerByteRate": "2Mi"})],
        expect={"change"},
    )
    s["remove a key from the spec"] = lambda t, ns: Scenario(
        before=[Res("a", user(u(t, "alice")), {"producerByteRate": 1024, "requestPercentage": 50})],
        after=[Res("a", user(u(t, "alice")), {"producerByteRate": 1024})],
        expect={"remove"},
    )
    s["delete a resource"] = lambda t, ns: Scenario(
        before=[
            Res("a", user(u(t, "alice")), {"consumerByteRate": 4096}),
            Res("b", user(u(t, "bob")), {"consumerByteRate": 1}),
        ],
        delete=["a"],
        expect={"remove"},
    )
    # spec.entity is immutable: a quota moves to another principal by a delete and a create.
    s["move a quota to another principal"] = lambda t, ns: Scenario(
        before=[Res("a", user(u(t, "old")), {"producerByteRate": 1000})],
        after=[Res("b", user(u(t, "new")), {"producerByteRate": 1000})],
        delete=["a"],
        expect={"add", "remove"},
    )
    s["user and client-id pair"] = lambda t, ns: Scenario(
        after=[Res("a", {**user(u(t, "alice")), "clientId": {"name": u(t, "app")}}, {"producerByteRate": 3000})],
        expect={"add"},
    )
    s["user with the default client-id"] = lambda t, ns: Scenario(
        after=[Res("a", {**user(u(t, "alice")), "clientId": {"default": True}}, {"consumerByteRate": 7000})],
        expect={"add"},
    )
    s["an ip's connection rate"] = lambda t, ns: Scenario(
        after=[Res("a", {"ip": {"name": "10.20.30.40"}}, {"connectionCreationRate": 33})], expect={"add"}
    )
    s["a fractional request percentage"] = lambda t, ns: Scenario(
        after=[Res("a", user(u(t, "alice")), {"requestPercentage": 12.5})], expect={"add"}
    )
    s["several keys change at once"] = lambda t, ns: Scenario(
        before=[Res("a", user(u(t, "alice")), {"producerByteRate": 1, "consumerByteRate": 2})],
        after=[Res("a", user(u(t, "alice")), {"producerByteRate": 10, "consumerByteRate": 20, "requestPercentage": 5})],
        expect={"change", "add"},
    )
    s["change one key and drop another"] = lambda t, ns: Scenario(
        before=[Res("a", user(u(t, "alice")), {"producerByteRate": 1, "consumerByteRate": 2})],
        after=[Res("a", user(u(t, "alice")), {"producerByteRate": 11})],
        expect={"change", "remove"},
    )
    s["two resources, the older wins the key"] = lambda t, ns: Scenario(
        before=[Res("a", user(u(t, "alice")), {"producerByteRate": 100})],
        after=[Res("b", user(u(t, "alice")), {"producerByteRate": 999, "consumerByteRate": 5})],
        expect={"add"},
    )
    s["deleting the winner lets the loser take the key"] = lambda t, ns: Scenario(
        before=[
            Res("a", user(u(t, "alice")), {"producerByteRate": 100}),
            Res("b", user(u(t, "alice")), {"producerByteRate": 999}),
        ],
        delete=["a"],
        expect={"change"},
    )
    s["Ignore: a resource takes over a hand-set key"] = lambda t, ns: Scenario(
        hand={Entity.for_user(u(t, "alice")): {P: 777.0}},
        after=[Res("a", user(u(t, "alice")), {"producerByteRate": 2000})],
        expect={"change"},
    )
    s["Ignore: hand-set keys nobody claims stay"] = lambda t, ns: Scenario(
        hand={Entity.for_user(u(t, "hand")): {C: 555.0}},
        after=[Res("a", user(u(t, "alice")), {"producerByteRate": 2000})],
        expect={"add", "unmanaged"},
    )
    s["an owned key changed by hand is restored"] = lambda t, ns: Scenario(
        before=[Res("a", user(u(t, "alice")), {"producerByteRate": 5000})],
        drift={Entity.for_user(u(t, "alice")): {P: 1.0}},
        after=[Res("a", user(u(t, "alice")), {"producerByteRate": 5000})],
        expect={"change"},
    )
    s["an unchanged apply changes nothing"] = lambda t, ns: Scenario(
        before=[Res("a", user(u(t, "alice")), {"producerByteRate": 5000})],
        after=[Res("a", user(u(t, "alice")), {"producerByteRate": 5000})],
        expect=set(),
    )
    s["a value already set by hand becomes owned"] = lambda t, ns: Scenario(
        hand={Entity.for_user(u(t, "alice")): {P: 4096.0}},
        after=[Res("a", user(u(t, "alice")), {"producerByteRate": 4096})],
        expect={"own"},
    )
    s["switch to Adopt removes unclaimed quotas"] = lambda t, ns: Scenario(
        hand={Entity.for_user(u(t, "h1")): {C: 1.0}, Entity.for_client(u(t, "tool")): {P: 2.0}},
        before=[Res("a", user(u(t, "alice")), {"producerByteRate": 100})],
        cluster_after={"unmanaged": {"policy": "Adopt"}},
        expect={"remove"},
    )
    s["switch to Adopt spares protected users"] = lambda t, ns: Scenario(
        hand={Entity.for_user(u(t, "admin")): {C: 1.0}, Entity.for_user(u(t, "h1")): {C: 3.0}},
        cluster_after={"unmanaged": {"policy": "Adopt"}, "protectedUsers": [u(t, "admin")]},
        expect={"remove"},
    )
    s["switch to Adopt over many hand-made quotas is held"] = lambda t, ns: Scenario(
        hand={Entity.for_user(u(t, f"h{i}")): {C: float(i + 1)} for i in range(15)},
        cluster_after={"unmanaged": {"policy": "Adopt"}},
        expect={"held"},
    )
    # Under Adopt from the start, the hand-set quotas are gone before the plan: it only adds.
    s["Adopt already on: a new resource adds"] = lambda t, ns: Scenario(
        hand={Entity.for_user(u(t, "alice")): {P: 1.0, C: 2.0}},
        cluster_before={"unmanaged": {"policy": "Adopt"}},
        after=[Res("a", user(u(t, "alice")), {"producerByteRate": 10})],
        expect={"add"},
    )
    s["Adopt already on: a hand-set key on a claimed entity is removed with the claim's change"] = lambda t, ns: (
        Scenario(
            cluster_before={"unmanaged": {"policy": "Adopt"}},
            before=[Res("a", user(u(t, "alice")), {"producerByteRate": 10})],
            after=[Res("a", user(u(t, "alice")), {"producerByteRate": 20})],
            expect={"change"},
        )
    )
    s["tenancy on: a resource outside its grant keeps its keys"] = lambda t, ns: Scenario(
        before=[
            Res("a", user(u(t, "team-app")), {"producerByteRate": 2048}),
            Res("b", user(u(t, "legacy")), {"producerByteRate": "21Mi"}),
        ],
        cluster_after={"tenancy": {"grants": [{"namespaces": [ns], "users": [f"{t}-team-*"]}]}},
        expect={"keep"},
    )
    s["tenancy on: an ip outside its grant keeps its rate"] = lambda t, ns: Scenario(
        before=[Res("a", {"ip": {"name": "10.99.0.1"}}, {"connectionCreationRate": 50})],
        cluster_after={"tenancy": {"grants": [{"namespaces": [ns], "users": ["*"]}]}},
        expect={"keep"},
    )
    s["tenancy: a new resource outside the grant sets nothing"] = lambda t, ns: Scenario(
        cluster_before={"tenancy": {"grants": [{"namespaces": [ns], "users": [f"{t}-team-*"]}]}},
        after=[
            Res("a", user(u(t, "team-x")), {"producerByteRate": 10}),
            Res("b", user(u(t, "other")), {"producerByteRate": 10}),
        ],
        expect={"add"},
    )
    s["tenancy widened: a refused resource is applied"] = lambda t, ns: Scenario(
        cluster_before={"tenancy": {"grants": [{"namespaces": [ns], "users": [f"{t}-team-*"]}]}},
        before=[Res("b", user(u(t, "other")), {"producerByteRate": 10})],
        cluster_after={"tenancy": {"grants": [{"namespaces": [ns], "users": ["*"]}]}},
        expect={"add"},
    )
    s["protecting a user leaves its quota alone"] = lambda t, ns: Scenario(
        before=[Res("a", user(u(t, "svc")), {"producerByteRate": 10})],
        cluster_after={"protectedUsers": [u(t, "svc")]},
        after=[Res("a", user(u(t, "svc")), {"producerByteRate": 20})],
        expect={"protected"},
    )
    s["unprotecting a user applies its resource"] = lambda t, ns: Scenario(
        cluster_before={"protectedUsers": [u(t, "svc")]},
        before=[Res("a", user(u(t, "svc")), {"producerByteRate": 10})],
        cluster_after={"protectedUsers": []},
        expect={"add"},
    )
    s["deleting many resources at once is held"] = lambda t, ns: Scenario(
        before=[Res(f"q{i}", user(u(t, f"app{i}")), {"producerByteRate": 1000 + i}) for i in range(12)],
        delete=[f"q{i}" for i in range(12)],
        expect={"held"},
    )
    s["deleting a few of many goes through"] = lambda t, ns: Scenario(
        before=[Res(f"q{i}", user(u(t, f"app{i}")), {"producerByteRate": 1000 + i}) for i in range(12)],
        delete=["q0", "q1"],
        expect={"remove"},
    )
    s["the default user's quota"] = lambda t, ns: Scenario(
        after=[Res("a", {"user": {"default": True}, "clientId": {"name": u(t, "app")}}, {"consumerByteRate": 9000})],
        expect={"add"},
    )
    return s


SCENARIOS = _scenarios()


# --- running one -----------------------------------------------------------------------------


def manifest(ns: str, cluster: str, r: Res) -> dict[str, Any]:
    return client_quota(ns, r.name, r.entity, r.quota, cluster=cluster)


def cluster_doc(name: str, bootstrap: str, spec: dict[str, Any]) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(kafka_cluster_manifest(name, bootstrap, spec))
    return doc


def live(kafka: KafkaCluster) -> Quotas:
    admin = QuotaAdmin(ConnectionSettings(bootstrap_servers=kafka.bootstrap))
    try:
        return admin.describe_all()
    finally:
        admin.close()


def set_by_hand(kafka: KafkaCluster, quotas: Quotas, remove: bool = False) -> None:
    admin = QuotaAdmin(ConnectionSettings(bootstrap_servers=kafka.bootstrap))
    try:
        results = admin.alter(
            [
                EntityChange(e, tuple(QuotaOp(k, None if remove else v) for k, v in values.items()))
                for e, values in quotas.items()
            ]
        )
        assert all(r.ok for r in results), results
    finally:
        admin.close()


def apply_docs(stack: Stack, docs: list[dict[str, Any]]) -> None:
    if docs:
        text = "\n---\n".join(json.dumps(d) for d in docs)
        stack.kube.kubectl("apply", "-f", "-", input=text)


def settle(stack: Stack, cluster: str, ns: str) -> None:
    """Two full passes of ``cluster`` after now, and every resource's status at its generation."""
    passes = stack.operator.metric("kquota_reconcile_passes_total", cluster=cluster, result="ok")
    wait_for(
        lambda: stack.operator.metric("kquota_reconcile_passes_total", cluster=cluster, result="ok") >= passes + 2,
        60,
        f"two passes of {cluster}",
        on_timeout=stack.operator.log,
    )

    def observed() -> bool:
        items = json.loads(stack.kube.kubectl("get", "clientquotas", "-n", ns, "-o", "json").stdout)["items"]
        return all(
            (i.get("status") or {}).get("observedGeneration") == i["metadata"]["generation"]
            for i in items
            if not i["metadata"].get("deletionTimestamp")
        )

    wait_for(observed, 60, f"statuses in {ns} at their generation", on_timeout=stack.operator.log)
    # One more pass: a removal wakes the finalizer, whose pass may still be running.
    passes = stack.operator.metric("kquota_reconcile_passes_total", cluster=cluster, result="ok")
    wait_for(
        lambda: stack.operator.metric("kquota_reconcile_passes_total", cluster=cluster, result="ok") >= passes + 1,
        60,
        f"another pass of {cluster}",
    )


def plan_json(stack: Stack, workdir: Path, cluster: str, deleted: bool) -> dict[str, Any]:
    args = ["plan", "-f", str(workdir / "apply"), "--cluster", cluster, "--kubeconfig", str(stack.kube.kubeconfig)]
    args += ["--ledger-namespace", LEDGER_NAMESPACE, "-o", "json"]
    if deleted:
        args += ["--delete", str(workdir / "delete")]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    assert code in (0, 2, 3), f"plan failed ({code}): {err.getvalue()}"
    doc: dict[str, Any] = json.loads(out.getvalue())
    # The exit code is the plan's verdict too: 3 exactly when the guard will hold a removal,
    # 2 for other changes, 0 for none (the rows decide; `kquota plan --help`).
    actions = {r["action"] for r in doc["rows"]}
    want = 3 if "held" in actions else 2 if actions & {"add", "change", "remove"} else 0
    assert code == want, f"plan exited {code} for the actions {sorted(actions)} (expected {want})"
    return doc


def diff(before: Quotas, after: Quotas) -> set[tuple[str, str, float | None, float | None]]:
    out = set()
    for entity in set(before) | set(after):
        old, new = before.get(entity, {}), after.get(entity, {})
        for key in set(old) | set(new):
            if old.get(key) != new.get(key):
                out.add((entity.path(), key.value, old.get(key), new.get(key)))
    return out


def planned(doc: dict[str, Any]) -> set[tuple[str, str, float | None, float | None]]:
    return {
        (r["entity"]["path"], r["key"], r["live"], r["desired"] if r["action"] != "remove" else None)
        for r in doc["rows"]
        if r["action"] in ("add", "change", "remove")
    }


def release(stack: Stack, cluster: str) -> None:
    """Approve whatever the guard holds on ``cluster`` (cleanup)."""
    obj = json.loads(stack.kube.kubectl("get", "kafkacluster", cluster, "-o", "json").stdout)
    guard = condition(obj, "DeletionGuard")
    if guard.get("status") == "True":
        hold = guard["message"].rsplit(f"{APPROVAL_ANNOTATION}=", 1)[1].split()[0]
        stack.kube.kubectl("annotate", "kafkacluster", cluster, f"{APPROVAL_ANNOTATION}={hold}", "--overwrite")


def cleanup(stack: Stack, broker: KafkaCluster, cluster: str, ns: str) -> None:
    stack.kube.kubectl("delete", "clientquotas", "--all", "-n", ns, "--wait=false", check=False)

    def gone() -> bool:
        release(stack, cluster)
        items = json.loads(stack.kube.kubectl("get", "clientquotas", "-n", ns, "-o", "json").stdout)["items"]
        return not items

    wait_for(gone, 90, f"the resources of {ns} deleted", interval=1, on_timeout=stack.operator.log)
    stack.kube.kubectl("delete", "kafkacluster", cluster, "--timeout=30s", check=False)
    left = live(broker)
    if left:
        set_by_hand(broker, left, remove=True)
    wait_for(lambda: not live(broker), 30, "an empty broker")


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_plan_rows_are_what_the_operator_does(stack: Stack, broker: KafkaCluster, tmp_path: Path, name: str) -> None:
    tag = f"s{uuid.uuid4().hex[:6]}"
    ns = stack.new_namespace()
    cluster = f"agree-{tag}"
    sc = SCENARIOS[name](tag, ns)
    assert not live(broker), "each scenario starts from an empty broker"
    try:
        if sc.hand:
            set_by_hand(broker, sc.hand)
        apply_docs(stack, [cluster_doc(cluster, broker.bootstrap, sc.cluster_before)])
        apply_docs(stack, [manifest(ns, cluster, r) for r in sc.before])
        settle(stack, cluster, ns)
        if sc.drift:
            set_by_hand(broker, sc.drift)

        (tmp_path / "apply").mkdir()
        (tmp_path / "delete").mkdir()
        # The KafkaCluster first (kubectl applies a directory in file order): its change must reach
        # the operator before the resources it governs, or a resource edited in the same apply is
        # acted on under the old spec (a protectedUsers arriving 40 ms after the edit it protects).
        docs = []
        if sc.cluster_after is not None:
            docs.append(cluster_doc(cluster, broker.bootstrap, {**sc.cluster_before, **sc.cluster_after}))
        docs += [manifest(ns, cluster, r) for r in sc.after]
        for i, doc in enumerate(docs):
            (tmp_path / "apply" / f"{i:02}.json").write_text(json.dumps(doc))
        by_name = {r.name: r for r in sc.before}
        for i, r in enumerate(sc.delete):
            (tmp_path / "delete" / f"{i:02}.json").write_text(json.dumps(manifest(ns, cluster, by_name[r])))

        doc = plan_json(stack, tmp_path, cluster, bool(sc.delete))
        actions = {r["action"] for r in doc["rows"]}
        assert sc.expect <= actions and (sc.expect or not (actions & {"add", "change", "remove"})), (
            f"the scenario does not test what it says: rows {doc['rows']}"
        )
        before = live(broker)

        if docs:
            stack.kube.kubectl("apply", "-f", str(tmp_path / "apply"))
        if sc.delete:
            stack.kube.kubectl("delete", "-f", str(tmp_path / "delete"), "--wait=false")
        settle(stack, cluster, ns)
        after = live(broker)

        assert diff(before, after) == planned(doc), json.dumps(doc["rows"], indent=1)
        assert (doc["changes"] > 0) == bool(planned(doc))

        # Every removal is an event that names the key (on the resource, or the KafkaCluster).
        removed = [r for r in doc["rows"] if r["action"] == "remove"]
        if removed:
            events = "\n".join(
                e.get("message", "")
                for where in (ns, "default")
                for e in json.loads(stack.kube.kubectl("get", "events", "-n", where, "-o", "json").stdout)["items"]
                if e.get("reason") == "QuotaRemoved"
            )
            for r in removed:
                assert f"{r['key']} on {r['entity']['path']}" in events, f"no QuotaRemoved event for {r}"

        # Kafka's own tool agrees on the first entity the plan changed.
        changed = [r for r in doc["rows"] if r["action"] in ("add", "change", "remove")]
        if changed:
            first = changed[0]
            args = ["--describe"]
            parts = first["entity"]["parts"]
            for etype, flag in (("user", "users"), ("client-id", "clients"), ("ip", "ips")):
                if etype in parts:
                    args += ["--entity-type", flag]
                    args += ["--entity-default"] if parts[etype] is None else ["--entity-name", parts[etype]]
            described = broker.kafka_configs(*args)
            assert described.returncode == 0, described.stderr
            # Java prints doubles its own way (2.097152E7): compare numbers.
            found = re.search(rf"\b{first['key']}=([0-9.Ee+-]+)", described.stdout)
            if first["action"] == "remove":
                assert found is None, described.stdout
            else:
                assert found is not None and float(found.group(1)) == first["desired"], described.stdout

    finally:
        cleanup(stack, broker, cluster, ns)
