"""A broker that runs a client quota callback: kquota says the callback decides, never ``Applied`` as if enforced.

The module starts its own broker with ``client.quota.callback.class`` set to a
callback compiled here against the broker's own kafka-clients jar
(tests/e2e/java/StaticQuotaCallback.java: like Strimzi's quota plugin, it puts
every client in one group and ignores the entity quotas). On it:

* a ClientQuota's keys are still written (kafka-configs shows them), but the
  resource reports ``Ready=False, reason QuotaCallback`` (Stalled) naming the
  class, and the KafkaCluster carries a ``QuotaCallback`` condition;
* an IP connection-rate quota is not the callback's and reports ``Applied``;
* ``spec.quotaCallback.honoursEntityQuotas: true`` turns the resources back to
  ``Applied``, with a ``QuotaCallback`` condition saying why;
* ``kquota explain`` says the callback decides.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.kafka_cluster import DEFAULT_VERSION, KafkaCluster, ensure_kafka
from harness.kube_apiserver import KubeAPIServer
from harness.operator_proc import apply, client_quota, condition, get, wait_for
from harness.stack import Stack

from kquota.cli.main import main
from tests.support.stacks import own_stack

pytestmark = pytest.mark.e2e

CALLBACK = "kquota.test.StaticQuotaCallback"
SOURCE = Path(__file__).parent / "java" / "StaticQuotaCallback.java"


def compile_callback(out: Path) -> Path:
    """The callback's classes, compiled with the JDK against the broker's jars."""
    home = ensure_kafka(DEFAULT_VERSION)
    subprocess.run(
        ["javac", "-cp", str(home / "lib" / "*"), "-d", str(out), str(SOURCE)],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return out


@pytest.fixture(scope="module")
def own(kube: KubeAPIServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KafkaCluster, Stack]]:
    classes = compile_callback(tmp_path_factory.mktemp("callback-classes"))
    with own_stack(
        kube,
        tmp_path_factory,
        "callback",
        {},
        extra_properties={"client.quota.callback.class": CALLBACK},
        extra_classpath=[classes],
    ) as pair:
        yield pair


@pytest.fixture(scope="module")
def stack(own: tuple[KafkaCluster, Stack]) -> Stack:
    return own[1]


def ready(stack: Stack, ns: str, name: str) -> dict[str, Any]:
    return condition(get(stack.kube, "clientquota", ns, name))


def conditions(obj: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in ((obj or {}).get("status") or {}).get("conditions") or []}


def cluster_conditions(stack: Stack) -> dict[str, dict[str, Any]]:
    return conditions(json.loads(stack.kube.kubectl("get", "kafkacluster", stack.cluster, "-o", "json").stdout))


def test_quotas_on_brokers_with_a_callback_say_the_callback_decides(stack: Stack) -> None:
    ns, user = stack.new_namespace(), f"cb-{uuid.uuid4().hex[:6]}"
    apply(
        stack.kube,
        client_quota(ns, "app", {"user": {"name": user}}, {"producerByteRate": 4096}),
        client_quota(ns, "ip", {"ip": {"name": "192.0.2.7"}}, {"connectionCreationRate": 5}),
    )
    wait_for(lambda: ready(stack, ns, "app").get("reason") == "QuotaCallback", 60, "reason QuotaCallback")
    app = get(stack.kube, "clientquota", ns, "app")
    conds = conditions(app)
    assert conds["Ready"]["status"] == "False" and CALLBACK in conds["Ready"]["message"]
    assert conds["Stalled"]["status"] == "True", "a GitOps health check must not be green"
    assert conds["QuotaCallback"]["status"] == "True" and CALLBACK in conds["QuotaCallback"]["message"]
    # The keys are written all the same: Kafka's own tool shows them.
    described = stack.kafka.kafka_configs("--describe", "--entity-type", "users", "--entity-name", user, check=True)
    assert "producer_byte_rate=4096" in described.stdout
    assert (app or {})["status"]["applied"]["values"] == {"producer_byte_rate": 4096.0}
    # An IP's connection rate is not the callback's.
    wait_for(lambda: ready(stack, ns, "ip").get("reason") == "Applied", 30, "the IP quota Applied")
    cluster = cluster_conditions(stack)
    assert cluster["QuotaCallback"]["reason"] == "Detected" and CALLBACK in cluster["QuotaCallback"]["message"]
    assert cluster["Ready"]["status"] == "True", "the KafkaCluster itself is connected"

    # explain says so too.
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        args = ["--cluster", stack.cluster, "--kubeconfig", str(stack.kube.kubeconfig), "--user", user]
        code = main(["explain", *args, "-o", "json"])
    assert code == 0, err.getvalue()
    notes = json.loads(out.getvalue())["notes"]
    assert any(CALLBACK in n and "may not be enforced" in n for n in notes), notes

    # The platform team says the callback enforces entity quotas: Applied, with the condition kept.
    stack.kube.kubectl(
        "patch",
        "kafkacluster",
        stack.cluster,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"quotaCallback": {"honoursEntityQuotas": True}}}),
    )
    wait_for(lambda: ready(stack, ns, "app").get("reason") == "Applied", 60, "Applied once honoured")
    assert conditions(get(stack.kube, "clientquota", ns, "app"))["QuotaCallback"]["reason"] == "Honoured"
    wait_for(lambda: cluster_conditions(stack)["QuotaCallback"]["reason"] == "Honoured", 30, "cluster Honoured")
    stack.kube.kubectl("delete", "clientquotas", "--all", "-n", ns, "--timeout=60s")
