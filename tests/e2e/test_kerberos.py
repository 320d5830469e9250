"""SASL/GSSAPI (Kerberos) against a real MIT KDC and the broker's own GSSAPI listener, on the real API server.

harness/kdc.py runs Debian's krb5kdc with a throwaway realm; the broker has a
GSSAPI listener with its service principal's keytab and
``connections.max.reauth.ms``, so the operator re-authenticates (a new service
ticket) every few seconds. The operator's principal has a ticket lifetime of
seconds, so its tickets expire during the test.

* The operator applies quotas with its principal, keytab (a Secret) and
  krb5.conf (a ConfigMap); its own principal is protected. After its first
  ticket has expired it goes on: the KDC issued it new tickets from the keytab,
  and the broker counted its re-authentications.
* A wrong keytab (its key replaced on the KDC): the status says no ticket could
  be had for the principal from its keytab; the keytab replaced, it converges.
* ``kquota plan`` reads the brokers with a Kafka client.properties file
  (``sasl.kerberos.service.name``, a ``Krb5LoginModule`` line with keyTab and principal).
* No keytab byte sequence appears in logs, status, Events, ledger or metrics.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.kafka_cluster import KafkaCluster
from harness.kdc import KRB5_LOGIN_MODULE, Kdc
from harness.kube_apiserver import KubeAPIServer
from harness.operator_proc import (
    LEDGER_NAMESPACE,
    apply,
    client_quota,
    condition,
    get,
    kafka_cluster_manifest,
    wait_for,
)
from harness.stack import Stack

from kquota.cli.main import main
from kquota.domain.entities import Entity
from tests.support.auth import AUTH_JMX_RULES, auth_count, put_secret
from tests.support.leaks import exposed, found
from tests.support.quotas import P
from tests.support.stacks import own_stack

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

LISTENER = "KERBEROS"
#: The operator principal's ticket lifetime: its tickets expire during the test.
TICKET_LIFE = 15


@pytest.fixture(scope="module")
def kdc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kdc]:
    server = Kdc.start(tmp_path_factory.mktemp("kdc"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def kerberos(
    kube: KubeAPIServer, tmp_path_factory: pytest.TempPathFactory, kdc: Kdc
) -> Iterator[tuple[KafkaCluster, Stack]]:
    with own_stack(
        kube,
        tmp_path_factory,
        "krb",
        {},
        listeners=[kdc.kafka_listener(LISTENER, reauth_ms=4000)],
        jvm_options=kdc.jvm_options(),
        jmx_rules=AUTH_JMX_RULES,
    ) as both:
        yield both


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def krb5_config_map(stack: Stack, kdc: Kdc) -> dict[str, str]:
    name = uniq("krb5")
    stack.kube.kubectl("create", "configmap", name, "-n", LEDGER_NAMESPACE, f"--from-file=krb5.conf={kdc.krb5_conf}")
    return {"namespace": LEDGER_NAMESPACE, "name": name}


def kerberos_cluster(stack: Stack, kdc: Kdc, principal: str, keytab: Path) -> tuple[str, str]:
    """A KafkaCluster reaching the GSSAPI listener as ``principal``; returns it and its keytab Secret's name."""
    secret = put_secret(stack.kube, uniq("keytab"), binary={"keytab": keytab.read_bytes()})
    name = uniq("krb")
    security = {
        "protocol": "SASL_PLAINTEXT",
        "sasl": {
            "mechanism": "GSSAPI",
            "kerberos": {
                "principal": kdc.principal(principal),
                "keytabSecretRef": secret,
                "krb5ConfigMapRef": krb5_config_map(stack, kdc),
                "serviceName": "kafka",
            },
        },
    }
    stack.kube.kubectl(
        "apply", "-f", "-",
        input=kafka_cluster_manifest(name, stack.kafka.listener_bootstrap(LISTENER), {"security": security}),
    )  # fmt: skip
    return name, secret["name"]


def ready(stack: Stack, kind: str, name: str, ns: str = "") -> dict[str, Any]:
    return condition(get(stack.kube, kind, ns, name))


def applied(stack: Stack, user: str, value: float) -> Callable[[], bool]:
    return lambda: stack.broker_quotas().get(Entity.for_user(user)) == {P: value}


def status_and_log(stack: Stack, name: str, ns: str) -> Callable[[], str]:
    return lambda: json.dumps(ready(stack, "clientquota", name, ns)) + stack.operator.log()[-3000:]


def quota(stack: Stack, ns: str, cluster: str, user: str, rate: int) -> None:
    apply(stack.kube, client_quota(ns, "app", {"user": {"name": user}}, {"producerByteRate": rate}, cluster=cluster))


def keytab_needles(keytab: Path) -> dict[str, str]:
    """Pieces of the keytab as any text output would carry them: base64 and hex of its key bytes."""
    data = keytab.read_bytes()
    return {
        "the keytab (base64)": base64.b64encode(data).decode()[:40],
        "the keytab's last bytes (hex)": data[-24:].hex(),
    }


def test_quotas_are_applied_with_a_keytab_across_expired_tickets(
    kerberos: tuple[KafkaCluster, Stack], kdc: Kdc, tmp_path: Path
) -> None:
    kafka, stack = kerberos
    principal = uniq("kquota")
    keytab = kdc.add_principal(principal, tmp_path / "kquota.keytab", maxlife=f"{TICKET_LIFE} seconds")
    name, _ = kerberos_cluster(stack, kdc, principal, keytab)
    ns, user = stack.new_namespace(), uniq("app")
    quota(stack, ns, name, user, 1000)
    wait_for(applied(stack, user, 1000.0), 60, "applied over GSSAPI", on_timeout=status_and_log(stack, "app", ns))
    wait_for(lambda: ready(stack, "clientquota", "app", ns).get("reason") == "Applied", 30, "Applied")
    first_ticket_ends = time.time() + TICKET_LIFE
    tickets = kdc.as_requests(principal)
    assert tickets >= 1
    reauth_before = auth_count(kafka, "successful", "reauthentication", LISTENER)

    # Past the first ticket's end (and the realm's clock skew): changes still go through.
    step = 0
    while time.time() < first_ticket_ends + 2 * 5:
        step += 1
        quota(stack, ns, name, user, 1000 + step)
        wait_for(applied(stack, user, 1000.0 + step), 30, f"change {step}", on_timeout=status_and_log(stack, "app", ns))
        time.sleep(3)
    # New tickets from the keytab, and the broker accepted the operator's re-authentications with them.
    assert kdc.as_requests(principal) > tickets
    assert auth_count(kafka, "successful", "reauthentication", LISTENER) - reauth_before >= 3
    assert auth_count(kafka, "failed", "reauthentication", LISTENER) == 0
    cluster = ready(stack, "kafkacluster", name)
    assert (cluster["status"], cluster["reason"]) == ("True", "Connected")

    # The brokers name the operator by its principal's primary: protected.
    apply(stack.kube, client_quota(ns, "self", {"user": {"name": principal}}, {"producerByteRate": 1}, cluster=name))
    wait_for(lambda: ready(stack, "clientquota", "self", ns).get("reason") == "Protected", 30, "principal protected")

    assert found(keytab_needles(keytab), exposed(stack.kube, stack.operator)) == []
    stack.kube.kubectl("delete", "kafkacluster", name, "--timeout=30s")


def test_a_wrong_keytab_is_said_so_and_a_replaced_one_converges(
    kerberos: tuple[KafkaCluster, Stack], kdc: Kdc, tmp_path: Path
) -> None:
    _, stack = kerberos
    principal = uniq("kquota")
    stale = kdc.add_principal(principal, tmp_path / "stale.keytab")
    kdc.rotate(principal)  # the KDC has a new key: the keytab's is no longer the principal's
    name, secret = kerberos_cluster(stack, kdc, principal, stale)
    ns, user = stack.new_namespace(), uniq("app")
    quota(stack, ns, name, user, 2000)
    wait_for(
        lambda: ready(stack, "clientquota", "app", ns).get("reason") == "KafkaUnavailable",
        60,
        "wrong keytab reported",
        on_timeout=status_and_log(stack, "app", ns),
    )
    message = ready(stack, "clientquota", "app", ns)["message"]
    assert f"no Kerberos ticket for '{kdc.principal(principal)}' from its keytab" in message, message
    assert Entity.for_user(user) not in stack.broker_quotas()

    fresh = kdc.export(principal, tmp_path / "fresh.keytab")
    put_secret(stack.kube, secret, binary={"keytab": fresh.read_bytes()})
    wait_for(
        applied(stack, user, 2000.0), 60, "applied with the right keytab", on_timeout=status_and_log(stack, "app", ns)
    )
    assert found(keytab_needles(stale) | keytab_needles(fresh), exposed(stack.kube, stack.operator)) == []
    stack.kube.kubectl("delete", "kafkacluster", name, "--timeout=30s")


def test_plan_reads_the_brokers_with_a_kafka_client_properties_file(
    kerberos: tuple[KafkaCluster, Stack],
    kdc: Kdc,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kafka, _ = kerberos
    principal = uniq("cli")
    keytab = kdc.add_principal(principal, tmp_path / "cli.keytab")
    user = uniq("cli-app")
    kafka.add_quota_configs([("users", user, "producer_byte_rate=5000")])
    # As for a Java client: krb5.conf from the environment (Java: -Djava.security.krb5.conf), the rest in the file.
    monkeypatch.setenv("KRB5_CONFIG", str(kdc.krb5_conf))
    props = tmp_path / "client.properties"
    props.write_text(
        f"bootstrap.servers={kafka.listener_bootstrap(LISTENER)}\n"
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=GSSAPI\n"
        "sasl.kerberos.service.name=kafka\n"
        f'sasl.jaas.config={KRB5_LOGIN_MODULE} required useKeyTab=true storeKey=true keyTab="{keytab}" '
        f'principal="{kdc.principal(principal)}";\n'
    )
    manifest = tmp_path / "quota.yaml"
    manifest.write_text(json.dumps(client_quota("team", "app", {"user": {"name": user}}, {"producerByteRate": 6000})))
    code = main(
        ["plan", "-f", str(manifest), "--command-config", str(props), "--default-cluster", "default",
         "--entity", f"users/{user}", "-o", "json"]
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 2, out + err
    rows = json.loads(out)["rows"]
    assert [(r["action"], r["entity"]["path"]) for r in rows] == [("change", Entity.for_user(user).path())], rows
    assert kdc.as_requests(principal) >= 1
