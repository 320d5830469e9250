"""The operator on brokers with an authorizer, holding exactly the ACLs docs/install.md lists.

One broker with ``StandardAuthorizer`` and one operator, connecting over
SASL/SCRAM as a principal that is not a super user, are shared by the module.
The operator first gets every documented ACL and applies all three kinds;
then each ACL is taken away in turn. Without it the resources that need it say
``NotAuthorized`` naming the refused operation, nothing on the brokers changes
(no half-applied change, unmanaged entries untouched, the ledger rolled back),
the operator retries at a bounded rate rather than in a hot loop, and granting
the ACL again is all it takes to converge.

Test and harness go through the PLAINTEXT listener, whose principal
(ANONYMOUS) is a super user: the ACLs under test bind only the operator.
"""

from __future__ import annotations

import json
import re
import secrets
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from harness.kafka_cluster import KafkaCluster
from harness.kube_apiserver import KubeAPIServer
from harness.operator_proc import (
    GROUP_VERSION,
    LEDGER_NAMESPACE,
    OperatorProcess,
    apply,
    client_quota,
    condition,
    get,
    scram_security,
    wait_for,
)
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from kquota.domain import ledger as ledger_format
from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.plan import EntityChange, QuotaOp
from kquota.kafka.admin import QuotaAdmin
from kquota.kafka.errors import KafkaNotAuthorized
from kquota.kafka.settings import ConnectionSettings
from tests.plugins.resilience import Resilience
from tests.support.quotas import C, M, P

pytestmark = pytest.mark.e2e

#: Topics the operator may describe: every topic with this prefix.
PREFIX = "acl-"
#: docs/install.md#acls, as kafka-acls arguments (after --allow-principal).
DOCUMENTED: dict[str, tuple[str, ...]] = {
    "AlterConfigs on the cluster": ("--operation", "AlterConfigs", "--cluster"),
    "Describe on the topics": ("--operation", "Describe", "--topic", PREFIX, "--resource-pattern-type", "prefixed"),
    "DescribeConfigs on the topics": (
        "--operation",
        "DescribeConfigs",
        "--topic",
        PREFIX,
        "--resource-pattern-type",
        "prefixed",
    ),
}
#: The same, as kafka-acls --list prints them: (resource type, name, pattern type, operation).
DOCUMENTED_LISTED = {
    ("CLUSTER", "kafka-cluster", "LITERAL", "ALTER_CONFIGS"),
    ("TOPIC", PREFIX, "PREFIXED", "DESCRIBE"),
    ("TOPIC", PREFIX, "PREFIXED", "DESCRIBE_CONFIGS"),
}
READ_ONLY_ON_CLUSTER = ("--operation", "DescribeConfigs", "--cluster")
#: What the operator's resources say while all is well.
CONVERGED = {"cq": "Applied", "cmq": "Applied", "tq": "Applied", "native": "UnsupportedByBroker"}
KINDS = {"cq": "clientquota", "cmq": "controllermutationquota", "tq": "topicquota", "native": "topicquota"}


def hexid() -> str:
    return uuid.uuid4().hex[:6]


@dataclass
class AclStack:
    kube: KubeAPIServer
    kafka: KafkaCluster
    operator: OperatorProcess
    cluster: str
    principal: str
    ns: str
    topic: str
    cq_user: str
    cmq_user: str
    tq_user: str
    unmanaged: Entity
    cq_rate: int = 1000
    extra_acls: list[tuple[str, ...]] = field(default_factory=list)

    # -- ACLs --------------------------------------------------------------------

    def grant(self, acl: tuple[str, ...]) -> None:
        self.kafka.create_acls("--allow-principal", self.principal, *acl)

    def revoke(self, acl: tuple[str, ...]) -> None:
        self.kafka.kafka_acls("--remove", "--force", "--allow-principal", self.principal, *acl, check=True)

    def acls(self) -> set[tuple[str, str, str, str]]:
        """The operator's ACLs as the brokers list them."""
        out = self.kafka.kafka_acls("--list", "--principal", self.principal, check=True).stdout
        found: set[tuple[str, str, str, str]] = set()
        resource: tuple[str, str, str] | None = None
        for line in out.splitlines():
            head = re.search(r"resourceType=(\w+), name=([^,]+), patternType=(\w+)", line)
            if head:
                resource = head.groups()  # type: ignore[assignment]
                continue
            op = re.search(r"principal=([^,]+), host=[^,]+, operation=(\w+), permissionType=ALLOW", line)
            if op and resource is not None and op.group(1) == self.principal:
                found.add((*resource, op.group(2)))
        return found

    # -- state -------------------------------------------------------------------

    def broker_quotas(self) -> dict[Entity, dict[QuotaKey, float]]:
        admin = QuotaAdmin(ConnectionSettings(bootstrap_servers=self.kafka.bootstrap))
        try:
            return admin.describe_all()
        finally:
            admin.close()

    def ledger(self) -> dict[Entity, dict[QuotaKey, float]]:
        result = self.kube.kubectl(
            "get", "configmaps", "-n", LEDGER_NAMESPACE, "-l", f"kquota.io/ledger={self.cluster}", "-o", "json"
        )
        out: dict[Entity, dict[QuotaKey, float]] = {}
        for cm in json.loads(result.stdout)["items"]:
            text = (cm.get("data") or {}).get("ledger.json")
            if text:
                out.update(ledger_format.decode_shard(text))
        return out

    def ready(self, name: str) -> dict[str, Any]:
        return condition(get(self.kube, KINDS[name], self.ns, name))

    def reasons(self) -> dict[str, str]:
        return {name: str(self.ready(name).get("reason", "")) for name in KINDS}

    def cluster_ready(self) -> dict[str, Any]:
        result = self.kube.kubectl("get", "kafkacluster", self.cluster, "-o", "json")
        return condition(json.loads(result.stdout))

    def set_cq_rate(self, rate: int) -> None:
        self.cq_rate = rate
        apply(self.kube, client_quota(self.ns, "cq", {"user": {"name": self.cq_user}}, {"producerByteRate": rate}))

    def converged(self) -> bool:
        live = self.broker_quotas()
        return (
            self.reasons() == CONVERGED
            and live.get(Entity.for_user(self.cq_user)) == {P: float(self.cq_rate)}
            and live.get(Entity.for_user(self.cmq_user)) == {M: 5.0}
            and set(live.get(Entity.for_user(self.tq_user), {})) == {P, C}
            and live.get(self.unmanaged) == {P: 777.0}
        )

    def wait_converged(self, what: str) -> None:
        wait_for(self.converged, 120, what, interval=0.5, on_timeout=self.debug)

    def pace(self) -> tuple[float, float]:
        """Reconcile passes and AlterClientQuotas attempts so far."""
        return (
            self.operator.metric("kquota_reconcile_passes_total", cluster=self.cluster),
            self.operator.metric("kquota_apply_batch_ops_count", cluster=self.cluster),
        )

    def debug(self) -> str:
        return json.dumps({"reasons": self.reasons(), "acls": sorted(self.acls())}) + "\n" + self.operator.log()


QUOTA_KINDS = "clientquotas,controllermutationquotas,topicquotas"


def _manifest(kind: str, name: str, ns: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": GROUP_VERSION, "kind": kind, "metadata": {"name": name, "namespace": ns}, "spec": spec}


@pytest.fixture(scope="module")
def acl_stack(kube: KubeAPIServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclStack]:
    kafka = KafkaCluster.start(tmp_path_factory.mktemp("kafka-acl"), authorizer=True)
    operator: OperatorProcess | None = None
    cluster = f"kc-acl-{hexid()}"
    ns = ""
    try:
        user, password = f"kquota-op-{hexid()}", secrets.token_hex(12)
        kafka.create_scram_user(user, password, mechanism="SCRAM-SHA-512")
        principal = f"User:{user}"
        for acl in DOCUMENTED.values():
            kafka.create_acls("--allow-principal", principal, *acl)

        topic = f"{PREFIX}orders-{hexid()}"
        admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
        try:
            admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])
        finally:
            admin.close()
        # An entry kquota does not own: it must survive every refusal untouched.
        unmanaged = Entity.for_user(f"unmanaged-{hexid()}")
        plain = QuotaAdmin(ConnectionSettings(bootstrap_servers=kafka.bootstrap))
        try:
            assert all(r.ok for r in plain.alter([EntityChange(unmanaged, (QuotaOp(P, 777.0),))]))
        finally:
            plain.close()

        kube.apply_crds()
        security = scram_security(kube, f"kquota-op-{hexid()}", user, password)
        kube.kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps(
                {
                    "apiVersion": GROUP_VERSION,
                    "kind": "KafkaCluster",
                    "metadata": {"name": cluster},
                    "spec": {"bootstrapServers": kafka.sasl_bootstrap, "security": security},
                }
            ),
        )
        # Scoped to this module's namespace: quota resources other modules left
        # on the shared API server must not reach this broker.
        operator = OperatorProcess(
            kube,
            tmp_path_factory.mktemp("operator-acl"),
            default_cluster=cluster,
            drift_interval=3.0,
            extra_env={"KQUOTA_WATCH_NAMESPACES": json.dumps(["acl-*"])},
        ).start()
        ns = kube.create_namespace("acl")
        yield AclStack(
            kube=kube,
            kafka=kafka,
            operator=operator,
            cluster=cluster,
            principal=principal,
            ns=ns,
            topic=topic,
            cq_user=f"app-{hexid()}",
            cmq_user=f"mut-{hexid()}",
            tq_user=f"tq-{hexid()}",
            unmanaged=unmanaged,
        )
    finally:
        if operator is not None:
            # Delete this module's resources while its operator still runs (it
            # releases their finalizers): left behind without a clusterRef, they
            # would go to the default cluster of every later module's operator.
            if ns:
                kube.kubectl("delete", QUOTA_KINDS, "--all", "-n", ns, "--timeout=60s", check=False)
            kube.kubectl("delete", "kafkacluster", cluster, "--timeout=30s", check=False)
            operator.stop()
        kafka.stop()


@pytest.fixture
def applied(acl_stack: AclStack) -> AclStack:
    """The stack with every kind applied under exactly the documented ACLs."""
    s = acl_stack
    assert s.acls() == DOCUMENTED_LISTED, "the operator must hold exactly the documented ACLs"
    if get(s.kube, "clientquota", s.ns, "cq") is None:
        budget = {"producerByteRate": 3_000_000, "consumerByteRate": 6_000_000}
        apply(
            s.kube,
            client_quota(s.ns, "cq", {"user": {"name": s.cq_user}}, {"producerByteRate": s.cq_rate}),
            _manifest("ControllerMutationQuota", "cmq", s.ns, {"entity": {"user": {"name": s.cmq_user}}, "rate": 5}),
            _manifest(
                "TopicQuota",
                "tq",
                s.ns,
                {
                    "topic": {"name": s.topic},
                    "budget": budget,
                    "enforcement": "ClientQuotas",
                    "clients": [{"user": {"name": s.tq_user}, "share": 50}],
                },
            ),
            _manifest(
                "TopicQuota",
                "native",
                s.ns,
                {"topic": {"name": s.topic}, "budget": budget, "enforcement": "TopicConfig"},
            ),
        )
    s.wait_converged("every kind applied with the documented ACLs")
    return s


def test_with_the_documented_acls_every_kind_is_applied(applied: AclStack) -> None:
    s = applied
    live = s.broker_quotas()
    # 3 partitions, all led by the one broker: the client gets its whole 50% share there.
    assert live[Entity.for_user(s.tq_user)] == {P: 1_500_000.0, C: 3_000_000.0}
    assert live[Entity.for_user(s.cmq_user)] == {M: 5.0}
    assert s.cluster_ready()["reason"] == "Connected"
    assert "KIP-1010" in s.ready("native")["message"], "the TopicConfig probe ran (DescribeConfigs on the topic)"


@dataclass(frozen=True)
class Case:
    acl: str
    #: An ACL granted in its place (the read-only principal).
    instead: tuple[str, ...] | None
    #: Resources that must say NotAuthorized; the others stay as they were.
    affected: frozenset[str]
    #: In the affected resources' message.
    says: tuple[str, ...]
    #: Whether a ClientQuota change still reaches the brokers meanwhile.
    writes: bool


CASES = {
    "AlterConfigs on the cluster": Case(
        "AlterConfigs on the cluster",
        None,
        frozenset(KINDS),
        ("may not DESCRIBE_CONFIGS on the cluster", "ALTER_CONFIGS on the cluster", "DescribeClientQuotas"),
        writes=False,
    ),
    "AlterConfigs on the cluster, DescribeConfigs left (read-only)": Case(
        "AlterConfigs on the cluster",
        READ_ONLY_ON_CLUSTER,
        frozenset(KINDS),
        ("may not ALTER_CONFIGS on the cluster", "AlterClientQuotas was refused"),
        writes=False,
    ),
    "Describe on the topics": Case(
        "Describe on the topics",
        None,
        frozenset({"tq", "native"}),
        ("may not DESCRIBE on topic",),
        writes=True,
    ),
    "DescribeConfigs on the topics": Case(
        "DescribeConfigs on the topics",
        None,
        frozenset({"native"}),
        ("may not DESCRIBE_CONFIGS on topic",),
        writes=True,
    ),
}


@pytest.mark.parametrize("case_id", list(CASES))
def test_without_one_acl_the_affected_resources_say_not_authorized_and_nothing_changes(
    applied: AclStack, resilience: Resilience, case_id: str
) -> None:
    s, case = applied, CASES[case_id]
    before = s.broker_quotas()
    old_rate, new_rate = s.cq_rate, s.cq_rate + 100
    cq = Entity.for_user(s.cq_user)
    ok, detail = False, "did not get as far as the refusal"
    try:
        # The replacement first: revoking first would leave a moment with neither ACL, and a pass
        # in that moment rightly reports a different refusal than the one this case is about.
        if case.instead:
            s.grant(case.instead)
        s.revoke(DOCUMENTED[case.acl])
        # A change made while the ACL is missing: applied only if it does not need that ACL.
        s.set_cq_rate(new_rate)

        def refused() -> bool:
            # Reason and message: ACL changes reach the broker's authorizer a little after kafka-acls
            # returns, so a pass may first meet a refusal from the step before (the status then
            # names that one until the next pass, a bounded backoff later).
            ready = {n: s.ready(n) for n in KINDS}
            return all(
                ready[n].get("reason") == "NotAuthorized" and all(t in str(ready[n].get("message")) for t in case.says)
                for n in case.affected
            ) and all(ready[n].get("reason") == CONVERGED[n] for n in set(KINDS) - case.affected)

        wait_for(refused, 90, f"NotAuthorized on {sorted(case.affected)} only", interval=0.5, on_timeout=s.debug)
        for name in case.affected:
            message = s.ready(name)["message"]
            assert s.principal in message and "docs/install.md#acls" in message, message
            for text in case.says:
                assert text in message, message
            if "topics" in case.acl:
                assert repr(s.topic) in message, message
        if case.affected == set(KINDS):
            assert s.cluster_ready()["reason"] == "NotAuthorized"

        # Retried at a bounded pace (capped backoff or the drift interval), never in a hot loop.
        passes0, alters0 = s.pace()
        t0 = time.monotonic()
        time.sleep(10)
        passes1, alters1 = s.pace()
        elapsed = time.monotonic() - t0
        assert passes1 - passes0 <= elapsed + 1, f"{passes1 - passes0} passes in {elapsed:.0f}s"
        assert alters1 - alters0 <= elapsed + 1, f"{alters1 - alters0} alter attempts in {elapsed:.0f}s"

        # Nothing half-applied: the brokers hold what they held, bar the change that needed no missing ACL.
        expected = dict(before)
        if case.writes:
            expected[cq] = {P: float(new_rate)}
            wait_for(
                lambda: s.broker_quotas() == expected,
                60,
                "the ClientQuota change applied meanwhile, nothing else changed",
                on_timeout=lambda: f"expected {expected}\nbrokers  {s.broker_quotas()}",
            )
            assert s.reasons()["cq"] == "Applied"
        assert s.broker_quotas() == expected
        # The write-ahead of a refused change is rolled back: the ledger claims what the brokers hold.
        wait_for(
            lambda: s.ledger().get(cq) == expected[cq],
            60,
            f"the ledger to hold {expected[cq]} for {cq.path()}",
            on_timeout=lambda: str(s.ledger().get(cq)),
        )
        ok = True
        detail = (
            f"{sorted(case.affected)} NotAuthorized; brokers unchanged"
            + (", the other kinds carried on" if case.writes else f" ({cq.path()} stayed at {old_rate:g})")
            + f"; {passes1 - passes0:g} passes in {elapsed:.0f}s"
        )
    finally:
        # Put the documented set back whatever happened: the next case starts from it.
        s.grant(DOCUMENTED[case.acl])
        if case.instead:
            s.revoke(case.instead)
        resilience.hostile(f"ACL {case_id} removed", ok=ok, detail=detail)
    s.wait_converged(f"convergence once {case.acl} is granted again")
    assert s.broker_quotas()[cq] == {P: float(new_rate)}


def test_a_deletion_whose_removal_the_brokers_refuse_keeps_its_finalizer_until_the_key_is_gone(
    applied: AclStack,
) -> None:
    """Issue #33: a removal the brokers did not apply (here AlterConfigs refused; on a starved
    machine the controller's REQUEST_TIMED_OUT) must leave the key kquota's and the deletion
    pending. It used to drop the key from the ledger: the next pass, with nothing left to send,
    released the finalizer and the key stayed on the broker, owned by no one."""
    s = applied
    leaving = Entity.for_user(f"leaving-{hexid()}")
    assert leaving.user is not None
    apply(s.kube, client_quota(s.ns, "leaving", {"user": {"name": leaving.user}}, {"producerByteRate": 2000}))
    wait_for(lambda: s.broker_quotas().get(leaving) == {P: 2000.0}, 60, "the quota on the broker")
    old_rate = s.cq_rate
    try:
        s.grant(READ_ONLY_ON_CLUSTER)
        s.revoke(DOCUMENTED["AlterConfigs on the cluster"])
        # A change that needs AlterConfigs shows when the refusal is in force; undone, the passes that
        # follow have nothing to send but the removal.
        s.set_cq_rate(old_rate + 1)
        wait_for(lambda: s.ready("cq").get("reason") == "NotAuthorized", 60, "the refusal in force", on_timeout=s.debug)
        s.set_cq_rate(old_rate)
        wait_for(lambda: s.ready("cq").get("reason") == "Applied", 60, "nothing left to send", on_timeout=s.debug)
        refused_before = s.operator.metric("kquota_reconcile_passes_total", cluster=s.cluster, result="unavailable")
        s.kube.kubectl("delete", "clientquota", "leaving", "-n", s.ns, "--wait=false")

        def refused_passes() -> float:
            now = s.operator.metric("kquota_reconcile_passes_total", cluster=s.cluster, result="unavailable")
            return now - refused_before

        def gone() -> bool:
            return get(s.kube, "clientquota", s.ns, "leaving") is None

        # The removal refused, then again (1 s backoff): the old code released the finalizer instead.
        wait_for(lambda: refused_passes() >= 2 or gone(), 60, "the removal refused twice", on_timeout=s.debug)
        leftover = get(s.kube, "clientquota", s.ns, "leaving")
        assert leftover is not None, "the finalizer went while the broker still held the key"
        assert leftover["metadata"].get("deletionTimestamp")
        assert s.broker_quotas().get(leaving) == {P: 2000.0}
        assert s.ledger().get(leaving) == {P: 2000.0}, "the key must stay kquota's to remove"
    finally:
        s.grant(DOCUMENTED["AlterConfigs on the cluster"])
        s.revoke(READ_ONLY_ON_CLUSTER)
    wait_for(gone, 90, "the deletion done once AlterConfigs is back", on_timeout=s.debug)
    assert leaving not in s.broker_quotas()
    assert leaving not in s.ledger()
    s.wait_converged("the other kinds as they were")


def test_the_adapter_names_each_missing_acl(acl_stack: AclStack) -> None:
    """Each entry of the ACL table, call by call, for a principal that starts with no ACLs."""
    s = acl_stack
    user, password = f"bare-{hexid()}", secrets.token_hex(12)
    s.kafka.create_scram_user(user, password, mechanism="SCRAM-SHA-512")
    principal = f"User:{user}"
    other = f"elsewhere-{hexid()}"  # outside the prefix
    admin = QuotaAdmin(
        ConnectionSettings(
            bootstrap_servers=s.kafka.sasl_bootstrap,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_username=user,
            sasl_password=password,
        )
    )
    probe = EntityChange(Entity.for_user(f"probe-{hexid()}"), (QuotaOp(P, 42.0),))

    def refusal(call: Any) -> KafkaNotAuthorized:
        with pytest.raises(KafkaNotAuthorized) as info:
            call()
        assert principal in str(info.value)
        return info.value

    def grant(*acl: str) -> None:
        s.kafka.create_acls("--allow-principal", principal, *acl)

    def revoke(*acl: str) -> None:
        s.kafka.kafka_acls("--remove", "--force", "--allow-principal", principal, *acl, check=True)

    try:
        # No ACL at all: DescribeCluster (the broker list) needs none; everything else is refused by name.
        assert admin.broker_ids() == [1]
        exc = refusal(admin.describe_all)
        assert (exc.operation, exc.resource_type, exc.request) == (
            "DESCRIBE_CONFIGS",
            "CLUSTER",
            "DescribeClientQuotas",
        )
        exc = refusal(lambda: admin.broker_configs(1, ["controller.quota.window.num"]))
        assert (exc.operation, exc.resource_type) == ("DESCRIBE_CONFIGS", "CLUSTER")
        exc = refusal(lambda: admin.alter([probe]))
        assert (exc.operation, exc.request) == ("ALTER_CONFIGS", "AlterClientQuotas")
        assert [r.ok for r in exc.results] == [False], "the refused entity is reported, not applied"
        exc = refusal(lambda: admin.topic_leaders([s.topic]))
        assert (exc.operation, exc.resources) == ("DESCRIBE", (s.topic,))
        exc = refusal(lambda: admin.topic_config_names(s.topic))
        assert (exc.operation, exc.resource_type) == ("DESCRIBE_CONFIGS", "TOPIC")

        # Read-only on the cluster: reads work; a write, even validate_only, is refused.
        grant(*READ_ONLY_ON_CLUSTER)
        wait_for(lambda: _reads(admin), 30, "DescribeConfigs on the cluster to take effect")
        assert admin.broker_configs(1, ["controller.quota.window.num"]) == {"controller.quota.window.num": "11"}
        refusal(lambda: admin.alter([probe], validate_only=True))
        refusal(lambda: admin.alter([probe]))
        assert probe.entity not in s.broker_quotas()

        # AlterConfigs alone covers DescribeConfigs on the cluster (Kafka's implied operations).
        grant("--operation", "AlterConfigs", "--cluster")
        revoke(*READ_ONLY_ON_CLUSTER)
        wait_for(lambda: _writes(admin, probe), 30, "AlterConfigs on the cluster to take effect")
        # The controller commits the write; the broker answering DescribeClientQuotas serves it once its
        # metadata image has caught up (KRaft), so a read straight after the write can still miss it.
        wait_for(lambda: admin.describe_all().get(probe.entity) == {P: 42.0}, 30, "the probe's quota described")
        assert admin.broker_configs(1, ["controller.quota.window.num"]) == {"controller.quota.window.num": "11"}

        # Topics by prefix: the allowed topic's layout comes with the refusal of the other.
        grant(*DOCUMENTED["Describe on the topics"][:2], "--topic", PREFIX, "--resource-pattern-type", "prefixed")
        exc = wait_for(lambda: _leaders_refused(admin, [s.topic, other]), 30, "Describe on the prefix")
        assert exc.resources == (other,) and set(exc.leaders) == {s.topic}
        assert admin.topic_leaders([s.topic]) == {s.topic: {0: 1, 1: 1, 2: 1}}
        refusal(lambda: admin.topic_config_names(s.topic))  # Describe does not include DescribeConfigs
        grant("--operation", "DescribeConfigs", "--topic", PREFIX, "--resource-pattern-type", "prefixed")
        wait_for(lambda: _configs_readable(admin, s.topic), 30, "DescribeConfigs on the prefix")
    finally:
        admin.close()


def _reads(admin: QuotaAdmin) -> bool:
    try:
        admin.describe_all()
    except KafkaNotAuthorized:
        return False
    return True


def _writes(admin: QuotaAdmin, probe: EntityChange) -> bool:
    try:
        return all(r.ok for r in admin.alter([probe]))
    except KafkaNotAuthorized:
        return False


def _leaders_refused(admin: QuotaAdmin, topics: list[str]) -> KafkaNotAuthorized | None:
    try:
        admin.topic_leaders(topics)
    except KafkaNotAuthorized as exc:
        return exc if exc.leaders else None
    raise AssertionError(f"{topics} all described: the topic outside the prefix should be refused")


def _configs_readable(admin: QuotaAdmin, topic: str) -> bool:
    try:
        return "retention.ms" in admin.topic_config_names(topic)
    except KafkaNotAuthorized:
        return False
