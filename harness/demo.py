"""``make demo``: the whole product on this machine, no Docker.

Starts a Kafka broker (KRaft, SASL/SCRAM) and a real kube-apiserver, installs
the CRDs, runs the operator, applies ``examples/`` (pointing the example
KafkaCluster at the local broker) and shows what happened: the resources'
status next to what Kafka's own ``kafka-configs`` reports. Then it keeps
everything running until Ctrl-C so you can experiment with kubectl.

``make demo-node`` (``--node``) is the same demo with the operator as a real
cluster runs it: the chart installed on harness/node.py's single node (root,
containerd), the image built from the Dockerfile, two replicas with peering.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from harness import kafka_cluster, kube_apiserver
from harness.operator_proc import OperatorProcess, ensure_ledger_namespace, wait_for

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"


def _examples_for(bootstrap: str, workdir: Path, metrics: list[str]) -> tuple[Path, str]:
    """Copy examples/ with the KafkaCluster pointed at the local broker and its metrics endpoints
    (none: no ``spec.metrics``)."""
    out = workdir / "examples"
    out.mkdir()
    cluster_name = "local"
    for src in sorted(EXAMPLES.glob("*.yaml")):
        docs = [d for d in yaml.safe_load_all(src.read_text()) if d]
        for doc in docs:
            if doc.get("kind") == "KafkaCluster":
                doc["spec"]["bootstrapServers"] = bootstrap
                if metrics:
                    doc["spec"]["metrics"] = {"brokerEndpoints": metrics, "window": "30s"}
                cluster_name = doc["metadata"]["name"]
        (out / src.name).write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return out, cluster_name


def _create_example_topics(bootstrap: str, examples: Path) -> None:
    """The topics the example TopicQuotas name, so their status shows real allowances."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    topics = sorted(
        {
            doc["spec"]["topic"]["name"]
            for src in examples.glob("*.yaml")
            for doc in yaml.safe_load_all(src.read_text())
            if doc and doc.get("kind") == "TopicQuota" and doc["spec"]["topic"].get("name")
        }
    )
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(t, 6, 1) for t in topics])
        print(f"created topics {', '.join(topics)} (6 partitions each)")
    finally:
        admin.close()


#: The one setting the demo changes from the shipped defaults, and why (printed: a user trying what the
#: README says must know where the demo differs; the suites' quicker settings are not the demo's).
DEMO_DRIFT = 10
SETTINGS_NOTE = (
    "operator settings: the shipped defaults (README, Operator settings), except KQUOTA_DRIFT_INTERVAL="
    f"{DEMO_DRIFT} (60 by default): the drift check every {DEMO_DRIFT} s, so a quota changed by hand with "
    "kafka-configs is put back while you watch"
)


def _banner(text: str) -> None:
    print(f"\n== {text} ==", flush=True)


def _ready_count(kube: kube_apiserver.KubeAPIServer) -> tuple[int, int]:
    """(Ready, all) resources of every kquota kind; the operator sets Ready only once the broker has them."""
    doc = json.loads(kube.kubectl("get", "kquota", "-A", "-o", "json").stdout)
    items = doc.get("items", [])
    ready = sum(
        1
        for item in items
        for c in (item.get("status") or {}).get("conditions") or []
        if c.get("type") == "Ready" and c.get("status") == "True"
    )
    return ready, len(items)


def run(keep_running: bool = True, on_node: bool = False) -> int:
    if on_node:
        return run_on_node(keep_running)
    workdir = Path(tempfile.mkdtemp(prefix="kquota-demo-"))
    kafka = kube = operator = None
    try:
        _banner("starting Kafka (KRaft, PLAINTEXT + SASL/SCRAM, JMX exporter)")
        kafka = kafka_cluster.KafkaCluster.start(workdir / "kafka")
        print(f"bootstrap {kafka.bootstrap} (SASL: {kafka.sasl_bootstrap})")
        _banner("starting kube-apiserver (embedded etcd)")
        kube = kube_apiserver.KubeAPIServer.start(workdir / "kube")
        print(f"{kube.server}\nexport KUBECONFIG={kube.kubeconfig}")
        kube.apply_crds()
        ensure_ledger_namespace(kube)
        examples, cluster = _examples_for(kafka.bootstrap, workdir, [b.metrics_url for b in kafka.brokers])
        _create_example_topics(kafka.bootstrap, examples)
        _banner(f"starting the operator (default cluster {cluster!r})")
        operator = OperatorProcess(
            kube, workdir / "operator", default_cluster=cluster, drift_interval=DEMO_DRIFT, suite_settings=False
        ).start()
        print(SETTINGS_NOTE)
        print(f"metrics http://127.0.0.1:{operator.metrics_port}/metrics, log {operator.workdir}")
        _banner("kubectl apply -f examples/")
        print(kube.kubectl("apply", "-f", str(examples)).stdout)
        _show(kube, kafka, operator.log)
        if not keep_running:
            return 0
        _banner("running; try: kubectl edit clientquota -n team-a ...   (Ctrl-C stops everything)")
        print(f"export KUBECONFIG={kube.kubeconfig}", flush=True)
        while operator.proc is not None and operator.proc.alive():
            time.sleep(1)
        print("operator exited:\n" + operator.log()[-3000:])
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        for component in (operator, kube, kafka):
            if component is not None:
                component.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _show(kube: kube_apiserver.KubeAPIServer, kafka: kafka_cluster.KafkaCluster, log: Callable[[], str]) -> None:
    """Wait until every example resource (every kind) is Ready, then show what kquota and Kafka say."""
    start = time.monotonic()

    def all_ready() -> bool:
        ready, total = _ready_count(kube)
        return total > 0 and ready == total

    wait_for(all_ready, 120, "every example resource Ready", on_timeout=log)
    ready, _ = _ready_count(kube)
    print(f"all {ready} example resources Ready after {time.monotonic() - start:.1f}s")
    _banner("kubectl get kquota -A")
    print(kube.kubectl("get", "kquota", "-A").stdout)
    for kind, name in (("clientquota", "alice"), ("topicquota", "payments")):
        _banner(f"status of {kind} team-a/{name}")
        obj = json.loads(kube.kubectl("get", kind, name, "-n", "team-a", "-o", "json").stdout)
        print(yaml.safe_dump({"status": obj.get("status")}, sort_keys=False).rstrip())
    _banner("what Kafka says: kafka-configs --describe (users, user+client pairs, clients, ips)")
    for args in (
        ["--entity-type", "users"],
        ["--entity-type", "users", "--entity-type", "clients"],
        ["--entity-type", "clients"],
        ["--entity-type", "ips"],
    ):
        print(kafka.kafka_configs("--describe", *args).stdout.strip())


def run_on_node(keep_running: bool = True) -> int:
    """The same demo with the operator as the chart runs it: pods on harness/node.py's node."""
    from harness import images, node, tools

    workdir = Path(tempfile.mkdtemp(prefix="kquota-demo-"))
    kafka = cluster_node = None
    try:
        _banner("starting a single-node cluster (apiserver, controller-manager, scheduler, kubelet, containerd)")
        cluster_node = node.Node.start()
        kube = cluster_node.api
        print(f"node {cluster_node.name} Ready; export KUBECONFIG={kube.kubeconfig}")
        _banner("starting Kafka (with a listener for pods on the node's bridge)")
        kafka = kafka_cluster.KafkaCluster.start(workdir / "kafka", pod_host=cluster_node.host_ip)
        print(f"bootstrap for pods {kafka.pod_bootstrap}, for this machine {kafka.bootstrap}")
        _banner("the operator image (Dockerfile, buildah), imported into containerd")
        image = images.ensure_operator_image()
        cluster_node.import_image(image.archive)
        examples, cluster = _examples_for(kafka.pod_bootstrap, workdir, [])
        _create_example_topics(kafka.bootstrap, examples)
        _banner(f"helm install kquota helm/kquota (image {image.reference})")
        repository, tag = image.reference.rsplit(":", 1)
        env = kube.env() | {f"HELM_{v}_HOME": str(workdir / "helm" / v.lower()) for v in ("CONFIG", "CACHE", "DATA")}
        subprocess.run(
            [str(tools.helm()), "install", "kquota", str(REPO / "helm" / "kquota"), "-n", "kquota-system",
             "--create-namespace", "--wait", "--timeout", "180s", "--set", f"image.repository={repository}",
             "--set", f"image.tag={tag}", "--set", "image.pullPolicy=Never",
             "--set", f"operator.defaultCluster={cluster}", "--set", f"operator.driftInterval={DEMO_DRIFT}"],
            env=env, check=True, timeout=240,
        )  # fmt: skip
        print(kube.kubectl("get", "pods", "-n", "kquota-system", "-o", "wide").stdout)
        print(SETTINGS_NOTE.replace("shipped defaults", "chart's defaults"))
        _banner("kubectl apply -f examples/")
        print(kube.kubectl("apply", "-f", str(examples)).stdout)
        _show(kube, kafka, lambda: kube.kubectl("logs", "-n", "kquota-system", "deploy/kquota", check=False).stdout)
        if not keep_running:
            return 0
        _banner("running; try: kubectl -n kquota-system delete pod <the active one>   (Ctrl-C stops everything)")
        print(f"export KUBECONFIG={kube.kubeconfig}", flush=True)
        while all(p.alive() for p in cluster_node.processes.values()):
            time.sleep(1)
        print("a node component exited; logs in " + str(cluster_node.workdir))
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        if kafka is not None:
            kafka.stop()
        if cluster_node is not None:
            cluster_node.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
