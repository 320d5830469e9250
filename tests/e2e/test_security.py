"""Multi-tenancy and credentials, on the real API server and broker.

* Teams write quotas in their own namespaces; the KafkaCluster's grants decide
  which principals each namespace may manage. A team cannot raise another
  team's limits, nor its own beyond its grant, nor edit the grant itself.
* The operator reaches Kafka over SASL/SCRAM with credentials from a Secret,
  never changes its own principal, and the password appears in no log, status
  or event, even while it is wrong.
"""

from __future__ import annotations

import json
import secrets
import uuid
from typing import Any

import pytest
from harness.operator_proc import LEDGER_NAMESPACE, apply, client_quota, condition, get, scram_security, wait_for
from harness.stack import Stack

from kquota.domain.entities import Entity
from tests.support.quotas import P

pytestmark = pytest.mark.e2e


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def cluster(name: str, bootstrap: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kquota.io/v1alpha1",
        "kind": "KafkaCluster",
        "metadata": {"name": name},
        "spec": {"bootstrapServers": bootstrap, **spec},
    }


def grant_quota_rbac(stack: Stack, namespace: str, user: str) -> None:
    stack.kube.kubectl(
        "create",
        "role",
        "quota-editor",
        "-n",
        namespace,
        "--verb=get,list,create,update,patch,delete",
        "--resource=clientquotas.kquota.io",
    )
    stack.kube.kubectl(
        "create", "rolebinding", "quota-editor", "-n", namespace, "--role=quota-editor", f"--user={user}"
    )


def apply_as(stack: Stack, identity: str, obj: dict[str, Any]) -> Any:
    return stack.kube.kubectl(
        "apply", "-f", "-", input=json.dumps(obj), check=False, token=stack.kube.token_for(identity)
    )


def team_applies(
    stack: Stack, identity: str, ns: str, name: str, entity: dict[str, Any], rate: int, cluster: str
) -> None:
    """``identity`` writes a ClientQuota in ``ns``; the API server must accept it (kquota decides later)."""
    result = apply_as(stack, identity, client_quota(ns, name, entity, {"producerByteRate": rate}, cluster=cluster))
    assert result.returncode == 0, result.stderr


def reason(stack: Stack, ns: str, name: str) -> str:
    return str(condition(get(stack.kube, "clientquota", ns, name)).get("reason", ""))


def test_teams_manage_only_the_principals_granted_to_their_namespace(stack: Stack) -> None:
    ns_a, ns_b = stack.new_namespace("team-a"), stack.new_namespace("team-b")
    name = uniq("tenants")
    stack.kube.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            cluster(
                name,
                stack.kafka.bootstrap,
                tenancy={
                    "grants": [
                        {"namespaces": [ns_a], "users": ["team-a-*"], "clientIds": ["a-*"]},
                        {"namespaces": [ns_b], "users": ["team-b-*"]},
                    ]
                },
            )
        ),
    )
    grant_quota_rbac(stack, ns_a, "team-a")
    grant_quota_rbac(stack, ns_b, "team-b")
    own, other = uniq("team-a-app"), uniq("team-b-app")

    team_applies(stack, "team-a", ns_a, "own", {"user": {"name": own}}, 1000, name)
    wait_for(lambda: reason(stack, ns_a, "own") == "Applied", 30, "team-a's own quota applied")
    assert stack.broker_quotas()[Entity.for_user(own)] == {P: 1000.0}

    # Raising another team's limit from one's own namespace: refused by kquota.
    team_applies(stack, "team-a", ns_a, "theirs", {"user": {"name": other}}, 10**9, name)
    wait_for(lambda: reason(stack, ns_a, "theirs") == "NotPermitted", 30, "NotPermitted")
    assert other in condition(get(stack.kube, "clientquota", ns_a, "theirs"))["message"]
    # A default entity raises everyone's limit: not granted to team-a.
    team_applies(stack, "team-a", ns_a, "everyone", {"user": {"default": True}}, 10**9, name)
    wait_for(lambda: reason(stack, ns_a, "everyone") == "NotPermitted", 30, "default entity NotPermitted")
    live = stack.broker_quotas()
    assert Entity.for_user(other) not in live and live.get(Entity.for_user(None), {}).get(P) != 10**9

    # Writing in the other team's namespace, or widening the grant: refused by the API server.
    denied = apply_as(
        stack,
        "team-a",
        client_quota(ns_b, "sneak", {"user": {"name": other}}, {"producerByteRate": 10**9}, cluster=name),
    )
    assert denied.returncode != 0 and "forbidden" in denied.stderr.lower()
    widen = stack.kube.kubectl(
        "patch",
        "kafkacluster",
        name,
        "--type=merge",
        "-p",
        '{"spec": {"tenancy": null}}',
        check=False,
        token=stack.kube.token_for("team-a"),
    )
    assert widen.returncode != 0 and "forbidden" in widen.stderr.lower()

    # The grant owner (team-b) can set it.
    team_applies(stack, "team-b", ns_b, "theirs", {"user": {"name": other}}, 2000, name)
    wait_for(lambda: stack.broker_quotas().get(Entity.for_user(other)) == {P: 2000.0}, 30, "team-b's quota applied")
    stack.kube.kubectl("delete", "kafkacluster", name, "--timeout=30s")


def test_sasl_credentials_from_a_secret_never_leak(stack: Stack) -> None:
    op_user = uniq("kquota-op")
    password = f"S3cret-{secrets.token_hex(12)}"
    stack.kafka.create_scram_user(op_user, password, mechanism="SCRAM-SHA-512")
    secret = uniq("kafka-creds")
    sasl = scram_security(stack.kube, secret, op_user, password)
    name = uniq("secure")
    stack.kube.kubectl("apply", "-f", "-", input=json.dumps(cluster(name, stack.kafka.sasl_bootstrap, security=sasl)))
    ns = stack.new_namespace()
    target = uniq("app")
    apply(
        stack.kube,
        client_quota(ns, "app", {"user": {"name": target}}, {"producerByteRate": 4096}, cluster=name),
        client_quota(ns, "self", {"user": {"name": op_user}}, {"producerByteRate": 1}, cluster=name),
    )
    wait_for(lambda: reason(stack, ns, "app") == "Applied", 30, "quota applied over SASL/SCRAM")
    assert stack.broker_quotas()[Entity.for_user(target)] == {P: 4096.0}
    wait_for(lambda: reason(stack, ns, "self") == "Protected", 30, "the operator's own principal is protected")
    assert Entity.for_user(op_user) not in stack.broker_quotas()

    # A wrong password: a clear status, and the (wrong) password nowhere.
    wrong = f"Wr0ng-{secrets.token_hex(12)}"
    stack.kube.kubectl(
        "patch",
        "secret",
        secret,
        "-n",
        LEDGER_NAMESPACE,
        "--type=merge",
        "-p",
        json.dumps({"stringData": {"password": wrong}}),
    )
    apply(stack.kube, client_quota(ns, "app", {"user": {"name": target}}, {"producerByteRate": 8192}, cluster=name))
    wait_for(lambda: reason(stack, ns, "app") == "KafkaUnavailable", 60, "KafkaUnavailable with a wrong password")
    message = condition(get(stack.kube, "clientquota", ns, "app"))["message"]
    assert "authentication" in message.lower() and op_user in message

    # Put it right: recovers on its own.
    stack.kube.kubectl(
        "patch",
        "secret",
        secret,
        "-n",
        LEDGER_NAMESPACE,
        "--type=merge",
        "-p",
        json.dumps({"stringData": {"password": password}}),
    )
    wait_for(lambda: stack.broker_quotas().get(Entity.for_user(target)) == {P: 8192.0}, 90, "recovery")

    everything = "\n".join(
        [
            stack.operator.log(),
            stack.kube.kubectl("get", "kquota", "-A", "-o", "json").stdout,
            stack.kube.kubectl("get", "events", "-A", "-o", "json").stdout,
            stack.kube.kubectl("get", "configmaps", "-n", LEDGER_NAMESPACE, "-o", "json").stdout,
        ]
    )
    for leaked in (password, wrong):
        assert leaked not in everything, "a password appears in logs, status, events or the ledger"
    stack.kube.kubectl("delete", "kafkacluster", name, "--timeout=30s")


def test_a_strimzi_kafkauser_secret_is_read_as_it_is(stack: Stack) -> None:
    """A KafkaUser's Secret has ``password`` and ``sasl.jaas.config``, no ``username``: the JAAS line names the user."""
    op_user = uniq("kquota-op")
    password = f"S3cret-{secrets.token_hex(12)}"
    stack.kafka.create_scram_user(op_user, password, mechanism="SCRAM-SHA-512")
    secret = uniq("strimzi-user")
    module = "org.apache.kafka.common.security.scram.ScramLoginModule"
    jaas = f'{module} required username="{op_user}" password="{password}";'
    stack.kube.kubectl(
        "create",
        "secret",
        "generic",
        secret,
        "-n",
        LEDGER_NAMESPACE,
        f"--from-literal=password={password}",
        f"--from-literal=sasl.jaas.config={jaas}",
    )
    sasl = {
        "protocol": "SASL_PLAINTEXT",
        "sasl": {"mechanism": "SCRAM-SHA-512", "credentialsSecretRef": {"namespace": LEDGER_NAMESPACE, "name": secret}},
    }
    name = uniq("strimzi")
    stack.kube.kubectl("apply", "-f", "-", input=json.dumps(cluster(name, stack.kafka.sasl_bootstrap, security=sasl)))
    ns = stack.new_namespace()
    target = uniq("app")
    apply(
        stack.kube,
        client_quota(ns, "app", {"user": {"name": target}}, {"producerByteRate": 2048}, cluster=name),
        client_quota(ns, "self", {"user": {"name": op_user}}, {"producerByteRate": 1}, cluster=name),
    )
    wait_for(lambda: reason(stack, ns, "app") == "Applied", 30, "quota applied with a KafkaUser-shaped Secret")
    assert stack.broker_quotas()[Entity.for_user(target)] == {P: 2048.0}
    # The username read from the JAAS line is the operator's own principal: protected.
    wait_for(lambda: reason(stack, ns, "self") == "Protected", 30, "the JAAS line's user is protected")

    # A Secret with neither a username key nor a JAAS line: the KafkaCluster says what is missing.
    broken = uniq("no-user")
    stack.kube.kubectl(
        "create", "secret", "generic", broken, "-n", LEDGER_NAMESPACE, f"--from-literal=password={password}"
    )
    sasl["sasl"]["credentialsSecretRef"]["name"] = broken
    stack.kube.kubectl("apply", "-f", "-", input=json.dumps(cluster(name, stack.kafka.sasl_bootstrap, security=sasl)))

    def says_missing() -> bool:
        body = json.loads(stack.kube.kubectl("get", "kafkacluster", name, "-o", "json").stdout)
        ready = condition(body)
        return ready.get("status") == "False" and "no key 'username'" in str(ready.get("message"))

    wait_for(says_missing, 30, "the KafkaCluster names the missing key")
    assert stack.broker_quotas()[Entity.for_user(target)] == {P: 2048.0}, "nothing removed meanwhile"
    everything = stack.operator.log() + stack.kube.kubectl("get", "events", "-A", "-o", "json").stdout
    assert password not in everything
    stack.kube.kubectl("delete", "kafkacluster", name, "--timeout=30s")
