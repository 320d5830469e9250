"""A seeded generator of GitOps histories with faults: pure, no I/O, replayable.

``generate(seed, faults)`` returns the same list of :class:`Step` for the same
arguments, always: one ``random.Random(seed)`` decides every choice, and the
model it keeps (which resources are live, with which spec) is plain data. Each
step is a few GitOps operations, a fault, a few more operations sent while the
fault is on, and then the engine waits for convergence and checks invariants.

Operations cover every entity form of a ClientQuota (user, client-id, the
pair, each with ``<default>`` parts, and ip), create / modify / delete / move
(entity is immutable: a move deletes one resource and creates another on the
new entity), conflicting claims (a second resource claiming keys another one
already holds) and ControllerMutationQuotas.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any, Final

#: Entity forms of a ClientQuota: which parts, and whether each is ``<default>``.
ENTITY_FORMS: Final = (
    "user",
    "user=<default>",
    "client",
    "client=<default>",
    "user+client",
    "user+client=<default>",
    "user=<default>+client",
    "user=<default>+client=<default>",
    "ip",
    "ip=<default>",
)
#: Forms a ControllerMutationQuota takes (no ip).
MUTATION_FORMS: Final = tuple(f for f in ENTITY_FORMS if not f.startswith("ip"))

#: Faults the engine can inject (harness/soak/engine.py says how).
FAULT_KINDS: Final = (
    "operator-kill",
    "operator-pause",
    "failover",
    "broker-kill",
    "apiserver-restart",
    "slow-network",
    "ledger-deleted",
    "ledger-edited",
    "crds-reapplied",
    "secret-rotated",
    "kafkacluster-edited",
    "tenancy-revoked",
)
#: Faults of the 3-broker mode only (``make soak BROKERS=3``): partition leaders moved by a
#: reassignment and a preferred-leader election, and the active KRaft controller SIGKILLed.
THREE_BROKER_KINDS: Final = ("leader-moved", "controller-killed")
#: Topics the 3-broker mode creates (name, partitions), replicas on all three brokers.
TOPICS: Final = (("soak-t0", 6), ("soak-t1", 4))
#: Principals TopicQuotas give shares to (apart from the ClientQuotas' pools, so the two kinds do
#: not fight over keys; TopicQuotas still conflict among themselves).
TOPIC_USERS: Final = ("t0", "t1", "t2")
TOPIC_CLIENTS: Final = ("tc0", "tc1")
TOPIC_QUOTA: Final = "TopicQuota"
#: What a ``kafkacluster-edited`` fault changes (its ``what`` parameter indexes this): none of it
#: may disturb convergence. The tenancy grants cover every namespace and entity the history uses.
CLUSTER_EDITS: Final = ("label", "metrics", "protected-client-id", "tenancy")
#: The tenancy a ``tenancy-revoked`` fault sets (its ``grants`` parameter indexes this): 0 is every
#: namespace granted everything the history uses (a revocation restored); the others take rights
#: away from a namespace, so resources already applied are refused (NotPermitted) and must keep
#: what they set until the grant comes back (README "Multi-tenancy").
TENANCY_EDITS: Final = (
    "restored",
    "soak-b-no-defaults",
    "soak-a-no-ips",
    "soak-a-users-u2-u3",
    "soak-b-clients-c0-c1-ip-1",
    "soak-b-no-grant",
    "deny-all",
)
#: GitOps operations.
OP_KINDS: Final = ("create", "modify", "delete", "move", "conflict", "mutation")

NAMESPACES: Final = ("soak-a", "soak-b")
#: Small name pools, so that histories revisit entities (and meet old keys and conflicts).
USERS: Final = ("u0", "u1", "u2", "u3")
CLIENTS: Final = ("c0", "c1", "c2", "c3")
IPS: Final = ("192.0.2.1", "192.0.2.2", "192.0.2.3")
#: Fields of a ClientQuota's spec.quota for user/client entities, and for ip entities.
CLIENT_FIELDS: Final = ("producerByteRate", "consumerByteRate", "requestPercentage")
IP_FIELDS: Final = ("connectionCreationRate",)
#: requestPercentage is never set on a user-only entity: the engine seeds an
#: unmanaged request_percentage on users/u0, which must stay untouched.
UNMANAGED_USER_FIELD: Final = "requestPercentage"

CLIENT_QUOTA: Final = "ClientQuota"
MUTATION_QUOTA: Final = "ControllerMutationQuota"


@dataclass(frozen=True)
class Resource:
    """One quota resource as the history applies it."""

    kind: str
    namespace: str
    name: str
    form: str
    #: entity part -> name (None for ``<default>``): "user", "clientId", "ip".
    entity: tuple[tuple[str, str | None], ...]
    #: spec field -> value (ClientQuota: spec.quota fields; ControllerMutationQuota: "rate";
    #: TopicQuota: spec.budget fields).
    values: tuple[tuple[str, float], ...]
    #: TopicQuota only: its clients (entity parts, share in percent); ``form`` is its topic.
    clients: tuple[tuple[tuple[tuple[str, str | None], ...], int], ...] = ()

    def manifest(self) -> dict[str, Any]:
        entity = {part: ({"default": True} if name is None else {"name": name}) for part, name in self.entity}
        spec: dict[str, Any] = {"entity": entity}
        if self.kind == TOPIC_QUOTA:
            spec = {
                "topic": {"name": self.form},
                "budget": {k: int(v) for k, v in self.values},
                "enforcement": "ClientQuotas",
                "clients": [
                    {**{part: {"name": name} for part, name in parts}, "share": share} for parts, share in self.clients
                ],
            }
        elif self.kind == CLIENT_QUOTA:
            spec["quota"] = {k: _json_number(k, v) for k, v in self.values}
        else:
            spec.update({k: v for k, v in self.values})
        return {
            "apiVersion": "kquota.io/v1alpha1",
            "kind": self.kind,
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": spec,
        }


def _json_number(field_name: str, value: float) -> float | int:
    return value if field_name == "requestPercentage" else int(value)


@dataclass(frozen=True)
class Op:
    """``apply`` or ``delete`` of one resource; ``why`` is the GitOps operation it belongs to."""

    action: str
    resource: Resource
    why: str


@dataclass(frozen=True)
class Fault:
    kind: str
    params: tuple[tuple[str, float], ...] = ()

    def param(self, name: str, default: float = 0.0) -> float:
        return dict(self.params).get(name, default)

    def describe(self) -> str:
        return self.kind + "".join(f" {k}={v:g}" for k, v in self.params)


@dataclass(frozen=True)
class Step:
    index: int
    before: tuple[Op, ...]
    fault: Fault
    during: tuple[Op, ...]

    def ops(self) -> tuple[Op, ...]:
        return self.before + self.during


@dataclass
class _Model:
    """What the history has applied so far: live resources by (kind, namespace, name)."""

    rng: random.Random
    live: dict[tuple[str, str, str], Resource] = field(default_factory=dict)
    counter: int = 0
    #: Whether a ``tenancy-revoked`` fault left a grant revoked (the next one restores it, or not).
    revoked: bool = False
    #: Whether the history also creates, modifies and deletes TopicQuotas (the 3-broker mode).
    topics: bool = False

    def fresh_name(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def entity(self, form: str) -> tuple[tuple[str, str | None], ...]:
        parts: list[tuple[str, str | None]] = []
        for piece in form.split("+"):
            part, _, default = piece.partition("=")
            pool = {"user": USERS, "client": CLIENTS, "ip": IPS}[part]
            name = None if default else self.rng.choice(pool)
            parts.append(({"client": "clientId"}.get(part, part), name))
        return tuple(parts)

    def values(
        self, kind: str, entity: tuple[tuple[str, str | None], ...], among: tuple[str, ...] = ()
    ) -> tuple[tuple[str, float], ...]:
        """New values for some of the fields ``entity`` may have (some of ``among`` if given)."""
        rng = self.rng
        if kind == MUTATION_QUOTA:
            return (("rate", rng.randint(1, 400) / 4),)
        fields = list(among or fields_for(entity))
        chosen = sorted(rng.sample(fields, rng.randint(1, len(fields))))
        return tuple((f, self.value(f)) for f in chosen)

    def value(self, field_name: str) -> float:
        if field_name == "requestPercentage":
            return self.rng.randint(1, 200) + 0.5
        if field_name == "connectionCreationRate":
            return float(self.rng.randint(1, 500))
        return float(self.rng.randint(1, 10**7))

    def new(self, kind: str, form: str | None = None, namespace: str | None = None) -> Resource:
        forms = ENTITY_FORMS if kind == CLIENT_QUOTA else MUTATION_FORMS
        form = form or self.rng.choice(forms)
        entity = self.entity(form)
        prefix = "cq" if kind == CLIENT_QUOTA else "cmq"
        return Resource(
            kind,
            namespace or self.rng.choice(NAMESPACES),
            self.fresh_name(prefix),
            form,
            entity,
            self.values(kind, entity),
        )

    def pick(self, kind: str) -> Resource | None:
        found = sorted(k for k in self.live if k[0] == kind)
        return self.live[self.rng.choice(found)] if found else None

    def put(self, r: Resource, why: str) -> Op:
        self.live[(r.kind, r.namespace, r.name)] = r
        return Op("apply", r, why)

    def drop(self, r: Resource, why: str) -> Op:
        del self.live[(r.kind, r.namespace, r.name)]
        return Op("delete", r, why)

    def topic_quota(self, name: str | None = None, topic: str | None = None) -> Resource:
        """A TopicQuota (ClientQuotas enforcement) giving one to three principals shares of a budget."""
        rng = self.rng
        fields = sorted(rng.sample(("producerByteRate", "consumerByteRate"), rng.randint(1, 2)))
        budget = tuple((f, float(rng.randint(1, 10**4) * 1000)) for f in fields)
        clients: list[tuple[tuple[tuple[str, str | None], ...], int]] = []
        left = 100
        for user in sorted(rng.sample(TOPIC_USERS, rng.randint(1, 3))):
            parts: tuple[tuple[str, str | None], ...] = (("user", user),)
            if rng.randrange(3) == 0:
                parts += (("clientId", rng.choice(TOPIC_CLIENTS)),)
            share = rng.randint(1, max(1, left // 2))
            left -= share
            clients.append((parts, share))
        return Resource(
            TOPIC_QUOTA,
            rng.choice(NAMESPACES),
            name or self.fresh_name("tq"),
            topic or rng.choice(TOPICS)[0],
            (),
            budget,
            tuple(clients),
        )

    def topic_operation(self) -> list[Op]:
        target = self.pick(TOPIC_QUOTA)
        what = self.rng.choices(("create", "modify", "delete"), weights=(3, 3, 2))[0]
        if what == "create" or target is None:
            return [self.put(self.topic_quota(), "topic-create")]
        if what == "modify":
            # A new budget and clients on the same topic (the topic may not change in place either).
            again = self.topic_quota(target.name, target.form)
            return [self.put(replace(again, namespace=target.namespace), "topic-modify")]
        return [self.drop(target, "topic-delete")]

    def operation(self) -> list[Op]:
        rng = self.rng
        if self.topics and rng.randrange(3) == 0:
            return self.topic_operation()
        what = rng.choices(OP_KINDS, weights=(4, 4, 2, 1, 1, 2))[0]
        target = self.pick(CLIENT_QUOTA)
        if what == "create" or target is None:
            return [self.put(self.new(CLIENT_QUOTA), "create")]
        if what == "modify":
            return [self.put(replace(target, values=self.values(target.kind, target.entity)), "modify")]
        if what == "delete":
            return [self.drop(target, "delete")]
        if what == "move":
            moved = self.new(CLIENT_QUOTA, namespace=target.namespace)
            if fields_for(moved.entity) == fields_for(target.entity):
                moved = replace(moved, values=target.values)
            return [self.drop(target, "move"), self.put(moved, "move")]
        if what == "conflict":
            # A second resource, in the other namespace, claiming some of the same keys.
            other = NAMESPACES[1 - NAMESPACES.index(target.namespace)]
            values = self.values(target.kind, target.entity, among=tuple(f for f, _ in target.values))
            rival = Resource(target.kind, other, self.fresh_name("rival"), target.form, target.entity, values)
            return [self.put(rival, "conflict")]
        mutation = self.pick(MUTATION_QUOTA)
        choice = rng.randrange(3)
        if mutation is None or choice == 0:
            return [self.put(self.new(MUTATION_QUOTA), "mutation-create")]
        if choice == 1:
            return [self.put(replace(mutation, values=self.values(MUTATION_QUOTA, mutation.entity)), "mutation-modify")]
        return [self.drop(mutation, "mutation-delete")]

    def operations(self, most: int) -> tuple[Op, ...]:
        ops: list[Op] = []
        for _ in range(self.rng.randint(0, most)):
            ops += self.operation()
        return tuple(ops)

    def fault(self, kind: str) -> Fault:
        rng = self.rng
        if kind in ("operator-kill", "broker-kill"):
            return Fault(kind, (("down", rng.randint(1, 8)),))
        if kind == "operator-pause":
            return Fault(kind, (("paused", rng.randint(2, 10)),))
        if kind == "apiserver-restart":
            return Fault(kind, (("down", rng.randint(1, 6)), ("sigkill", rng.randrange(2))))
        if kind == "slow-network":
            return Fault(
                kind,
                (
                    ("latency", rng.randint(1, 8) / 10),
                    ("stall", rng.randint(0, 6)),
                    ("seconds", rng.randint(4, 12)),
                    ("proxy_seed", rng.randrange(10_000)),
                ),
            )
        if kind == "ledger-edited":
            return Fault(kind, (("pick", rng.randrange(1_000_000)),))
        if kind == "secret-rotated":
            # Seconds between the new password on the broker (the old one revoked, connections
            # dropped) and the new Secret content: the operator cannot connect meanwhile.
            return Fault(kind, (("lag", rng.randint(0, 6)),))
        if kind == "kafkacluster-edited":
            return Fault(
                kind,
                (("what", rng.randrange(len(CLUSTER_EDITS))), ("on", rng.randrange(2)), ("value", rng.randrange(1000))),
            )
        if kind == "leader-moved":
            # Which topic, to which broker id (1-3) its moved partitions' preferred leader goes, how many.
            return Fault(
                kind,
                (("topic", rng.randrange(len(TOPICS))), ("broker", rng.randint(1, 3)), ("count", rng.randint(1, 4))),
            )
        if kind == "controller-killed":
            return Fault(kind, (("down", rng.randint(1, 8)),))
        if kind == "tenancy-revoked":
            # After a revocation, half the time the grant comes back; otherwise another one is revoked.
            restore = self.revoked and rng.randrange(2) == 0
            grants = 0 if restore else rng.randrange(1, len(TENANCY_EDITS))
            self.revoked = grants != 0
            return Fault(kind, (("grants", grants),))
        return Fault(kind)


def fields_for(entity: tuple[tuple[str, str | None], ...]) -> tuple[str, ...]:
    """The ClientQuota fields the history sets on ``entity``."""
    parts = dict(entity)
    if "ip" in parts:
        return IP_FIELDS
    if set(parts) == {"user"}:
        return tuple(f for f in CLIENT_FIELDS if f != UNMANAGED_USER_FIELD)
    return CLIENT_FIELDS


def generate(seed: int, faults: int, kinds: tuple[str, ...] = FAULT_KINDS, topics: bool = False) -> list[Step]:
    """The history of ``seed``: ``faults`` steps, each with its operations and one fault of ``kinds``.

    ``topics`` (the 3-broker mode) adds TopicQuota operations; without it the history is what it was.
    """
    model = _Model(random.Random(seed), topics=topics)
    steps = []
    for i in range(faults):
        # The first step always creates something to protect.
        before = model.operations(4) if i else tuple(model.put(model.new(CLIENT_QUOTA), "create") for _ in range(4))
        fault = model.fault(model.rng.choice(kinds))
        during = model.operations(3)
        steps.append(Step(i + 1, before, fault, during))
    return steps


def final_live(steps: list[Step]) -> dict[tuple[str, str, str], Resource]:
    """The resources live after ``steps`` (what the brokers must hold at the end)."""
    live: dict[tuple[str, str, str], Resource] = {}
    for step in steps:
        for op in step.ops():
            key = (op.resource.kind, op.resource.namespace, op.resource.name)
            if op.action == "apply":
                live[key] = op.resource
            else:
                live.pop(key, None)
    return live
