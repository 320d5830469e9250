"""Fault suite: kquota survives broken brokers, API servers and its own death, losing nothing.

Five scenarios, each with its own API server and operator, loopback only,
bounded in count (a few hundred resources) and time (every wait has a limit),
and stopping by itself (fixtures stop every process, also on failure):

1. the only broker is SIGKILLed mid-batch and restarted once the operator
   reports KafkaUnavailable;
2. the API server is restarted mid-batch (same port, data and credentials);
3. the operator is SIGKILLed mid-batch, and resources are changed and deleted
   while it is down;
4. the broker becomes slow: a proxy (harness/slowproxy.py) on its
   advertised SASL listener delays every chunk and now and then stalls;
5. a 3-broker cluster loses a broker (SIGKILL), converges with two, and all
   three agree once it is back.

Every scenario runs the same script. Unmanaged entries are seeded with
kafka-configs and the brokers' state is snapshotted; a workload thread creates
the resources in chunks; the fault is injected as soon as the first quotas
reach the broker (mid-batch however fast the machine is); only then does the
workload modify and delete some resources, so those changes meet the fault.
Then the suite waits (bounded) for convergence and checks the invariants of
harness/invariants.py: the brokers hold exactly the desired state, no
unmanaged entry changed, deleted resources left nothing behind. Throughout, a
watcher checks that no resource says Ready for values the broker does not
hold. Each scenario records itself in the resilience report
(harness/pytest_resilience.py) and then asserts: lost must be 0.

Scenarios 1-4 share one single-broker cluster (its SASL listener advertised
through the slow proxy, which is a plain pipe except in scenario 4); each uses
its own entity names and reads the previous scenarios' leftovers as unmanaged
entries that must stay untouched.

Run alone: ``make test-faults`` (``pytest -m faults``).
"""

from __future__ import annotations

import json
import secrets
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest
from harness import invariants
from harness.kafka_cluster import KafkaCluster
from harness.kube_apiserver import KubeAPIServer
from harness.operator_proc import (
    OperatorProcess,
    client_quota,
    condition,
    ensure_ledger_namespace,
    kafka_cluster_manifest,
    ready_for_generation,
    scram_security,
    wait_for,
)
from harness.slowproxy import SlowProxy
from harness.stack import Stack

from kquota.domain.entities import INTEGER_KEYS, Entity, QuotaKey
from tests.plugins.resilience import Resilience
from tests.support.quotas import C, P, R

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.faults]

FIELDS = {P: "producerByteRate", C: "consumerByteRate", R: "requestPercentage"}
KEYS = {v: k for k, v in FIELDS.items()}

#: Resources per scenario, and how many go in one kubectl apply.
SIZE = 300
CHUNK = 25
#: Bound on the wait for convergence once the fault is over.
CONVERGE_SECONDS = 180
#: Bound on anything the workload does (kubectl retried through outages).
WORKLOAD_SECONDS = 300


# -- quotas and the workload -----------------------------------------------------


@dataclass(frozen=True)
class Quota:
    """One ClientQuota as the workload sends it."""

    name: str
    entity: Entity
    spec_entity: dict[str, Any]
    values: dict[QuotaKey, float]

    def manifest(self, namespace: str) -> dict[str, Any]:
        quota = {FIELDS[k]: int(v) if k in INTEGER_KEYS else v for k, v in self.values.items()}
        return client_quota(namespace, self.name, self.spec_entity, quota)


def make_quota(prefix: str, i: int, version: int = 0) -> Quota:
    """Resource ``i`` at ``version``: four entity shapes, one to three keys, values unique per version."""
    bump = 1_000_000 * version
    user, client = f"{prefix}u{i}", f"{prefix}c{i}"
    kind = i % 4
    if kind == 0:
        return Quota(f"q{i}", Entity.for_user(user), {"user": {"name": user}}, {P: 10_000 + i + bump, C: 20_000 + i})
    if kind == 1:
        return Quota(f"q{i}", Entity.for_client(client), {"clientId": {"name": client}}, {P: 30_000 + i + bump})
    if kind == 2:
        return Quota(
            f"q{i}",
            Entity.for_pair(user, client),
            {"user": {"name": user}, "clientId": {"name": client}},
            {P: 40_000 + i + bump, R: 10 + (i % 50) + 0.5 * version},
        )
    return Quota(f"q{i}", Entity.for_user(user), {"user": {"name": user}}, {P: 50_000 + i + bump})


#: After create chunk k (key), these changes: ("modify"|"delete", resource indices). They
#: wait for the fault (``Workload.gate``), so every modification and deletion meets it.
CHANGES: dict[int, list[tuple[str, range]]] = {
    2: [("modify", range(25, 50)), ("delete", range(12))],
    5: [("delete", range(50, 75)), ("modify", range(12, 25))],
    8: [("modify", range(100, 125)), ("modify", range(25, 38))],
}
#: Unmanaged keys seeded on entities that resources also manage: one kept (and
#: modified), one deleted. Resource 15 and 7 are user entities managing P only.
MIXED_KEPT, MIXED_DELETED = 15, 7


@dataclass
class Workload:
    """Creates, modifies and deletes ClientQuotas in one namespace from a thread.

    kubectl calls are retried (through an API server outage) until
    ``WORKLOAD_SECONDS``; the changes after the first chunks wait for ``gate``.
    """

    kube: KubeAPIServer
    namespace: str
    prefix: str
    size: int = SIZE
    pause: float = 0.3
    gate: threading.Event = field(default_factory=threading.Event)
    #: Set when the test is over, whatever its outcome: the thread stops soon after.
    cancelled: threading.Event = field(default_factory=threading.Event)
    #: Latest version of every resource not deleted, and every version ever sent.
    live: dict[str, Quota] = field(default_factory=dict)
    versions: dict[str, list[Quota]] = field(default_factory=dict)
    deleted: dict[str, Quota] = field(default_factory=dict)
    deletes_sent: set[str] = field(default_factory=set)
    retries: int = 0
    error: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None

    #: Workloads of the running test, cancelled by the ``cancel_workloads`` fixture.
    running: ClassVar[list[Workload]] = []

    def start(self) -> Workload:
        self._thread = threading.Thread(target=self._run, name="workload", daemon=True)
        self._thread.start()
        Workload.running.append(self)
        return self

    def wait(self, timeout: float = WORKLOAD_SECONDS) -> None:
        assert self._thread is not None
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the workload did not finish in time"
        assert not self.error, self.error

    def done(self) -> bool:
        return self._thread is not None and not self._thread.is_alive()

    def _run(self) -> None:
        deadline = time.monotonic() + WORKLOAD_SECONDS
        try:
            for k, start in enumerate(range(0, self.size, CHUNK)):
                self._apply([make_quota(self.prefix, i) for i in range(start, min(start + CHUNK, self.size))], deadline)
                for what, indices in CHANGES.get(k, []):
                    while not self.gate.wait(1.0) and time.monotonic() < deadline:
                        self._check_cancelled()
                    names = [f"q{i}" for i in indices]
                    if what == "modify":
                        self._apply(
                            [make_quota(self.prefix, i, len(self.versions[f"q{i}"])) for i in indices], deadline
                        )
                    else:
                        self._delete(names, deadline)
                time.sleep(self.pause)
        except Exception as exc:  # noqa: BLE001 - reported by wait()
            self.error = f"workload failed: {exc}"

    def _apply(self, quotas: list[Quota], deadline: float) -> None:
        with self._lock:
            for q in quotas:
                self.live[q.name] = q
                self.versions.setdefault(q.name, []).append(q)
        body = json.dumps({"apiVersion": "v1", "kind": "List", "items": [q.manifest(self.namespace) for q in quotas]})
        self._kubectl(deadline, "apply", "-f", "-", input=body)

    def _delete(self, names: list[str], deadline: float) -> None:
        with self._lock:
            for name in names:
                self.deleted[name] = self.live.pop(name)
                self.deletes_sent.add(name)
        self._kubectl(
            deadline, "delete", "clientquota", *names, "-n", self.namespace, "--wait=false", "--ignore-not-found"
        )

    def _check_cancelled(self) -> None:
        if self.cancelled.is_set():
            raise RuntimeError("cancelled: the test is over")

    def _kubectl(self, deadline: float, *args: str, input: str | None = None) -> None:  # noqa: A002
        while True:
            self._check_cancelled()
            try:
                result = self.kube.kubectl("--request-timeout=30s", *args, input=input, check=False, timeout=60)
                if result.returncode == 0:
                    return
                problem = result.stderr.strip()
            except subprocess.TimeoutExpired:
                problem = "kubectl timed out"
            if time.monotonic() > deadline:
                raise AssertionError(f"kubectl {args[0]} kept failing: {problem}")
            self.retries += 1
            time.sleep(1.0)

    # -- what the brokers must hold --------------------------------------------------

    def live_now(self) -> dict[str, Quota]:
        with self._lock:
            return dict(self.live)

    def desired(self) -> dict[Entity, dict[str, float]]:
        with self._lock:
            return {q.entity: {str(k): float(v) for k, v in q.values.items()} for q in self.live.values()}

    def deleted_entities(self) -> set[Entity]:
        with self._lock:
            return {q.entity for q in self.deleted.values()}

    def entities(self) -> set[Entity]:
        with self._lock:
            return {q.entity for versions in self.versions.values() for q in versions}

    def may_hold(self, name: str, values: dict[str, float], have: dict[str, float]) -> bool:
        """Whether the broker holding ``have`` is consistent with resource ``name`` Ready at ``values``.

        The broker may already hold a later version, or nothing if the
        resource's deletion was sent meanwhile.
        """
        with self._lock:
            versions = [{str(k): float(v) for k, v in q.values.items()} for q in self.versions.get(name, [])]
            deleting = name in self.deletes_sent
        if values not in versions:
            return False
        later = versions[versions.index(values) :]
        if any(all(have.get(k) == v for k, v in version.items()) for version in later):
            return True
        return deleting and not any(k in have for k in values)


# -- reading the cluster ----------------------------------------------------------


def items(kube: KubeAPIServer, namespace: str) -> list[dict[str, Any]] | None:
    """All ClientQuotas of ``namespace``, or None when the API server does not answer."""
    try:
        result = kube.kubectl(
            "--request-timeout=30s", "get", "clientquotas", "-n", namespace, "-o", "json", check=False, timeout=60
        )
    except subprocess.TimeoutExpired:
        return None
    if result.returncode != 0:
        return None
    found: list[dict[str, Any]] = json.loads(result.stdout)["items"]
    return found


def spec_values(obj: dict[str, Any]) -> dict[str, float]:
    return {str(KEYS[f]): float(v) for f, v in obj["spec"]["quota"].items()}


class ReadyWatch:
    """Checks, every few seconds, that each Ready resource's values are on the broker.

    A resource Ready for its generation whose values the broker lacks (still
    after 2.5 s, for the broker's metadata propagation) is a violation: the
    operator said Ready before the broker had the value.
    """

    def __init__(
        self, kube: KubeAPIServer, workload: Workload, read: Callable[[], invariants.Quotas], interval: float = 2.0
    ) -> None:
        self.kube, self.workload, self.read, self.interval = kube, workload, read, interval
        self.violations: list[str] = []
        self.checked = 0
        self.error = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ready-watch", daemon=True)

    def __enter__(self) -> ReadyWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def finish(self) -> list[str]:
        """Stop, take one last look (everything is Ready by now); return the problems found."""
        self.__exit__()
        self._once()
        problems = list(self.violations)
        if not self.checked:
            problems.append(f"no Ready resource was ever checked; last error: {self.error}")
        return problems

    def _suspects(
        self, objs: list[dict[str, Any]], broker: invariants.Quotas
    ) -> list[tuple[str, Entity, dict[str, float]]]:
        out = []
        for obj in objs:
            if not ready_for_generation(obj):
                continue
            name = obj["metadata"]["name"]
            versions = self.workload.versions.get(name)
            if not versions:
                continue
            values = spec_values(obj)
            self.checked += 1
            if not self.workload.may_hold(name, values, dict(broker.get(versions[0].entity, {}))):
                out.append((name, versions[0].entity, values))
        return out

    def _once(self) -> None:
        # Statuses first, then the broker: what was Ready must already be there.
        objs = items(self.kube, self.workload.namespace)
        if objs is None:
            self.error = "API server not answering"
            return
        try:
            suspects = self._suspects(objs, self.read())
            # A broker applies committed metadata a moment after the controller
            # answered: look again twice before calling it a violation.
            for wait in (0.5, 2.0):
                if not suspects:
                    return
                time.sleep(wait)
                broker = self.read()
                suspects = [
                    (name, entity, values)
                    for name, entity, values in suspects
                    if not self.workload.may_hold(name, values, dict(broker.get(entity, {})))
                ]
        except Exception as exc:  # noqa: BLE001 - the broker may be the fault; look again later
            self.error = f"{type(exc).__name__}: {exc}"
            return
        for name, entity, values in suspects:
            have = dict(broker.get(entity, {}))
            self.violations.append(f"{name} Ready at {values} while the broker had {have or 'nothing'}")

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._once()


@dataclass
class Outcome:
    verdict: invariants.Verdict
    not_ready: list[str]
    not_gone: list[str]

    @property
    def converged(self) -> bool:
        return self.verdict.lost == 0 and not self.not_ready and not self.not_gone

    def explain(self) -> str:
        lines = [self.verdict.diff()]
        if self.not_ready:
            lines.append(f"{len(self.not_ready)} live resources not Ready for their generation: {self.not_ready[:10]}")
        if self.not_gone:
            lines.append(f"{len(self.not_gone)} deleted resources still present: {self.not_gone[:10]}")
        return "\n".join(lines)


def outcome(
    kube: KubeAPIServer, workload: Workload, actual: invariants.Quotas, unmanaged: invariants.Quotas
) -> Outcome:
    verdict = invariants.check(actual, workload.desired(), workload.deleted_entities(), unmanaged)
    objs = items(kube, workload.namespace)
    if objs is None:
        return Outcome(verdict, ["(API server not answering)"], [])
    by_name = {o["metadata"]["name"]: o for o in objs}
    not_ready = []
    for name, quota in sorted(workload.live_now().items()):
        obj = by_name.get(name)
        want = {str(k): float(v) for k, v in quota.values.items()}
        if obj is None or not ready_for_generation(obj) or spec_values(obj) != want:
            not_ready.append(name)
    not_gone = sorted(n for n in workload.deleted if n in by_name)
    return Outcome(verdict, not_ready, not_gone)


# -- fixtures -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def proxy() -> Iterator[SlowProxy]:
    p = SlowProxy(seed=int(uuid.uuid4().int % 10_000)).start()
    try:
        yield p
    finally:
        p.stop()


@pytest.fixture(scope="module")
def shared_kafka(tmp_path_factory: pytest.TempPathFactory, proxy: SlowProxy) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster.start(tmp_path_factory.mktemp("kafka-faults"), brokers=1)
    try:
        proxy.target_port = cluster.brokers[0].sasl_port
        cluster.advertise_sasl_at(0, proxy.port)
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def kafka1(shared_kafka: KafkaCluster, proxy: SlowProxy) -> Iterator[KafkaCluster]:
    """The shared broker, running and fast whatever the previous scenario left."""
    shared_kafka.start_broker(0)
    proxy.fast()
    yield shared_kafka
    proxy.fast()
    shared_kafka.start_broker(0)


@pytest.fixture(autouse=True)
def cancel_workloads() -> Iterator[None]:
    """A failed scenario's workload thread must not outlive it."""
    yield
    for workload in Workload.running:
        workload.cancelled.set()
    Workload.running.clear()


@pytest.fixture
def operators(own_kube: KubeAPIServer) -> Iterator[list[OperatorProcess]]:
    """Operators to stop at the end (before their API server)."""
    started: list[OperatorProcess] = []
    yield started
    for op in started:
        op.stop()


def start_stack(
    kube: KubeAPIServer,
    kafka: KafkaCluster,
    workdir: Path,
    operators: list[OperatorProcess],
    bootstrap: str | None = None,
    security: dict[str, Any] | None = None,
) -> Stack:
    kube.apply_crds()
    ensure_ledger_namespace(kube)
    cluster = f"kc-{uuid.uuid4().hex[:6]}"
    extra = {"security": security} if security else None
    kube.kubectl("apply", "-f", "-", input=kafka_cluster_manifest(cluster, bootstrap or kafka.bootstrap, extra))
    operator = OperatorProcess(kube, workdir, default_cluster=cluster, drift_interval=5.0)
    operators.append(operator)
    operator.start()
    return Stack(kube, kafka, operator, cluster)


# -- the script every scenario follows ------------------------------------------------


def seed_unmanaged(kafka: KafkaCluster, prefix: str) -> None:
    """Entries kquota does not own, set with Kafka's own tool (three JVMs side by side)."""
    calls = [
        # An entity no resource names.
        ("clients", f"{prefix}free", "producer_byte_rate=888,request_percentage=12.5"),
        # Entities resources also manage, with a key no resource sets.
        ("users", f"{prefix}u{MIXED_KEPT}", "consumer_byte_rate=4242"),
        ("users", f"{prefix}u{MIXED_DELETED}", "consumer_byte_rate=4343"),
    ]
    kafka.add_quota_configs(calls)


@dataclass
class Scenario:
    """One fault scenario's bookkeeping: workload, unmanaged snapshot, clock."""

    name: str
    stack: Stack
    workload: Workload
    unmanaged: dict[Entity, dict[str, float]]
    read: Callable[[], invariants.Quotas]
    fault_at: float = 0.0

    @classmethod
    def begin(
        cls, name: str, stack: Stack, read: Callable[[], invariants.Quotas] | None = None, size: int = SIZE
    ) -> Scenario:
        prefix = f"{name[:4]}{secrets.token_hex(3)}-"
        seed_unmanaged(stack.kafka, prefix)
        reader = read or (lambda: invariants.describe(stack.kafka.bootstrap))
        free = Entity.for_client(f"{prefix}free")
        kept, gone = (Entity.for_user(f"{prefix}u{i}") for i in (MIXED_KEPT, MIXED_DELETED))
        seen: list[invariants.Quotas] = []

        def seeded() -> bool:
            # kafka-configs' change is committed by the controller; the broker read (one chosen broker in the
            # 3-broker scenario) answers from its metadata cache, which on a busy machine follows later.
            seen[:] = [reader()]
            return all(e in seen[0] for e in (free, kept, gone))

        wait_for(seeded, 60, "the seeded quotas in the read broker's metadata", interval=0.5)
        unmanaged = seen[0]
        assert unmanaged.get(free) == {str(P): 888.0, str(R): 12.5}
        workload = Workload(stack.kube, stack.new_namespace(), prefix, size=size)
        return cls(name, stack, workload.start(), {e: dict(v) for e, v in unmanaged.items()}, reader)

    def landed(self) -> int:
        """How many of this scenario's entities have a key on the broker besides seeded ones."""
        mine = self.workload.entities()
        return sum(1 for e, v in self.read().items() if e in mine and set(v) - set(self.unmanaged.get(e, {})))

    def wait_landed(self, count: int = 1) -> None:
        wait_for(lambda: self.landed() >= count, 120, f"{count} quotas of the batch on the broker", interval=0.1)

    def injected(self) -> None:
        """The fault is in: start the clock and let the workload's changes go."""
        self.fault_at = time.monotonic()
        self.workload.gate.set()

    def converge(
        self,
        resilience: Resilience,
        watch: ReadyWatch,
        detail: str | Callable[[], str],
        read: Callable[[], invariants.Quotas] | None = None,
    ) -> Outcome:
        """Wait (bounded) for convergence, record the fault in the report, assert the invariants."""
        read = read or self.read
        kube = self.stack.kube
        last: list[Outcome] = []
        # The fault is over (broker back, operator restarted, ...) when convergence is awaited.
        over = time.monotonic()

        def converged() -> bool:
            try:
                actual = read()
            except Exception:  # noqa: BLE001 - the broker may still be coming back
                return False
            last[:] = [outcome(kube, self.workload, actual, self.unmanaged)]
            return self.workload.done() and last[0].converged

        problem = ""
        try:
            wait_for(converged, CONVERGE_SECONDS, f"convergence after {self.name}", interval=2.0)
        except AssertionError as exc:
            problem = str(exc).splitlines()[0]
        result = last[0] if last else outcome(kube, self.workload, read(), self.unmanaged)
        now = time.monotonic()
        seconds = now - self.fault_at
        issues = watch.finish()
        w = self.workload
        modified = sum(len(v) > 1 for v in w.versions.values())
        summary = (
            f"{detail() if callable(detail) else detail}; "
            f"{len(w.versions)} resources ({modified} modified, {len(w.deleted)} deleted) "
            f"{'converged' if result.converged else 'NOT converged'} {now - over:.0f} s after the fault ended; "
            f"{watch.checked} Ready statuses checked against the broker, {len(watch.violations)} premature"
        )
        resilience.fault(
            self.name,
            ok=result.converged and not w.error and not issues,
            detail=summary,
            lost=result.verdict.lost,
            seconds=seconds,
        )
        assert not w.error, w.error
        assert result.verdict.lost == 0, f"{summary}\n{result.explain()}"
        assert not issues, "Ready before the broker had the value:\n" + "\n".join(issues[:10])
        assert result.converged, f"{problem}\n{summary}\n{result.explain()}\n{self.stack.operator.log()[-3000:]}"
        return result


# -- the scenarios --------------------------------------------------------------------------


def test_broker_sigkill_mid_batch(
    own_kube: KubeAPIServer,
    kafka1: KafkaCluster,
    operators: list[OperatorProcess],
    tmp_path: Path,
    resilience: Resilience,
) -> None:
    stack = start_stack(own_kube, kafka1, tmp_path / "operator", operators)
    sc = Scenario.begin("broker SIGKILL mid-batch (1 broker)", stack)
    with ReadyWatch(own_kube, sc.workload, sc.read) as watch:
        sc.wait_landed(CHUNK)
        before_kill = sc.read()
        kafka1.kill_broker(0)
        sc.injected()

        # Down for at least 10 s and until the operator says so: the cluster and the resources.
        def cluster_unavailable() -> bool:
            obj = json.loads(own_kube.kubectl("get", "kafkacluster", stack.cluster, "-o", "json").stdout)
            return condition(obj).get("reason") == "KafkaUnavailable"

        wait_for(cluster_unavailable, 90, "the KafkaCluster to report KafkaUnavailable", interval=1.0)
        wait_for(
            lambda: any(
                condition(o).get("reason") == "KafkaUnavailable" for o in items(own_kube, sc.workload.namespace) or []
            ),
            60,
            "resources to report KafkaUnavailable",
            interval=1.0,
        )
        sc.workload.wait()
        # Deleted resources whose keys were on the broker wait for it (the finalizer holds).
        held = [
            n
            for n, q in sc.workload.deleted.items()
            if set(before_kill.get(q.entity, {})) - set(sc.unmanaged.get(q.entity, {}))
        ]
        present = {o["metadata"]["name"] for o in items(own_kube, sc.workload.namespace) or []}
        assert set(held) <= present, f"deleted while the broker was down: {sorted(set(held) - present)}"
        time.sleep(max(0.0, 10 - (time.monotonic() - sc.fault_at)))
        kafka1.start_broker(0)
        sc.converge(
            resilience,
            watch,
            f"broker SIGKILLed, down {time.monotonic() - sc.fault_at:.0f} s, {len(held)} deletions held",
        )


def test_api_server_restart_mid_batch(
    own_kube: KubeAPIServer,
    kafka1: KafkaCluster,
    operators: list[OperatorProcess],
    tmp_path: Path,
    resilience: Resilience,
) -> None:
    stack = start_stack(own_kube, kafka1, tmp_path / "operator", operators)
    sc = Scenario.begin("API server restart mid-batch", stack)
    with ReadyWatch(own_kube, sc.workload, sc.read) as watch:
        sc.wait_landed()
        sc.injected()
        own_kube.restart(down_seconds=8)
        sc.workload.wait()
        assert stack.operator.proc is not None and stack.operator.proc.alive(), "the operator died with the API server"
        sc.converge(
            resilience, watch, f"API server down 8 s, restarted; workload retried kubectl {sc.workload.retries} times"
        )
    assert stack.operator.starts == 1, "the operator was restarted"


def test_operator_sigkill_mid_batch(
    own_kube: KubeAPIServer,
    kafka1: KafkaCluster,
    operators: list[OperatorProcess],
    tmp_path: Path,
    resilience: Resilience,
) -> None:
    stack = start_stack(own_kube, kafka1, tmp_path / "operator", operators)
    sc = Scenario.begin("operator SIGKILL mid-batch", stack)
    with ReadyWatch(own_kube, sc.workload, sc.read) as watch:
        sc.wait_landed()
        stack.operator.kill()
        # A request already on the wire may still be applied by the broker: let it land.
        time.sleep(1.0)
        applied_at_kill = sc.landed()
        sc.injected()
        # Everything else (creations, changes, deletions) happens while it is down.
        sc.workload.wait()
        assert 0 < applied_at_kill < len(sc.workload.live), f"the kill was not mid-batch ({applied_at_kill} applied)"
        assert sc.landed() == applied_at_kill, "the broker changed while the operator was dead"
        stack.operator.start()
        sc.converge(
            resilience, watch, f"operator SIGKILLed with {applied_at_kill} entities applied, restarted after the batch"
        )


def test_slow_broker(
    own_kube: KubeAPIServer,
    kafka1: KafkaCluster,
    proxy: SlowProxy,
    operators: list[OperatorProcess],
    tmp_path: Path,
    resilience: Resilience,
) -> None:
    sasl = scram_security(own_kube, "kafka-admin", kafka1.admin_user, kafka1.admin_password)
    # The operator reaches the broker only through the proxy; the checks read it directly.
    stack = start_stack(own_kube, kafka1, tmp_path / "operator", operators, f"127.0.0.1:{proxy.port}", sasl)
    sc = Scenario.begin("slow broker", stack)
    with ReadyWatch(own_kube, sc.workload, sc.read, interval=1.0) as watch:
        sc.wait_landed()
        connections = proxy.stats.connections
        proxy.slow(latency=(0.3, 0.8), stall_chance=0.15, stall_seconds=(2.0, 5.0), max_stalls=4)
        sc.injected()
        # One stall for sure while the changes are being sent; random ones come on top.
        time.sleep(3.0)
        proxy.stall(4.0)
        sc.workload.wait()
        stats = proxy.stats
        try:
            sc.converge(
                resilience,
                watch,
                lambda: (
                    f"0.3-0.8 s per chunk, {stats.stalls} stalls of {stats.stalled_seconds:.0f} s in all "
                    f"(proxy seed {proxy.seed}), {stats.connections} connections"
                ),
            )
        finally:
            proxy.fast()
    assert connections > 0, "the operator did not go through the proxy"
    assert stats.delayed_seconds > 0 and stats.stalls >= 1


@pytest.fixture
def kafka3_own(tmp_path: Path) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster.start(tmp_path / "kafka3", brokers=3)
    try:
        yield cluster
    finally:
        cluster.stop()


def test_three_brokers_lose_one(
    own_kube: KubeAPIServer,
    kafka3_own: KafkaCluster,
    operators: list[OperatorProcess],
    tmp_path: Path,
    resilience: Resilience,
) -> None:
    kafka = kafka3_own
    stack = start_stack(own_kube, kafka, tmp_path / "operator", operators)

    def node(index: int) -> Callable[[], invariants.Quotas]:
        return lambda: invariants.describe(kafka.bootstrap, node_id=kafka.brokers[index].node_id)

    survivors = [node(0), node(2)]

    def survivors_agree() -> invariants.Quotas:
        first, second = (read() for read in survivors)
        if first != second:
            raise AssertionError("brokers 1 and 3 describe different quotas")
        return first

    sc = Scenario.begin("3-broker cluster loses a broker", stack, read=node(0))
    with ReadyWatch(own_kube, sc.workload, sc.read) as watch:
        sc.wait_landed(CHUNK)
        # A voter of three: the other two keep the quorum (static controller.quorum.voters).
        kafka.kill_broker(1)
        sc.injected()
        sc.workload.wait()
        sc.converge(resilience, watch, "broker 2 of 3 SIGKILLed; converged on the two left", read=survivors_agree)

    # Back with three: every broker describes exactly the same, correct state.
    back = time.monotonic()
    kafka.start_broker(1)
    readers = [node(i) for i in range(3)]
    verdicts: list[invariants.Verdict] = []

    def all_three() -> bool:
        try:
            states = [read() for read in readers]
        except Exception:  # noqa: BLE001 - the restarted broker may not answer yet
            return False
        verdicts[:] = [
            invariants.check(s, sc.workload.desired(), sc.workload.deleted_entities(), sc.unmanaged) for s in states
        ]
        return all(v.lost == 0 for v in verdicts)

    problem = ""
    try:
        wait_for(all_three, 120, "the restarted broker to agree", interval=1.0)
    except AssertionError as exc:
        problem = str(exc).splitlines()[0]
    lost = max((v.lost for v in verdicts), default=-1)
    resilience.fault(
        "3-broker cluster: lost broker rejoins",
        ok=lost == 0,
        detail=f"all 3 brokers describe the same {sum(len(v) for v in sc.workload.desired().values())} desired keys",
        lost=max(lost, 0),
        seconds=time.monotonic() - back,
    )
    assert lost == 0, problem + "\n" + "\n".join(f"broker {i + 1}: {v.diff()}" for i, v in enumerate(verdicts))
