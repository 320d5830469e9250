"""Plays a soak history (harness/soak/history.py) against the real components and checks it.

The stack: one kube-apiserver, one KRaft broker whose SASL listener is
advertised through the slow proxy (so every byte the operator exchanges with
Kafka can be delayed or stalled), and kquota operators with Kopf peering (so a
second replica can take over from a killed one). The checks read the broker
directly on its plain listener, never through the proxy or kquota's adapter.
With ``brokers=3`` (``make soak BROKERS=3``) the cluster has three combined
broker+controller nodes (broker 0 behind the proxy) and two topics, the
history adds TopicQuotas, and the faults include leader moves and the active
KRaft controller killed.

Each step: apply the step's GitOps operations, inject the fault, send more
operations while it is on, end it, then wait (bounded) for convergence:

* the broker holds exactly the desired state: for every (entity, key) claimed
  by live resources the tenancy grants in force permit, the oldest claim's
  value (kquota's documented rule: creationTimestamp, then kind, namespace,
  name; a TopicQuota's clients from the leader layout, ``topic_share``); the
  keys refused resources name kept as they were (``Soak.expected``); plus the
  unmanaged entries seeded with kafka-configs at the start, untouched, and
  nothing else (no stray keys after deletions or moves) -
  ``harness/invariants.check``;
* every resource's status is for its generation, the resources that win all
  their keys are Ready, a refused one is NotPermitted naming the grant and
  the keys it keeps, and no deleted resource is still there.

The time from the end of the fault to that point is the step's convergence
time. Then, once per step:

* every key that left the broker since the last step has a new
  ``QuotaRemoved`` event naming it (issue 19: no removal without an event);
* the ledger ConfigMaps record exactly the keys kquota owns;

and throughout, a watcher checks that no resource is Ready for its generation
while the broker lacks its values (Ready before live).

Anything broken is a :class:`Violation` with the seed and step that replay it.
"""

from __future__ import annotations

import json
import math
import re
import secrets
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness import invariants
from harness.kafka_cluster import KafkaCluster
from harness.kube_apiserver import REPO, KubeAPIServer
from harness.operator_proc import (
    LEDGER_NAMESPACE,
    OperatorProcess,
    condition,
    ensure_ledger_namespace,
    kafka_cluster_manifest,
    ready_for_generation,
    scram_security,
    wait_for,
)
from harness.slowproxy import SlowProxy
from harness.soak.history import (
    CLIENT_QUOTA,
    CLUSTER_EDITS,
    FAULT_KINDS,
    NAMESPACES,
    TENANCY_EDITS,
    THREE_BROKER_KINDS,
    TOPIC_QUOTA,
    TOPICS,
    Op,
    Resource,
    Step,
    generate,
)
from harness.soak.tenancy import Grants, grants_for, parts_of, permitted
from kquota.domain import ledger as ledger_format
from kquota.domain.entities import Entity, QuotaKey
from kquota.k8s.ledger import DATA_KEY, RETIRED_LABEL, selector

CLUSTER = "soak"
#: The operator's own SCRAM user (not the harness' superuser: a rotation must not lock the harness out).
OPERATOR_USER = "kquota-soak"
OPERATOR_SECRET = "kafka-operator"
PEERING = "kquota-soak"
PEERING_CRD = REPO / "helm" / "kquota" / "charts" / "kopf-peering" / "crds" / "clusterkopfpeerings.kopf.dev.yaml"
#: Kafka's own tools (kafka-reassign-partitions, kafka-leader-election, kafka-metadata-quorum).
REASSIGN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
ELECT = "org.apache.kafka.tools.LeaderElectionCommand"
QUORUM = "org.apache.kafka.tools.MetadataQuorumCommand"
#: Convergence bound after a fault ends (beyond it: an invariant broken).
CONVERGE_SECONDS = 60.0
#: A killed active replica holds its Kopf peering record for its lifetime (KQUOTA_PEERING_LIFETIME,
#: 15 s by default): the standby waits out at most that, then resumes and makes a pass.
FAILOVER_SECONDS = 30.0
#: How far a check may lag the broker (metadata applied a moment after the controller answered).
LAG_SECONDS = (0.5, 2.0)

FIELD_KEYS = {
    "producerByteRate": QuotaKey.PRODUCER_BYTE_RATE,
    "consumerByteRate": QuotaKey.CONSUMER_BYTE_RATE,
    "requestPercentage": QuotaKey.REQUEST_PERCENTAGE,
    "connectionCreationRate": QuotaKey.CONNECTION_CREATION_RATE,
    "rate": QuotaKey.CONTROLLER_MUTATION_RATE,
}
PART_TYPES = {"user": "user", "clientId": "client-id", "ip": "ip"}
KINDS = "clientquotas,controllermutationquotas"
#: The 3-broker mode also reads TopicQuotas.
TOPIC_KINDS = f"{KINDS},topicquotas"

#: Unmanaged entries, set with Kafka's own kafka-configs before the operator starts. users/u0 is
#: in the history's name pool: its request_percentage must survive every quota set beside it.
UNMANAGED = (
    ("clients", "free", "producer_byte_rate=888,request_percentage=12.5"),
    ("users", "u0", "request_percentage=77"),
    ("ips", "192.0.2.250", "connection_creation_rate=5"),
)


# -- what the API server says must be on the broker ------------------------------------


def _entity(parts: dict[str, Any]) -> Entity:
    return Entity.from_parts({PART_TYPES[p]: None if v.get("default") else v["name"] for p, v in parts.items()})


def entity_of(obj: dict[str, Any]) -> Entity:
    return _entity(obj["spec"]["entity"])


def values_of(obj: dict[str, Any]) -> dict[str, float]:
    spec = obj["spec"]
    raw = spec["quota"] if obj["kind"] == CLIENT_QUOTA else {"rate": spec["rate"]}
    return {str(FIELD_KEYS[f]): float(v) for f, v in raw.items()}


#: A topic's leader layout: partition -> leader broker id.
Layout = dict[int, int]


def topic_share(budget: int, share: int, layout: Layout) -> float:
    """One TopicQuota client's quota, computed here apart from the operator (README "TopicQuota").

    Every broker must allow the client what the busiest one (most of the topic's leaders) may carry
    of its share: budget x share / 100 x (leaders on the busiest broker) / partitions, rounded down,
    never 0. In integers, so no float rounding can hide an off-by-one.
    """
    busiest = max(Counter(layout.values()).values())
    return float(max(1, budget * share * busiest // (100 * len(layout))))


def entries_of(obj: dict[str, Any], layouts: dict[str, Layout]) -> list[tuple[Entity, dict[str, float]]]:
    """The (entity, key -> value) a resource asks for; a TopicQuota's from its topic's layout."""
    if obj["kind"] != TOPIC_QUOTA:
        return [(entity_of(obj), values_of(obj))]
    spec = obj["spec"]
    layout = layouts.get(spec["topic"]["name"])
    if not layout:
        return []
    return [
        (
            _entity({p: v for p, v in client.items() if p != "share"}),
            {str(FIELD_KEYS[f]): topic_share(int(v), int(client["share"]), layout) for f, v in spec["budget"].items()},
        )
        for client in spec.get("clients") or []
    ]


def parts_list(obj: dict[str, Any]) -> list[dict[str, str | None]]:
    """Every entity a resource names, as part -> name (what tenancy grants are checked against)."""
    if obj["kind"] != TOPIC_QUOTA:
        return [parts_of(obj)]
    return [
        {p: None if v.get("default") else v["name"] for p, v in c.items() if p != "share"}
        for c in obj["spec"].get("clients") or []
    ]


def rank(obj: dict[str, Any]) -> tuple[str, str, str, str]:
    meta = obj["metadata"]
    return (meta["creationTimestamp"], obj["kind"], meta["namespace"], meta["name"])


Ident = tuple[str, str, str]


def ident_of(obj: dict[str, Any]) -> Ident:
    return (obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"])


@dataclass
class Claims:
    """The desired state the live resources make: per (entity, key), the oldest permitted claim wins."""

    desired: dict[Entity, dict[str, float]]
    #: (kind, namespace, name) of permitted resources that win every key they claim.
    winners: set[Ident]
    #: Resources the tenancy in force refuses (NotPermitted): they claim nothing, and keep what they set.
    refused: set[Ident] = field(default_factory=set)
    #: (entity, key) a refused resource's spec names and no permitted resource claims: kept on the
    #: broker as it is (README "Multi-tenancy": refusing a resource never un-throttles its clients).
    kept: set[tuple[Entity, str]] = field(default_factory=set)
    #: What refused TopicQuotas would set on the current layout: a kept key may hold it (set before
    #: the refusal, on this layout).
    would: dict[tuple[Entity, str], set[float]] = field(default_factory=dict)
    #: ``desired`` plus the kept keys at the values they must keep (set by ``Soak.converged``).
    expected: dict[Entity, dict[str, float]] | None = None


def claims(
    objs: Iterable[dict[str, Any]], grants: Grants | None = None, layouts: dict[str, Layout] | None = None
) -> Claims:
    """The claims of the live resources under ``grants`` (None: no tenancy, everything permitted).

    ``layouts`` (topic -> partition -> leader) gives TopicQuotas their clients' quotas.
    """
    layouts = layouts or {}
    won: dict[tuple[Entity, str], tuple[tuple[str, str, str, str], float, Ident]] = {}
    alive = [o for o in objs if not o["metadata"].get("deletionTimestamp")]

    def allowed(o: dict[str, Any]) -> bool:
        return all(permitted(o["metadata"]["namespace"], parts, grants) for parts in parts_list(o))

    live = [(o, entries_of(o, layouts)) for o in alive if allowed(o)]
    refused = [(o, entries_of(o, layouts)) for o in alive if not allowed(o)]
    for obj, entries in live:
        for entity, values in entries:
            for key, value in values.items():
                held = won.get((entity, key))
                if held is None or rank(obj) < held[0]:
                    won[(entity, key)] = (rank(obj), value, ident_of(obj))
    desired: dict[Entity, dict[str, float]] = {}
    for (entity, key), (_, value, _holder) in won.items():
        desired.setdefault(entity, {})[key] = value
    losers = {
        ident_of(obj)
        for obj, entries in live
        if any(won[(entity, key)][2] != ident_of(obj) for entity, values in entries for key in values)
    }
    everyone = {ident_of(o) for o, _ in live}
    kept = {
        (entity, key)
        for _, entries in refused
        for entity, values in entries
        for key in values
        if key not in desired.get(entity, {})
    }
    would: dict[tuple[Entity, str], set[float]] = {}
    for obj, entries in refused:
        if obj["kind"] == TOPIC_QUOTA:
            for entity, values in entries:
                for key, value in values.items():
                    would.setdefault((entity, key), set()).add(value)
    return Claims(desired, everyone - losers, {ident_of(o) for o, _ in refused}, kept, would)


# -- the report -------------------------------------------------------------------------


def values_during(
    objs: Iterable[dict[str, Any]],
    ops: Iterable[Op],
    grants: Grants | None,
    layouts: dict[str, Layout],
) -> dict[tuple[Entity, str], set[float]]:
    """(entity, key) -> every value a step may rightly have put on the broker while it ran.

    The values its operations apply, and the winning claim after each operation in turn, from
    ``objs`` (the resources as the step began): the operator may act between two operations of a
    step, and a key that ends the step kept (only a refused resource names it) keeps whatever it
    held then. Seed 2, step 93: the older claim deleted, then the younger one's edit dropped the
    key; in between, the younger claim rightly won with its old value, which the key then kept.
    A resource created in the step ranks after every older one, in the order of the operations.
    """
    out: dict[tuple[Entity, str], set[float]] = {}
    state = {ident_of(o): o for o in objs if not o["metadata"].get("deletionTimestamp")}
    for n, op in enumerate(ops):
        manifest = op.resource.manifest()
        ident = ident_of(manifest)
        if op.action == "apply":
            if op.resource.kind != TOPIC_QUOTA:
                for key, value in values_of(manifest).items():
                    out.setdefault((entity_of(manifest), key), set()).add(value)
            old = state.get(ident)
            # "~" sorts after every RFC 3339 time: a resource created in the step is the youngest.
            created = old["metadata"]["creationTimestamp"] if old is not None else f"~{n:04d}"
            manifest["metadata"]["creationTimestamp"] = created
            state[ident] = manifest
        else:
            state.pop(ident, None)
        for entity, values in claims(state.values(), grants, layouts).desired.items():
            for key, value in values.items():
                out.setdefault((entity, key), set()).add(value)
    return out


@dataclass
class Violation:
    step: int
    fault: str
    invariant: str
    detail: str
    replay: str


@dataclass
class StepResult:
    step: int
    kind: str
    params: dict[str, float]
    ops: list[str]
    #: Seconds the fault lasted (injection to its end), and from its end to convergence.
    fault_seconds: float
    converge_seconds: float | None
    violations: list[str] = field(default_factory=list)
    #: Managed keys that left the broker in this step (each needs its QuotaRemoved event).
    removals_checked: int = 0
    #: Refused (NotPermitted) resources whose status was checked at convergence, and the keys
    #: they kept on the broker (tenancy-revoked).
    refused_checked: int = 0
    kept_checked: int = 0


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of ``values``; 0 when empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


@dataclass
class Report:
    seed: int
    faults: int
    kinds: list[str]
    steps: list[StepResult] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    setup_seconds: float = 0.0
    seconds: float = 0.0
    #: Ready statuses the watcher compared with the broker (evidence the check ran).
    ready_checked: int = 0
    #: Operators that exited on their own (no fault killed them) and were started again, as the
    #: kubelet restarts a container: step, exit code and the last log line. Not an invariant broken,
    #: but always reported: each is an operator crash or a deliberate exit (a Kopf that stopped).
    operator_exits: list[str] = field(default_factory=list)

    def convergence(self, kinds: Iterable[str] | None = None) -> dict[str, float]:
        wanted = set(kinds) if kinds is not None else None
        times = [
            s.converge_seconds
            for s in self.steps
            if s.converge_seconds is not None and (wanted is None or s.kind in wanted)
        ]
        return {
            "count": len(times),
            "p50": round(percentile(times, 50), 2),
            "p99": round(percentile(times, 99), 2),
            "max": round(max(times, default=0.0), 2),
        }

    def as_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "faults": self.faults,
            "kinds": self.kinds,
            "setup_seconds": round(self.setup_seconds, 1),
            "seconds": round(self.seconds, 1),
            "ready_checked": self.ready_checked,
            "operator_exits": self.operator_exits,
            "removals_checked": sum(s.removals_checked for s in self.steps),
            "convergence": self.convergence(),
            "convergence_without_failover": self.convergence(
                k for k in FAULT_KINDS + THREE_BROKER_KINDS if k != "failover"
            ),
            "per_kind": {k: self.convergence([k]) for k in sorted({s.kind for s in self.steps})},
            "violations": [asdict(v) for v in self.violations],
            "steps": [asdict(s) for s in self.steps],
        }

    def text(self) -> str:
        c = self.convergence()
        nf = self.convergence(k for k in FAULT_KINDS + THREE_BROKER_KINDS if k != "failover")
        lines = [
            f"kquota soak: seed {self.seed}, {len(self.steps)} of {self.faults} faults, "
            f"{self.seconds:.0f} s (set-up {self.setup_seconds:.0f} s)",
            "",
            f"{'step':>4}  {'fault':<44} {'ops':>3} {'fault s':>7} {'converged s':>11}  result",
        ]
        for s in self.steps:
            fault = s.kind + "".join(f" {k}={v:g}" for k, v in s.params.items())
            conv = "-" if s.converge_seconds is None else f"{s.converge_seconds:.1f}"
            result = "ok" if not s.violations else f"BROKEN: {len(s.violations)}"
            lines.append(f"{s.step:>4}  {fault[:44]:<44} {len(s.ops):>3} {s.fault_seconds:>7.1f} {conv:>11}  {result}")
        lines += [
            "",
            f"convergence after a fault ends (s): p50 {c['p50']}, p99 {c['p99']}, max {c['max']} "
            f"over {c['count']} faults",
            f"  without failover: p50 {nf['p50']}, p99 {nf['p99']}, max {nf['max']} over {nf['count']} faults",
        ]
        for kind, k in self.as_json()["per_kind"].items():
            lines.append(f"  {kind:<18} {k['count']:>3} faults  p50 {k['p50']:>6}  max {k['max']:>6}")
        lines.append(
            f"  checked: {self.ready_checked} Ready statuses against the broker, "
            f"{sum(s.removals_checked for s in self.steps)} removals against their QuotaRemoved events, "
            f"{sum(s.refused_checked for s in self.steps)} refused statuses, "
            f"{sum(s.kept_checked for s in self.steps)} kept keys"
        )
        lines.append(f"  operators that exited on their own and were started again: {len(self.operator_exits)}")
        lines += [f"    {e}" for e in self.operator_exits]
        lines.append("")
        if not self.violations:
            lines.append("invariants broken: 0")
        else:
            lines.append(f"invariants broken: {len(self.violations)}")
            for v in self.violations:
                lines.append(f"  step {v.step} ({v.fault}): {v.invariant}: {v.detail}")
                lines.append(f"    replay: {v.replay}")
        return "\n".join(lines)

    def keep_logs(self, workdir: Path, directory: Path) -> Path | None:
        """Copy the operators' logs of a run that broke an invariant beside its report; the folder, else None.

        The run's components live in a temporary directory: without the logs a broken
        invariant that a replay does not reproduce cannot be diagnosed (SEED=15's first run).
        """
        logs = sorted(workdir.glob("operator-*/operator-*.log"))
        if not self.violations or not logs:
            return None
        kept = directory / f"soak-seed{self.seed}-faults{self.faults}-logs"
        kept.mkdir(parents=True, exist_ok=True)
        for log in logs:
            shutil.copyfile(log, kept / f"{log.parent.name}-{log.name}")
        return kept

    def write(self, directory: Path) -> tuple[Path, Path]:
        directory.mkdir(parents=True, exist_ok=True)
        stem = directory / f"soak-seed{self.seed}-faults{self.faults}"
        js, txt = stem.with_suffix(".json"), stem.with_suffix(".txt")
        js.write_text(json.dumps(self.as_json(), indent=2) + "\n")
        txt.write_text(self.text() + "\n")
        return js, txt


# -- the Ready watcher ----------------------------------------------------------------------


class ReadyWatch:
    """Every ``interval`` s: a resource Ready for its generation must have its values on the broker.

    A mismatch is looked at again after the broker's lag (``LAG_SECONDS``), with
    the resource read again: if it changed meanwhile (new generation, deletion)
    it is not a violation. Findings are taken per step with :meth:`take`.
    """

    def __init__(self, soak: Soak, interval: float = 1.5) -> None:
        self.soak, self.interval = soak, interval
        self.checked = 0
        self._found: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-ready-watch", daemon=True)

    def start(self) -> ReadyWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def take(self) -> list[str]:
        with self._lock:
            found, self._found = self._found, []
        return found

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._once()
            except Exception:  # noqa: BLE001, S112 - the API server or broker may be the fault; look again
                continue

    @staticmethod
    def _mismatch(obj: dict[str, Any], broker: invariants.Quotas) -> dict[str, float] | None:
        have = dict(broker.get(entity_of(obj), {}))
        want = values_of(obj)
        return have if any(have.get(k) != v for k, v in want.items()) else None

    def _once(self) -> None:
        objs = self.soak.objects()
        if objs is None:
            return
        # A resource that lost a key to an older claim (a conflict) is judged by the convergence
        # check (it must end not Ready); here only the claims that win are: their Ready must be live.
        winners = claims(objs, self.soak.grants, self.soak._layouts).winners
        ready = [
            o
            for o in objs
            if ready_for_generation(o)
            and not o["metadata"].get("deletionTimestamp")
            # A TopicQuota's values follow the leader layout, which moves: the convergence check
            # judges them on the layout it reads.
            and o["kind"] != TOPIC_QUOTA
            and (o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]) in winners
        ]
        broker = self.soak.broker()
        self.checked += len(ready)
        suspects = [o for o in ready if self._mismatch(o, broker) is not None]
        for wait in LAG_SECONDS:
            if not suspects:
                return
            time.sleep(wait)
            broker = self.soak.broker()
            suspects = [o for o in suspects if self._mismatch(o, broker) is not None]
        now = {(o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]): o for o in self.soak.objects() or []}
        for obj in suspects:
            ident = (obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"])
            again = now.get(ident)
            if (
                again is None
                or again["metadata"].get("generation") != obj["metadata"].get("generation")
                or again["metadata"].get("deletionTimestamp")
            ):
                continue
            with self._lock:
                self._found.append(
                    f"{ident[0]} {ident[1]}/{ident[2]} Ready (generation {obj['metadata'].get('generation')}) at "
                    f"{values_of(obj)} while the broker had {self._mismatch(obj, broker)}"
                )


# -- the soak ---------------------------------------------------------------------------------


@dataclass
class Soak:
    """One soak run: start the stack, play ``generate(seed, faults)``, check, report."""

    seed: int
    faults: int
    workdir: Path
    kinds: tuple[str, ...] = FAULT_KINDS
    #: Called with each step's line of the report as it completes (progress on a terminal).
    progress: Callable[[str], None] | None = None
    #: A step at which to break the operator on purpose (frozen through the convergence
    #: wait, with one more resource to apply): shows that the soak catches and replays it.
    break_at: int | None = None
    converge_seconds: float = CONVERGE_SECONDS
    #: What replays a history not generated from the seed (a test's own steps); None: ``make soak``.
    replay_command: str | None = None
    kube: KubeAPIServer | None = None
    kafka: KafkaCluster | None = None
    proxy: SlowProxy | None = None
    operator: OperatorProcess | None = None
    operators: list[OperatorProcess] = field(default_factory=list)
    unmanaged: dict[Entity, dict[str, float]] = field(default_factory=dict)
    report: Report | None = None
    setup_seconds: float = 0.0
    _priority: int = 1000
    _events_seen: dict[str, int] = field(default_factory=dict)
    #: After a failover: the standby, until it has taken over (a step with nothing to do
    #: would otherwise converge at once, and the takeover's wait land on the next step).
    _takeover: OperatorProcess | None = None
    #: Stray keys a broken step left (reported once): later steps may find them or not.
    tolerated: dict[tuple[Entity, str], float] = field(default_factory=dict)
    #: Ledger discrepancies already reported (a later step reports only new ones).
    _ledger_reported: set[str] = field(default_factory=set)
    _last_broker: dict[Entity, dict[str, float]] = field(default_factory=dict)
    #: The operator's current SCRAM password (rotated by ``secret-rotated``).
    _password: str = ""
    #: After a rotation: the successful passes counted when the Secret got the new password;
    #: convergence then needs one more (a pass that reconnected with the new Secret).
    _passes_at_rotation: float | None = None
    #: What went wrong in the injection itself (reported with the step's violations).
    _fault_problems: list[str] = field(default_factory=list)
    #: The KafkaCluster's tenancy grants in force (None: no tenancy section, everything permitted).
    grants: Grants | None = None
    #: The grants in force when the current step began.
    _grants_at_step: Grants | None = None
    #: The step being played (its index).
    _step_index: int = 0
    #: 1, or 3: the 3-broker mode (TopicQuotas on TOPICS, leader moves, the KRaft controller killed).
    brokers: int = 1
    #: The leader layout of TOPICS as the last convergence check read it.
    _layouts: dict[str, Layout] = field(default_factory=dict)
    #: topic -> partition -> replicas (preferred leader first), as created and then reassigned.
    _assignment: dict[str, dict[int, list[int]]] = field(default_factory=dict)
    #: (entity, key) -> the values this step may have set (:func:`values_during`): a kept key may
    #: hold one of them (the operator may have applied it before the resource was refused).
    _step_values: dict[tuple[Entity, str], set[float]] = field(default_factory=dict)

    # -- reading -------------------------------------------------------------------------

    def _kube(self) -> KubeAPIServer:
        assert self.kube is not None
        return self.kube

    def _kafka(self) -> KafkaCluster:
        assert self.kafka is not None
        return self.kafka

    def kubectl(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str] | None:  # noqa: A002
        """kubectl, or None when the API server does not answer."""
        try:
            result = self._kube().kubectl("--request-timeout=20s", *args, input=input, check=False, timeout=40)
        except subprocess.TimeoutExpired:
            return None
        return result if result.returncode == 0 else None

    def objects(self) -> list[dict[str, Any]] | None:
        result = self.kubectl("get", TOPIC_KINDS if self.brokers > 1 else KINDS, "-A", "-o", "json")
        if result is None:
            return None
        found: list[dict[str, Any]] = json.loads(result.stdout)["items"]
        return found

    def broker(self) -> dict[Entity, dict[str, float]]:
        return invariants.describe(self._kafka().bootstrap, timeout=10)

    # -- set-up and tear-down ------------------------------------------------------------

    def start(self) -> None:
        began = time.monotonic()
        self.proxy = SlowProxy(seed=self.seed).start()
        # One after the other, from this thread: a child dies with the thread that
        # started it (PR_SET_PDEATHSIG, harness/procs.py), so no thread pool here.
        self.kafka = KafkaCluster.start(self.workdir / "kafka", brokers=self.brokers)
        self.kube = KubeAPIServer.start(self.workdir / "kube")
        self.proxy.target_port = self.kafka.brokers[0].sasl_port
        self.kafka.advertise_sasl_at(0, self.proxy.port)
        self.kafka.add_quota_configs(UNMANAGED)
        if self.brokers > 1:
            self._create_topics()
        self.unmanaged = self.broker()
        kube = self.kube
        kube.apply_crds()
        kube.kubectl("apply", "--server-side", "-f", str(PEERING_CRD))
        kube.kubectl("wait", "--for=condition=Established", "crd/clusterkopfpeerings.kopf.dev", "--timeout=60s")
        peering = {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": PEERING}}
        kube.kubectl("apply", "-f", "-", input=json.dumps(peering))
        ensure_ledger_namespace(kube)
        for ns in NAMESPACES:
            kube.kubectl("create", "namespace", ns)
        self._password = f"soak-{secrets.token_hex(8)}"
        self.kafka.create_scram_user(OPERATOR_USER, self._password)
        security = scram_security(kube, OPERATOR_SECRET, OPERATOR_USER, self._password)
        # Broker 0 through the slow proxy; the others (3-broker mode) direct, for when broker 0 is down.
        bootstrap = ",".join([f"127.0.0.1:{self.proxy.port}", *(b.sasl_bootstrap for b in self.kafka.brokers[1:])])
        manifest = kafka_cluster_manifest(CLUSTER, bootstrap, {"security": security})
        kube.kubectl("apply", "-f", "-", input=manifest)
        self.operator = self._new_operator(self._priority).start()
        self._last_broker = self.broker()
        self.setup_seconds = time.monotonic() - began

    def _create_topics(self) -> None:
        """TOPICS with replicas on all three brokers and their leaders spread evenly (preferred first)."""
        from kafka import KafkaAdminClient
        from kafka.admin import NewTopic

        ids = sorted(b.node_id for b in self._kafka().brokers)
        rotations = [ids[i:] + ids[:i] for i in range(len(ids))]
        admin = KafkaAdminClient(bootstrap_servers=self._kafka().bootstrap)
        try:
            for topic, partitions in TOPICS:
                assignment = {p: rotations[p % len(ids)] for p in range(partitions)}
                admin.create_topics([NewTopic(topic, replica_assignments=assignment)])
                self._assignment[topic] = {p: list(r) for p, r in assignment.items()}
        finally:
            admin.close()
        wait_for(lambda: all(len(self.layouts()[t]) == n for t, n in TOPICS), 60, "the topics' partitions")

    def layouts(self) -> dict[str, Layout]:
        """partition -> leader (-1: none) of each of TOPICS, read from the brokers' metadata."""
        from kafka import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=self._kafka().bootstrap, request_timeout_ms=10_000)
        try:
            described = admin.describe_topics([t for t, _ in TOPICS])
        finally:
            admin.close()
        found = {
            d["name"]: {int(p["partition_index"]): int(p["leader_id"]) for p in d["partitions"]}
            for d in described
            if not d.get("error_code")
        }
        return {t: found.get(t, {}) for t, _ in TOPICS}

    def _new_operator(self, priority: int) -> OperatorProcess:
        n = len(self.operators) + 1
        op = OperatorProcess(
            self._kube(),
            self.workdir / f"operator-{n}",
            default_cluster=CLUSTER,
            drift_interval=5.0,
            extra_env={
                "KQUOTA_PEERING": PEERING,
                "KQUOTA_PEERING_PRIORITY": str(priority),
                "POD_ID": f"kquota-soak-{n}",
            },
        )
        self.operators.append(op)
        return op

    def stop(self) -> None:
        for op in self.operators:
            if op.proc is not None and op.proc.alive():
                op.proc.signal(signal.SIGCONT)
            op.stop()
        if self.kube is not None:
            self.kube.stop()
        if self.kafka is not None:
            self.kafka.stop()
        if self.proxy is not None:
            self.proxy.stop()

    # -- GitOps ------------------------------------------------------------------------------

    def send(self, ops: Iterable[Op], deadline: float = 120.0) -> None:
        """Apply and delete, in order (consecutive applies as one List), retrying through outages."""
        groups: list[tuple[str, list[Op]]] = []
        for op in ops:
            if groups and groups[-1][0] == op.action == "apply":
                groups[-1][1].append(op)
            else:
                groups.append((op.action, [op]))
        until = time.monotonic() + deadline
        for action, batch in groups:
            if action == "apply":
                body = json.dumps({"apiVersion": "v1", "kind": "List", "items": [o.resource.manifest() for o in batch]})
                args: tuple[str, ...] = ("apply", "-f", "-")
            else:
                r = batch[0].resource
                body = None
                args = ("delete", r.kind.lower(), r.name, "-n", r.namespace, "--wait=false", "--ignore-not-found")
            while self.kubectl(*args, input=body) is None:
                if time.monotonic() > until:
                    raise RuntimeError(f"kubectl {' '.join(args)} kept failing for {deadline:.0f} s")
                time.sleep(1.0)

    # -- faults --------------------------------------------------------------------------------

    def inject(self, step: Step) -> float:
        """Inject ``step``'s fault, send its ``during`` operations, end the fault; returns its length (s)."""
        fault = step.fault
        kind = fault.kind
        began = time.monotonic()
        op = self.operator
        assert op is not None and op.proc is not None
        kafka, kube, proxy = self._kafka(), self._kube(), self.proxy
        assert proxy is not None
        if kind == "operator-kill":
            op.kill()
            self.send(step.during)
            _sleep_until(began + fault.param("down"))
            op.start()
        elif kind == "operator-pause":
            op.proc.signal(signal.SIGSTOP)
            try:
                self.send(step.during)
                _sleep_until(began + fault.param("paused"))
            finally:
                op.proc.signal(signal.SIGCONT)
        elif kind == "failover":
            self._priority -= 1
            standby = self._new_operator(self._priority).start()
            # Standing by: its keep-alive is in the peering object and its watches are paused.
            pod = (standby.extra_env or {})["POD_ID"]
            wait_for(
                lambda: pod in self._peers() and "Pausing the watch-stream for clientquotas" in standby.log(),
                60,
                "the standby replica to stand by",
            )
            began = time.monotonic()
            op.kill()
            self.operator = self._takeover = standby
            self.send(step.during)
        elif kind == "broker-kill":
            kafka.kill_broker(0)
            self.send(step.during)
            _sleep_until(began + fault.param("down"))
            kafka.start_broker(0)
        elif kind == "apiserver-restart":
            kube.restart(kill=bool(fault.param("sigkill")), down_seconds=fault.param("down"))
            self.send(step.during)
        elif kind == "slow-network":
            proxy.slow(
                latency=(0.0, fault.param("latency")),
                stall_chance=0.2,
                stall_seconds=(1.0, 4.0),
                max_stalls=int(fault.param("stall")),
                seed=int(fault.param("proxy_seed")),
            )
            try:
                self.send(step.during)
                _sleep_until(began + fault.param("seconds"))
            finally:
                proxy.fast()
        elif kind == "ledger-deleted":
            self.kubectl("delete", "configmap", "-n", LEDGER_NAMESPACE, "-l", selector(CLUSTER))
            self.send(step.during)
        elif kind == "ledger-edited":
            self._edit_ledger(int(fault.param("pick")))
            self.send(step.during)
        elif kind == "crds-reapplied":
            kube.apply_crds()
            self.send(step.during)
        elif kind == "secret-rotated":
            self._rotate(began + fault.param("lag"), step)
        elif kind == "kafkacluster-edited":
            self._edit_cluster(CLUSTER_EDITS[int(fault.param("what"))], bool(fault.param("on")), fault.param("value"))
            self.send(step.during)
        elif kind == "leader-moved":
            self._move_leaders(
                TOPICS[int(fault.param("topic"))][0], int(fault.param("broker")), int(fault.param("count"))
            )
            self.send(step.during)
        elif kind == "controller-killed":
            index = self._active_controller()
            kafka.kill_broker(index)
            self.send(step.during)
            _sleep_until(began + fault.param("down"))
            kafka.start_broker(index)
        elif kind == "tenancy-revoked":
            grants = grants_for(TENANCY_EDITS[int(fault.param("grants"))])
            self._patch_cluster({"spec": {"tenancy": {"grants": grants}}}, "tenancy-revoked")
            self.grants = grants
            self.send(step.during)
        else:
            raise ValueError(f"unknown fault {kind!r}")
        return time.monotonic() - began

    def _tool(self, main_class: str, *args: str) -> str:
        result = self._kafka().run_tool(main_class, "--bootstrap-server", self._kafka().bootstrap, *args)
        if result.returncode != 0:
            self._fault_problems.append(f"fault injection: {main_class} failed: {result.stderr.strip()[-300:]}")
        return result.stdout

    def _move_leaders(self, topic: str, broker: int, count: int) -> None:
        """Make ``broker`` the preferred leader of up to ``count`` partitions of ``topic`` that it does not
        lead by preference (a replica-order reassignment), then elect preferred leaders on them."""
        replicas = self._assignment[topic]
        moved = [p for p in sorted(replicas) if replicas[p][0] != broker][:count]
        if not moved:
            return
        for p in moved:
            replicas[p] = [broker, *(r for r in replicas[p] if r != broker)]
        plan = {"version": 1, "partitions": [{"topic": topic, "partition": p, "replicas": replicas[p]} for p in moved]}
        elect = {"partitions": [{"topic": topic, "partition": p} for p in moved]}
        moves, elections = self.workdir / "reassign.json", self.workdir / "elect.json"
        moves.write_text(json.dumps(plan))
        elections.write_text(json.dumps(elect))
        self._tool(REASSIGN, "--reassignment-json-file", str(moves), "--execute")
        # A replica-order change completes at once; the election then moves the leaders.
        self._tool(ELECT, "--election-type", "PREFERRED", "--path-to-json-file", str(elections))

        def led() -> bool:
            try:
                layout = self.layouts()[topic]
            except Exception:  # noqa: BLE001 - metadata may lag a moment
                return False
            return all(layout.get(p) == broker for p in moved)

        try:
            wait_for(led, 60, f"partitions {moved} of {topic} led by broker {broker}")
        except AssertionError as exc:
            self._fault_problems.append(f"fault injection: {exc}")

    def _active_controller(self) -> int:
        """The index in ``kafka.brokers`` of the active KRaft controller (kafka-metadata-quorum)."""
        out = self._tool(QUORUM, "describe", "--status")
        match = re.search(r"^LeaderId:\s+(\d+)", out, re.MULTILINE)
        if match is None:
            raise RuntimeError(f"no LeaderId in kafka-metadata-quorum describe --status: {out!r}")
        leader = int(match.group(1))
        return next(i for i, b in enumerate(self._kafka().brokers) if b.node_id == leader)

    def _rotate(self, secret_at: float, step: Step) -> None:
        """A new password for the operator's user on the broker (the old one revoked at once: SCRAM
        keeps one credential per mechanism), its connections dropped, and at ``secret_at`` the new
        password in its Secret. Until then the operator cannot authenticate."""
        kafka, proxy = self._kafka(), self.proxy
        assert proxy is not None
        old, self._password = self._password, f"soak-{secrets.token_hex(8)}"
        kafka.create_scram_user(OPERATOR_USER, self._password)
        proxy.drop()
        if _authenticates(kafka, old):
            self._fault_problems.append("old password revoked: the broker still takes it")
        self.send(step.during)
        _sleep_until(secret_at)
        op = self.operator
        assert op is not None
        self._passes_at_rotation = _ok_passes(op)
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": OPERATOR_SECRET, "namespace": LEDGER_NAMESPACE},
            "stringData": {"username": OPERATOR_USER, "password": self._password},
        }
        until = time.monotonic() + 120
        while self.kubectl("apply", "-f", "-", input=json.dumps(secret)) is None:
            if time.monotonic() > until:
                raise RuntimeError("the rotated Secret could not be written for 120 s")
            time.sleep(1.0)

    def _edit_cluster(self, what: str, on: bool, value: float) -> None:
        """Edit the KafkaCluster (a JSON merge patch; ``on`` false removes what an earlier edit set)."""
        patch: dict[str, Any]
        if what == "label":
            patch = {"metadata": {"labels": {"soak.kquota.io/edit": f"v{value:g}" if on else None}}}
        elif what == "metrics":
            endpoints = [self._kafka().brokers[0].metrics_url] if on else None
            patch = {"spec": {"metrics": {"brokerEndpoints": endpoints}}}
        elif what == "protected-client-id":
            patch = {"spec": {"protectedClientIds": [f"soak-protected-{value:g}"] if on else None}}
        elif what == "tenancy":
            grant = {
                "namespaces": list(NAMESPACES),
                "users": ["*"],
                "clientIds": ["*"],
                "ips": ["192.0.2.0/24"],
                "allowDefaults": True,
            }
            patch = {"spec": {"tenancy": {"grants": [grant]} if on else None}}
        else:
            raise ValueError(f"unknown KafkaCluster edit {what!r}")
        self._patch_cluster(patch, what)
        if what == "tenancy":
            self.grants = [grant] if on else None

    def _patch_cluster(self, patch: dict[str, Any], what: str) -> None:
        until = time.monotonic() + 120
        while self.kubectl("patch", "kafkacluster", CLUSTER, "--type=merge", "-p", json.dumps(patch)) is None:
            if time.monotonic() > until:
                raise RuntimeError(f"the KafkaCluster could not be patched ({what}) for 120 s")
            time.sleep(1.0)

    def _peers(self) -> dict[str, Any]:
        result = self.kubectl("get", "clusterkopfpeering", PEERING, "-o", "json")
        peers: dict[str, Any] = (json.loads(result.stdout).get("status") or {}) if result else {}
        return peers

    def ledger_maps(self) -> list[dict[str, Any]] | None:
        result = self.kubectl("get", "configmaps", "-n", LEDGER_NAMESPACE, "-l", selector(CLUSTER), "-o", "json")
        if result is None:
            return None
        maps: list[dict[str, Any]] = json.loads(result.stdout)["items"]
        return [m for m in maps if RETIRED_LABEL not in (m["metadata"].get("labels") or {})]

    def _edit_ledger(self, pick: int) -> None:
        """Drop one entity from the ledger by hand (as someone tidying ConfigMaps would)."""
        shards = [m for m in self.ledger_maps() or [] if (m.get("data") or {}).get(DATA_KEY)]
        entries = sorted(
            ((m, e) for m in shards for e in ledger_format.decode_shard(m["data"][DATA_KEY])),
            key=lambda me: (me[0]["metadata"]["name"], str(me[1])),
        )
        if not entries:
            return
        cm, entity = entries[pick % len(entries)]
        kept = {e: v for e, v in ledger_format.decode_shard(cm["data"][DATA_KEY]).items() if e != entity}
        cm["data"][DATA_KEY] = ledger_format.encode_shard(kept)
        self.kubectl("replace", "-f", "-", input=json.dumps(cm))

    # -- checks ----------------------------------------------------------------------------------

    def converged(self) -> tuple[bool, str, Claims | None, dict[Entity, dict[str, float]]]:
        """Whether the broker and every status have caught up; the reason when not."""
        op = self.operator
        if op is not None and op.proc is not None and op.proc.popen is not None and not op.proc.alive():
            # The fault is over and nothing killed it: the kubelet would start the container again
            # (restartPolicy Always), so the soak does, and reports it.
            code = op.proc.popen.poll()
            last = (op.log().strip().splitlines() or [""])[-1][:200]
            if self.report is not None:
                self.report.operator_exits.append(f"step {self._step_index}: exit code {code}; last line: {last}")
            op.start()
            return False, f"the operator exited on its own (code {code}) and was started again", None, {}
        if self._takeover is not None:
            if "Resuming operations" not in self._takeover.log():
                return False, "the standby replica has not taken over", None, {}
            self._takeover = None
        if self._passes_at_rotation is not None:
            op = self.operator
            assert op is not None
            if _ok_passes(op) <= self._passes_at_rotation:
                return False, "no successful pass since the Secret was rotated", None, {}
            self._passes_at_rotation = None
        objs = self.objects()
        if objs is None:
            return False, "API server not answering", None, {}
        try:
            broker = self.broker()
        except Exception as exc:  # noqa: BLE001 - the broker may still be coming back
            return False, f"broker not answering: {exc}", None, {}
        if self.brokers > 1:
            try:
                layouts = self.layouts()
            except Exception as exc:  # noqa: BLE001 - a broker may still be coming back
                return False, f"leader layout not readable: {exc}", None, {}
            unsettled = [t for t, n in TOPICS if len(layouts.get(t, {})) != n or -1 in layouts[t].values()]
            if unsettled:
                return False, f"partitions without a leader in {unsettled}", None, {}
            self._layouts = layouts
        c = claims(objs, self.grants, self._layouts)
        # Grants changed in this step: the operator may have acted on this step's operations under the
        # old ones first (a refused resource then set a key it keeps: seed 15, step 10).
        before = (
            claims(objs, self._grants_at_step, self._layouts).desired if self._grants_at_step != self.grants else {}
        )
        c.expected = self.expected(c, broker, before)
        verdict = invariants.check(self._without_tolerated(broker, c.expected), c.expected, (), self.unmanaged)
        if verdict.lost:
            return False, verdict.diff(10), c, broker
        deleting = [o["metadata"]["name"] for o in objs if o["metadata"].get("deletionTimestamp")]
        if deleting:
            return False, f"deleted resources still there: {deleting[:10]}", c, broker
        stale = [
            o["metadata"]["name"]
            for o in objs
            if (o.get("status") or {}).get("observedGeneration") != o["metadata"].get("generation")
            # Winners of every key they claim are Ready; a resource losing a key to an older one is not.
            or ready_for_generation(o) != ((o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]) in c.winners)
        ]
        if stale:
            return False, f"status not caught up (winner not Ready, or loser Ready): {stale[:10]}", c, broker
        unexplained = [
            f"{i[1]}/{i[2]}: {why}"
            for o in objs
            if (i := ident_of(o)) in c.refused
            if (why := self._refusal_problem(o, c, broker))
        ]
        if unexplained:
            return False, f"refused resources not saying why: {unexplained[:5]}", c, broker
        return True, "", c, broker

    def expected(
        self,
        c: Claims,
        broker: dict[Entity, dict[str, float]],
        before: dict[Entity, dict[str, float]] | None = None,
    ) -> dict[Entity, dict[str, float]]:
        """What the broker must hold: the claims, and each kept key as it was (``Claims.kept``).

        A kept key keeps the value the last step ended with (absent stays absent: a refused resource
        sets nothing new), or one set before the refusal was seen: by this step's operations, or the
        claim under the grants in force when the step began (``before``).
        """
        before = before or {}
        out = {e: dict(v) for e, v in c.desired.items()}
        for entity, key in c.kept:
            if key in self.unmanaged.get(entity, {}):
                continue  # invariants.check holds unmanaged entries to their seeded values already
            prev = self._last_broker.get(entity, {}).get(key)
            have = broker.get(entity, {}).get(key)
            allowed = (
                self._step_values.get((entity, key), set())
                | c.would.get((entity, key), set())
                | ({prev} if prev is not None else set())
                | ({before[entity][key]} if key in before.get(entity, {}) else set())
            )
            if have is not None and have in allowed:
                out.setdefault(entity, {})[key] = have
            elif prev is not None:
                out.setdefault(entity, {})[key] = prev
        return out

    def _refusal_problem(self, obj: dict[str, Any], c: Claims, broker: dict[Entity, dict[str, float]]) -> str:
        """Why a refused resource's status is wrong ('' when right): NotPermitted, saying what it keeps."""
        ready = condition(obj)
        if ready.get("status") != "False" or ready.get("reason") != "NotPermitted":
            return f"Ready={ready.get('status')} reason {ready.get('reason')}, not Ready=False NotPermitted"
        message = str(ready.get("message", ""))
        if "grant" not in message:
            return f"the message does not name the grant: {message!r}"
        missing = [
            f"{key} on {entity.path()}"
            for entity, values in entries_of(obj, self._layouts)
            for key in values
            if (entity, key) in c.kept
            and key in broker.get(entity, {})
            and (f"{key}=" not in message or f" on {entity.path()}" not in message)
        ]
        if missing:
            return f"keeps {missing} but the message does not say so: {message!r}"
        return ""

    def _without_tolerated(
        self, broker: dict[Entity, dict[str, float]], desired: dict[Entity, dict[str, float]]
    ) -> dict[Entity, dict[str, float]]:
        out = {e: dict(v) for e, v in broker.items()}
        for (entity, key), value in self.tolerated.items():
            if key not in desired.get(entity, {}) and out.get(entity, {}).get(key) == value:
                del out[entity][key]
        return {e: v for e, v in out.items() if v}

    def tolerate_strays(self, broker: dict[Entity, dict[str, float]], c: Claims) -> None:
        """After a step that did not converge: its stray keys are reported; later steps tolerate them.

        Otherwise one key left behind would fail every later step for the same reason.
        """
        want = c.expected if c.expected is not None else c.desired
        verdict = invariants.check(self._without_tolerated(broker, want), want, (), self.unmanaged)
        for d in verdict.discrepancies:
            if d.expected is None and d.actual is not None:
                self.tolerated[(d.entity, d.key)] = d.actual

    def removal_events(self) -> dict[str, list[str]]:
        """QuotaRemoved event messages posted since the last call, by namespace."""
        result = self.kubectl("get", "events", "-A", "--field-selector", "reason=QuotaRemoved", "-o", "json")
        out: dict[str, list[str]] = {}
        if result is None:
            return out
        for ev in json.loads(result.stdout)["items"]:
            uid, count = ev["metadata"]["uid"], int(ev.get("count") or 1)
            if self._events_seen.get(uid, 0) < count:
                self._events_seen[uid] = count
                out.setdefault(ev["metadata"]["namespace"], []).append(ev.get("message", ""))
        return out

    def check_removals(self, broker: dict[Entity, dict[str, float]]) -> tuple[int, list[str]]:
        """Every managed key that left the broker since the last step has a new QuotaRemoved event.

        Returns how many keys left, and the problems.
        """
        removed = [
            (entity, key)
            for entity, values in self._last_broker.items()
            for key in values
            if key not in broker.get(entity, {}) and key not in self.unmanaged.get(entity, {})
        ]
        self._last_broker = broker
        if not removed:
            self.removal_events()
            return 0, []
        messages: list[str] = []
        for _ in range(10):  # events are posted after the change; give them a moment
            messages += [m for ms in self.removal_events().values() for m in ms]
            missing = [(e, k) for e, k in removed if not any(f"{k} on {e.path()} " in m for m in messages)]
            if not missing:
                return len(removed), []
            time.sleep(0.5)
        return len(removed), [f"{k} on {e.path()} left the broker without a QuotaRemoved event" for e, k in missing]

    def check_ledger(self, desired: dict[Entity, dict[str, float]]) -> list[str]:
        """The ledger ConfigMaps record exactly the keys kquota holds on the broker (looked at for a few s)."""
        want = {(e, k) for e, values in desired.items() for k in values}
        problem = ""
        new: list[str] = []
        for _ in range(10):
            maps = self.ledger_maps()
            if maps is not None:
                have = {
                    (e, str(k))
                    for m in maps
                    if (m.get("data") or {}).get(DATA_KEY)
                    for e, values in ledger_format.decode_shard(m["data"][DATA_KEY]).items()
                    for k in values
                }
                if have == want:
                    return []
                lost = sorted(f"{k} on {e.path()}" for e, k in want - have)
                extra = sorted(f"{k} on {e.path()}" for e, k in have - want)
                problem = f"ledger lacks {len(lost)} owned keys {lost[:5]}, records {len(extra)} not owned {extra[:5]}"
                new = [f"lacks {x}" for x in lost] + [f"records {x}" for x in extra]
                if set(new) <= self._ledger_reported:
                    return []  # reported by an earlier step already
            time.sleep(1.0)
        self._ledger_reported |= set(new)
        return [problem or "ledger ConfigMaps not readable"]

    # -- the run ------------------------------------------------------------------------------------

    def run(self) -> Report:
        """Start the stack and play the whole history of the seed."""
        began = time.monotonic()
        self.start()
        try:
            return self.play_all(generate(self.seed, self.faults, self.kinds, topics=self.brokers > 1))
        except KeyboardInterrupt:
            # Ctrl-C (or SIGTERM) on a long run: the steps played so far still make a report.
            if self.report is None:
                raise
            return self.report
        finally:
            if self.report is not None:
                self.report.seconds = time.monotonic() - began

    def play_all(self, steps: Iterable[Step]) -> Report:
        """Play ``steps`` on the started stack, adding each to the report."""
        if self.report is None:
            self.report = Report(self.seed, self.faults, list(self.kinds), setup_seconds=self.setup_seconds)
        report = self.report
        watch = ReadyWatch(self).start()
        try:
            for step in steps:
                result = self.play(step, watch)
                report.steps.append(result)
                report.violations += [
                    Violation(step.index, step.fault.describe(), *v.split(": ", 1), self.replay(step.index))
                    for v in result.violations
                ]
                if self.progress is not None:
                    self.progress(report.text().splitlines()[2 + len(report.steps)])
                    for v in result.violations:
                        self.progress(f"        {v}")
        finally:
            watch.stop()
            report.ready_checked += watch.checked
        return report

    def replay(self, step: int) -> str:
        if self.replay_command is not None:
            return self.replay_command
        kinds = "" if self.kinds == default_kinds(self.brokers) else f" KINDS={','.join(self.kinds)}"
        broken = f" BREAK={self.break_at}" if self.break_at is not None and self.break_at <= step else ""
        brokers = f" BROKERS={self.brokers}" if self.brokers > 1 else ""
        return f"make soak SEED={self.seed} FAULTS={step}{brokers}{kinds}{broken}"

    def play(self, step: Step, watch: ReadyWatch) -> StepResult:
        self._step_index = step.index
        self._grants_at_step = self.grants
        # The resources as the step begins (none when the API server does not answer: then only
        # the values the operations apply are allowed).
        self._step_values = values_during(self.objects() or [], step.ops(), self.grants, self._layouts)
        self.send(step.before)
        fault_seconds = self.inject(step)
        ended = time.monotonic()
        bound = FAILOVER_SECONDS if step.fault.kind == "failover" else self.converge_seconds
        broken = step.index == self.break_at
        if broken:
            self._break(step)
        state: list[Any] = []

        def done() -> bool:
            state[:] = self.converged()
            return bool(state[0])

        violations, self._fault_problems = self._fault_problems, []
        try:
            wait_for(done, bound, "convergence", interval=0.5)
            seconds: float | None = time.monotonic() - ended
        except AssertionError:
            seconds = None
            violations.append(f"desired state within {bound:.0f} s: not converged: {state[1] if state else '?'}")
            if state and state[2] is not None and state[3]:
                self.tolerate_strays(state[3], state[2])
        finally:
            if broken:
                self._unbreak()
        c: Claims | None = state[2] if state else None
        broker: dict[Entity, dict[str, float]] = state[3] if state and state[3] else {}
        removals = 0
        if broker:
            removals, problems = self.check_removals(broker)
            violations += [f"removal without an event: {p}" for p in problems]
        if c is not None and seconds is not None:
            owned = c.expected if c.expected is not None else c.desired
            violations += [f"ledger = what the operator owns: {p}" for p in self.check_ledger(owned)]
        violations += [f"Ready before live: {p}" for p in watch.take()]
        return StepResult(
            step.index,
            step.fault.kind,
            dict(step.fault.params),
            [f"{o.why}:{o.action} {o.resource.kind} {o.resource.namespace}/{o.resource.name}" for o in step.ops()],
            round(fault_seconds, 2),
            None if seconds is None else round(seconds, 2),
            violations,
            removals,
            len(c.refused) if c is not None and seconds is not None else 0,
            sum(1 for e, k in c.kept if k in broker.get(e, {})) if c is not None and seconds is not None else 0,
        )

    def _break(self, step: Step) -> None:
        """The deliberate break: the operator frozen, and a resource it would have to apply."""
        op = self.operator
        assert op is not None and op.proc is not None
        op.proc.signal(signal.SIGSTOP)
        sabotage = Resource(
            CLIENT_QUOTA,
            NAMESPACES[0],
            f"sabotage-{step.index}",
            "user",
            (("user", "sabotage"),),
            (("producerByteRate", 1000.0 + step.index),),
        )
        self.send([Op("apply", sabotage, "sabotage")])

    def _unbreak(self) -> None:
        op = self.operator
        assert op is not None and op.proc is not None
        op.proc.signal(signal.SIGCONT)


def default_kinds(brokers: int) -> tuple[str, ...]:
    """Every fault kind the mode can inject: the 3-broker mode adds leader moves and the controller killed."""
    return FAULT_KINDS + THREE_BROKER_KINDS if brokers > 1 else FAULT_KINDS


def _ok_passes(op: OperatorProcess) -> float:
    """The operator's successful passes so far (-1 while /metrics does not answer)."""
    try:
        return op.metric("kquota_reconcile_passes_total", cluster=CLUSTER, result="ok")
    except OSError:
        return -1.0


def _authenticates(kafka: KafkaCluster, password: str) -> bool:
    """Whether the broker still takes ``password`` for the operator's user (a new connection)."""
    from confluent_kafka.admin import AdminClient

    config = dict(kafka.client_config(OPERATOR_USER, password), log_level=0)
    try:
        AdminClient(config).list_topics(timeout=3)
    except Exception:  # noqa: BLE001 - any failure to connect counts as refused
        return False
    return True


def _sleep_until(moment: float) -> None:
    time.sleep(max(0.0, moment - time.monotonic()))


def run(
    seed: int,
    faults: int,
    workdir: Path,
    kinds: tuple[str, ...] = FAULT_KINDS,
    progress: Callable[[str], None] | None = None,
    break_at: int | None = None,
    brokers: int = 1,
) -> Report:
    """Start the stack in ``workdir``, play the history of ``seed``, stop everything; the report."""
    soak = Soak(seed, faults, workdir, kinds, progress, break_at, brokers=brokers)
    try:
        return soak.run()
    finally:
        soak.stop()
