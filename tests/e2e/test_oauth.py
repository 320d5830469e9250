"""SASL/OAUTHBEARER with an OIDC provider, against Kafka's own validator, on the real API server and broker.

The broker has an OAUTHBEARER listener whose tokens Kafka's
``OAuthBearerValidatorCallbackHandler`` checks (signature against the JWKS of
harness/oidc.py's provider, ``exp``, ``iss``, ``aud``), with
``connections.max.reauth.ms``: a connection that does not re-authenticate with
a valid token before its token expires is closed by the broker. Tokens live
``LIFETIME`` seconds, so the operator's connection lives through many of them.

* The operator applies quotas through five and more token refreshes, each new
  token accepted by the broker on re-authentication (counted by the broker);
  its own principal (the client id) is protected.
* A wrong audience: the broker refuses the token; the status says so, with the
  token's claims.
* A revoked client: once its last token expires, the status names the token
  endpoint's 401 and ``invalid_client``; nothing is applied; restored, it converges.
* The issuer down and back: the status names the unreachable token endpoint;
  back up, it converges.
* ``kquota plan`` reads the brokers with the same client from a Kafka
  client.properties file (Kafka's own property names).
* Through a Strimzi Kafka whose listener takes OAUTHBEARER tokens (0.49's
  ``type: oauth``, 1.2's ``type: custom`` with OAUTHBEARER), with ``spec.strimzi.oauth``.
* The client secret and every token issued appear in no log, status, Event,
  ledger or metric.
"""

from __future__ import annotations

import json
import secrets
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.kafka_cluster import KafkaCluster
from harness.kube_apiserver import KubeAPIServer
from harness.oidc import LOGIN_MODULE, VALIDATOR, OidcProvider
from harness.operator_proc import apply, client_quota, condition, get, kafka_cluster_manifest, wait_for
from harness.stack import Stack

from kquota.cli.main import main
from kquota.domain.entities import Entity
from kquota.domain.strimzi import IGNORED_USERS_ENV
from tests.support.auth import AUTH_JMX_RULES, auth_count, put_secret
from tests.support.leaks import exposed, found
from tests.support.quotas import P
from tests.support.stacks import own_stack
from tests.support.strimzi import Listener, StrimziKafka

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

#: Seconds a token lives: the operator's connection outlives many.
LIFETIME = 6
LISTENER = "OAUTH"


@pytest.fixture(scope="module")
def oidc() -> Iterator[OidcProvider]:
    provider = OidcProvider(lifetime=LIFETIME).start()
    try:
        yield provider
    finally:
        provider.stop()


@pytest.fixture(scope="module")
def oauth(
    kube: KubeAPIServer, tmp_path_factory: pytest.TempPathFactory, oidc: OidcProvider
) -> Iterator[tuple[KafkaCluster, Stack]]:
    with own_stack(
        kube,
        tmp_path_factory,
        "oauth",
        {},
        listeners=[oidc.kafka_listener(LISTENER, audience="kafka", reauth_ms=60_000)],
        jvm_options=oidc.jvm_options(),
        jmx_rules=AUTH_JMX_RULES,
        tls=True,  # a cluster CA for the Strimzi Kafka's Secrets
    ) as both:
        yield both


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def oauth_cluster(stack: Stack, oidc: OidcProvider, client_id: str, secret: str, **extra: Any) -> str:
    """A KafkaCluster reaching the OAUTHBEARER listener as ``client_id``; returns its name."""
    ref = put_secret(stack.kube, uniq("oauth-client"), {"clientSecret": secret})
    name = uniq("oauth")
    security = {
        "protocol": "SASL_PLAINTEXT",
        "sasl": {
            "mechanism": "OAUTHBEARER",
            "oauth": {"tokenEndpointUrl": oidc.token_url, "clientId": client_id, "clientSecretRef": ref, **extra},
        },
    }
    stack.kube.kubectl(
        "apply",
        "-f",
        "-",
        input=kafka_cluster_manifest(name, stack.kafka.listener_bootstrap(LISTENER), {"security": security}),
    )
    return name


def new_client(oidc: OidcProvider) -> tuple[str, str]:
    client_id, secret = uniq("kquota-op"), f"cl-S3cret-{secrets.token_hex(12)}"
    oidc.add_client(client_id, secret)
    return client_id, secret


def ready(stack: Stack, kind: str, name: str, ns: str = "") -> dict[str, Any]:
    return condition(get(stack.kube, kind, ns, name))


def reason_is(stack: Stack, name: str, ns: str, reason: str) -> Callable[[], bool]:
    return lambda: ready(stack, "clientquota", name, ns).get("reason") == reason


def applied(stack: Stack, user: str, value: float) -> Callable[[], bool]:
    return lambda: stack.broker_quotas().get(Entity.for_user(user)) == {P: value}


def status_and_log(stack: Stack, name: str, ns: str) -> Callable[[], str]:
    return lambda: json.dumps(ready(stack, "clientquota", name, ns)) + stack.operator.log()[-3000:]


def quota(stack: Stack, ns: str, cluster: str, user: str, rate: int) -> None:
    apply(stack.kube, client_quota(ns, "app", {"user": {"name": user}}, {"producerByteRate": rate}, cluster=cluster))


def assert_nothing_leaked(stack: Stack, oidc: OidcProvider, client_id: str, secret: str) -> None:
    needles = {"the client secret": secret}
    for n, issued in enumerate(oidc.tokens_of(client_id)):
        needles[f"token {n}"] = issued.token
        needles[f"token {n}'s signature"] = issued.token.rsplit(".", 1)[1]
    assert found(needles, exposed(stack.kube, stack.operator)) == []


def wait_expired(oidc: OidcProvider, client_id: str) -> None:
    """Until the last token the client was given has expired (the broker then closes its sessions)."""
    last = max(i.claims["exp"] for i in oidc.tokens_of(client_id))
    time.sleep(max(0.0, last - time.time() + 1))


def test_quotas_are_applied_through_token_refreshes_each_checked_by_the_broker(
    oauth: tuple[KafkaCluster, Stack], oidc: OidcProvider
) -> None:
    kafka, stack = oauth
    client_id, secret = new_client(oidc)
    name = oauth_cluster(stack, oidc, client_id, secret, scope="kafka-admin")
    ns, user = stack.new_namespace(), uniq("app")
    reauth_before = auth_count(kafka, "successful", "reauthentication", LISTENER)
    quota(stack, ns, name, user, 1000)
    wait_for(
        reason_is(stack, "app", ns, "Applied"),
        60,
        "Applied over OAUTHBEARER",
        on_timeout=status_and_log(stack, "app", ns),
    )
    assert applied(stack, user, 1000.0)()
    cluster = ready(stack, "kafkacluster", name)
    assert (cluster["status"], cluster["reason"]) == ("True", "Connected")

    # A change after each new token: the connection lives on, re-authenticated with every token.
    for step in range(1, 7):
        seen = len(oidc.tokens_of(client_id))
        wait_for(lambda seen=seen: len(oidc.tokens_of(client_id)) > seen, 3 * LIFETIME, f"token refresh {step}")
        quota(stack, ns, name, user, 1000 + step)
        wait_for(
            applied(stack, user, 1000.0 + step),
            30,
            f"change {step} applied",
            on_timeout=status_and_log(stack, "app", ns),
        )
    assert len(oidc.tokens_of(client_id)) >= 6
    assert all(i.claims["scope"] == "kafka-admin" and i.claims["aud"] == "kafka" for i in oidc.tokens_of(client_id))
    # The broker itself accepted the new tokens: KIP-368 re-authentications on this listener.
    assert auth_count(kafka, "successful", "reauthentication", LISTENER) - reauth_before >= 5
    assert ready(stack, "clientquota", "app", ns)["status"] == "True"

    # The operator's own principal (the token's sub: the client id here) is protected.
    apply(stack.kube, client_quota(ns, "self", {"user": {"name": client_id}}, {"producerByteRate": 1}, cluster=name))
    wait_for(reason_is(stack, "self", ns, "Protected"), 30, "the operator's client id protected")

    assert_nothing_leaked(stack, oidc, client_id, secret)
    stack.kube.kubectl("delete", "kafkacluster", name, "--timeout=30s")


def test_a_token_for_another_audience_is_refused_by_the_broker_and_said_so(
    oauth: tuple[KafkaCluster, Stack], oidc: OidcProvider
) -> None:
    _, stack = oauth
    client_id, secret = new_client(oidc)
    name = oauth_cluster(stack, oidc, client_id, secret, audience="not-kafka")
    ns, user = stack.new_namespace(), uniq("app")
    quota(stack, ns, name, user, 2000)
    wait_for(
        reason_is(stack, "app", ns, "KafkaUnavailable"),
        60,
        "refused token reported",
        on_timeout=status_and_log(stack, "app", ns),
    )
    message = ready(stack, "clientquota", "app", ns)["message"]
    assert "refused" in message and '"status":"invalid_token"' in message, message
    assert "aud 'not-kafka'" in message and client_id in message, message
    assert ready(stack, "kafkacluster", name)["status"] == "False"
    assert Entity.for_user(user) not in stack.broker_quotas()

    # The audience the brokers expect: converges.
    stack.kube.kubectl(
        "patch", "kafkacluster", name, "--type=json",
        "-p", json.dumps([{"op": "replace", "path": "/spec/security/sasl/oauth/audience", "value": "kafka"}]),
    )  # fmt: skip
    wait_for(
        applied(stack, user, 2000.0), 60, "applied with the right audience", on_timeout=status_and_log(stack, "app", ns)
    )
    assert_nothing_leaked(stack, oidc, client_id, secret)
    stack.kube.kubectl("delete", "kafkacluster", name, "--timeout=30s")


def test_a_revoked_client_is_said_so_once_its_token_expires_and_a_restored_one_converges(
    oauth: tuple[KafkaCluster, Stack], oidc: OidcProvider
) -> None:
    _, stack = oauth
    client_id, secret = new_client(oidc)
    name = oauth_cluster(stack, oidc, client_id, secret)
    ns, user = stack.new_namespace(), uniq("app")
    quota(stack, ns, name, user, 3000)
    wait_for(applied(stack, user, 3000.0), 60, "applied", on_timeout=status_and_log(stack, "app", ns))

    oidc.revoke(client_id)
    wait_expired(oidc, client_id)
    quota(stack, ns, name, user, 3001)
    wait_for(
        reason_is(stack, "app", ns, "KafkaUnavailable"),
        60,
        "revocation reported",
        on_timeout=status_and_log(stack, "app", ns),
    )
    message = ready(stack, "clientquota", "app", ns)["message"]
    assert f"refused client {client_id!r}: HTTP 401 invalid_client" in message, message
    assert oidc.token_url in message
    assert stack.broker_quotas()[Entity.for_user(user)] == {P: 3000.0}

    oidc.restore(client_id)
    wait_for(applied(stack, user, 3001.0), 60, "applied once restored", on_timeout=status_and_log(stack, "app", ns))
    wait_for(reason_is(stack, "app", ns, "Applied"), 30, "Applied again")
    assert_nothing_leaked(stack, oidc, client_id, secret)
    stack.kube.kubectl("delete", "kafkacluster", name, "--timeout=30s")


def test_the_issuer_down_is_said_so_and_back_up_converges(
    oauth: tuple[KafkaCluster, Stack], oidc: OidcProvider
) -> None:
    _, stack = oauth
    client_id, secret = new_client(oidc)
    name = oauth_cluster(stack, oidc, client_id, secret)
    ns, user = stack.new_namespace(), uniq("app")
    quota(stack, ns, name, user, 4000)
    wait_for(applied(stack, user, 4000.0), 60, "applied", on_timeout=status_and_log(stack, "app", ns))

    oidc.stop()
    try:
        wait_expired(oidc, client_id)
        quota(stack, ns, name, user, 4001)
        wait_for(
            reason_is(stack, "app", ns, "KafkaUnavailable"),
            60,
            "issuer down reported",
            on_timeout=status_and_log(stack, "app", ns),
        )
        message = ready(stack, "clientquota", "app", ns)["message"]
        assert f"cannot reach the token endpoint {oidc.token_url}: connection refused" in message, message
        assert stack.broker_quotas()[Entity.for_user(user)] == {P: 4000.0}
    finally:
        oidc.start()
    wait_for(
        applied(stack, user, 4001.0), 60, "applied with the issuer back", on_timeout=status_and_log(stack, "app", ns)
    )
    wait_for(reason_is(stack, "app", ns, "Applied"), 30, "Applied again")
    assert_nothing_leaked(stack, oidc, client_id, secret)
    stack.kube.kubectl("delete", "kafkacluster", name, "--timeout=30s")


def test_plan_reads_the_brokers_with_a_kafka_client_properties_file(
    oauth: tuple[KafkaCluster, Stack], oidc: OidcProvider, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kafka, _ = oauth
    client_id, secret = new_client(oidc)
    user = uniq("cli")
    kafka.add_quota_configs([("users", user, "producer_byte_rate=5000")])
    props = tmp_path / "client.properties"
    # As a Kafka 4.x client has it: the token endpoint, the login handler, the client in the JAAS line.
    props.write_text(
        f"bootstrap.servers={kafka.listener_bootstrap(LISTENER)}\n"
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=OAUTHBEARER\n"
        f"sasl.oauthbearer.token.endpoint.url={oidc.token_url}\n"
        "sasl.login.callback.handler.class=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler\n"
        f'sasl.jaas.config={LOGIN_MODULE} required clientId="{client_id}" clientSecret="{secret}" scope="kafka";\n'
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
    assert len(oidc.tokens_of(client_id)) >= 1
    tokens = [i.token for i in oidc.tokens_of(client_id)]
    assert all(secret not in text and not any(t in text for t in tokens) for text in (out, err))

    # The same file with a wrong secret: the token endpoint's refusal, in one line, no secret.
    props.write_text(props.read_text().replace(secret, "not-the-secret-123"))
    code = main(["plan", "-f", str(manifest), "--command-config", str(props), "--default-cluster", "default"])
    out, err = capsys.readouterr()
    assert code == 1
    assert f"refused client {client_id!r}: HTTP 401 invalid_client" in err, err
    assert "not-the-secret-123" not in out + err


@pytest.mark.parametrize(
    ("release", "authentication"),
    [
        pytest.param("0.49.1", {"type": "oauth"}, id="Strimzi 0.49 type oauth"),
        pytest.param(
            "1.2.0",
            {
                "type": "custom",
                "sasl": True,
                "listenerConfig": {
                    "sasl.enabled.mechanisms": "OAUTHBEARER",
                    "oauthbearer.sasl.server.callback.handler.class": VALIDATOR,
                },
            },
            id="Strimzi 1.2 type custom",
        ),
    ],
)
def test_through_a_strimzi_kafka_whose_listener_takes_oauthbearer_tokens(
    oauth: tuple[KafkaCluster, Stack], oidc: OidcProvider, release: str, authentication: dict[str, Any]
) -> None:
    kafka, stack = oauth
    listener = Listener("oauth", None, False, kafka.listener_bootstrap(LISTENER), authentication=authentication)
    # The applications' users are left to kquota by the User Operator's pattern.
    env = [{"name": IGNORED_USERS_ENV, "value": "(CN=)?app-.*"}]
    strimzi = StrimziKafka(stack.kube, kafka, release, uniq("kafka"), "my-cluster", [listener], env=env).create()
    client_id, secret = new_client(oidc)
    name = uniq("strimzi-oauth")
    spec = {
        "kafka": {"namespace": strimzi.namespace, "name": strimzi.name},
        "listener": "oauth",
        "oauth": {
            "tokenEndpointUrl": oidc.token_url,
            "clientId": client_id,
            "clientSecretRef": put_secret(stack.kube, uniq("oauth-client"), {"clientSecret": secret}),
        },
    }
    apply(stack.kube, {"apiVersion": "kquota.io/v1alpha1", "kind": "KafkaCluster", "metadata": {"name": name},
                       "spec": {"strimzi": spec}})  # fmt: skip
    ns, user = stack.new_namespace(), uniq("app")
    quota(stack, ns, name, user, 7000)
    wait_for(applied(stack, user, 7000.0), 60, "applied through Strimzi", on_timeout=status_and_log(stack, "app", ns))
    wait_for(reason_is(stack, "app", ns, "Applied"), 30, "Applied")
    assert len(oidc.tokens_of(client_id)) >= 1
    assert_nothing_leaked(stack, oidc, client_id, secret)
    stack.kube.kubectl("delete", "kafkacluster", name, "--timeout=30s")
