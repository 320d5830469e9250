"""docs/strimzi.md, walked as a user would: its marked steps run in order against a Strimzi-shaped Kafka.

Each block after a ``<!-- walkthrough -->`` marker runs as written: a YAML
block is applied with kubectl (or, with a ``# file: NAME`` first line, saved as
that file), a shell block runs in bash (``kquota`` and ``kubectl`` on the PATH,
KUBECONFIG set). The API server serves Strimzi 1.2.0's own CRDs (``v1`` only, so
a ``v1beta2`` manifest in the doc fails here as it does on Strimzi 1.x). Between
the blocks the test plays Strimzi: it writes the KafkaUser's status and Secret
the way the User Operator would, and a stand-in User Operator
(tests/support/strimzi.py) reconciles throughout. Checked:
every step succeeds, the plan shows only ``add`` rows for the new pair, explain
names the ClientQuota at level 2, and alice is throttled at every moment of
the migration (sampled twice a second) while Strimzi clears ``users/alice``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.kafka_cluster import KafkaCluster
from harness.kube_apiserver import KubeAPIServer
from harness.operator_proc import condition, wait_for
from harness.stack import Stack

from kquota.domain.entities import Entity
from tests.support.quotas import C, P
from tests.support.stacks import own_stack
from tests.support.strimzi import Listener, StrimziKafka, UserOperator

pytestmark = pytest.mark.e2e

DOC = Path(__file__).resolve().parents[2] / "docs" / "strimzi.md"
BLOCK = re.compile(r"<!-- walkthrough -->\s*\n\s*```(\w+)\n(.*?)\n\s*```", re.S)


def blocks() -> list[tuple[str, str]]:
    """The marked blocks of the doc, in order, with their list indentation removed."""
    out = []
    for lang, body in BLOCK.findall(DOC.read_text()):
        lines = body.split("\n")
        indent = min((len(x) - len(x.lstrip()) for x in lines if x.strip()), default=0)
        out.append((lang, "\n".join(x[indent:] for x in lines)))
    return out


@pytest.fixture(scope="module")
def own(kube: KubeAPIServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KafkaCluster, Stack]]:
    # The doc's namespace for ClientQuotas is team-a: watch just that one.
    with own_stack(kube, tmp_path_factory, "strimzi-doc", {}, watch_namespaces=["team-a"], tls=True) as pair:
        yield pair


def test_the_strimzi_page_walks_through(own: tuple[KafkaCluster, Stack], tmp_path: Path) -> None:
    broker, stack = own
    kube = stack.kube
    steps = blocks()
    assert len(steps) == 7, f"the doc's walkthrough changed: {[lang for lang, _ in steps]}"
    for ns in ("kafka", "team-a"):
        kube.kubectl("create", "namespace", ns, check=False)
    # Strimzi 1.2.0's own CRDs (v1 only), its objects in their default shape, pointing at the broker's TLS listener.
    kafka = StrimziKafka(
        kube, broker, "1.2.0", "kafka", "my-cluster", [Listener("tls", "tls", True, broker.ssl_bootstrap)]
    ).create()
    # alice: an application user whose quota lives in her KafkaUser today.
    kafka.kafka_user("alice", "scram-sha-512", {"producerByteRate": 1048576, "consumerByteRate": 2097152})
    env = {
        **os.environ,
        "KUBECONFIG": str(kube.kubeconfig),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    pair, user = Entity.for_pair("alice", None), Entity.for_user("alice")
    throttled: list[bool] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            live = stack.broker_quotas()
            throttled.append(live.get(pair, {}).get(P) == 1048576 or live.get(user, {}).get(P) == 1048576)
            stop.wait(0.5)

    outputs: list[str] = []
    with UserOperator(kafka, full_interval=2.0) as uo:
        wait_for(lambda: stack.broker_quotas().get(user, {}).get(P) == 1048576, 30, "Strimzi set alice's quota")
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            for i, (lang, body) in enumerate(steps):
                if lang == "yaml" and body.startswith("# file:"):
                    (tmp_path / body.split("\n", 1)[0].removeprefix("# file:").strip()).write_text(body)
                    continue
                if lang == "yaml":
                    kube.kubectl("apply", "-f", "-", input=body)
                else:
                    result = subprocess.run(
                        ["bash", "-euo", "pipefail", "-c", body],
                        cwd=tmp_path,
                        env=env,
                        capture_output=True,
                        text=True,
                        timeout=180,
                        check=False,
                    )
                    assert result.returncode == 0, f"step {i + 1} failed:\n{body}\n{result.stdout}\n{result.stderr}"
                    outputs.append(result.stdout)
                if i == 0:
                    # Strimzi's User Operator answers the KafkaUser: a client certificate and a status.
                    kafka.answer_kafka_user("kquota", cert=broker.mint_client_cert("CN=kquota", name="kquota"))
                if i == 1:
                    wait_for(
                        lambda: condition(_cluster(kube)).get("reason") == "Connected",
                        60,
                        "KafkaCluster prod connected through Strimzi",
                    )
            # After the last step the User Operator clears users/alice; the pair keeps her throttled.
            wait_for(lambda: P not in stack.broker_quotas().get(user, {}), 30, "Strimzi cleared users/alice")
            time.sleep(3)
        finally:
            stop.set()
            sampler.join(10)
        assert not uo.errors, uo.errors[-3:]
    export, plan, explain = outputs[0], outputs[1], outputs[2]
    assert "producerByteRate: 1Mi" in export, "export shows the KafkaUser quota Strimzi set"
    rows = [line for line in plan.splitlines() if re.match(r"^\s*(add|change|remove|own|held|keep)\b", line)]
    assert rows and all(r.split()[0] == "add" for r in rows), plan
    assert "users/alice/clients/<default>" in plan
    assert re.search(
        r"producer_byte_rate\s+1Mi\s+2\s+users/alice/clients/<default>\s+ClientQuota team-a/alice", explain
    ), explain
    assert "users/alice=1Mi (level 3, Strimzi)" in explain, "the KafkaUser's quota it overrides is named Strimzi's"
    assert throttled and all(throttled), (
        f"alice was unthrottled in {throttled.count(False)} of {len(throttled)} samples"
    )
    live = stack.broker_quotas()
    assert live[pair] == {P: 1048576.0, C: 2097152.0}
    described = broker.kafka_configs(
        "--describe",
        "--entity-type",
        "users",
        "--entity-name",
        "alice",
        "--entity-type",
        "clients",
        "--entity-default",
        check=True,
    ).stdout
    assert "producer_byte_rate=1048576" in described
    kube.kubectl("delete", "clientquota", "alice", "-n", "team-a", "--timeout=60s")
    kube.kubectl("delete", "kafkacluster", "prod", "--timeout=30s")


def _cluster(kube: KubeAPIServer) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(kube.kubectl("get", "kafkacluster", "prod", "-o", "json").stdout)
    return doc
