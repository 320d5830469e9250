"""The generated CRDs in a real kube-apiserver: examples apply, the corpus is rejected for its reason.

Uses the session's real API server (``kube`` fixture) and the real kubectl.
Corpus manifests are created with ``kubectl create --validate=strict``, which
asks the server for *Strict* field validation, so unknown fields are rejected
rather than pruned (``kubectl apply --server-side`` does the same by default).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from harness.kube_apiserver import KubeAPIServer

from kquota.api import ClientQuotaLimits, ClientQuotaSpec, parse_manifest
from kquota.api.cluster_metrics import PROMETHEUS_SELECTOR_INVALID
from tests.plugins.resilience import Resilience
from tests.support.paths import REPO
from tests.support.selectors import INVALID_SELECTORS, VALID_SELECTORS, Refused

# The admission corpus is the floor's main check (make test-k8s-floor): CEL and schema must agree on 1.31.
pytestmark = [pytest.mark.e2e, pytest.mark.k8s_floor]

EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))
CORPUS = REPO / "tests" / "corpus"
ADMISSION = sorted((CORPUS / "admission").glob("*.yaml"))
TRANSITIONS = sorted((CORPUS / "transitions").glob("*.yaml"))
CRD_NAMES = sorted(p.stem for p in (REPO / "crds").glob("*.yaml"))


def expectation(path: Path) -> str:
    match = re.fullmatch(r"# expect: (.+)", path.read_text(encoding="utf-8").splitlines()[0])
    assert match, f"{path.name} must start with '# expect: <fragment>'"
    return match.group(1)


@pytest.fixture(scope="module")
def crds(kube: KubeAPIServer) -> KubeAPIServer:
    kube.apply_crds()
    return kube


@pytest.fixture(scope="module")
def corpus_namespace(crds: KubeAPIServer) -> str:
    return crds.create_namespace("corpus")


@pytest.fixture(scope="module")
def examples(crds: KubeAPIServer) -> Iterator[KubeAPIServer]:
    """The examples applied in file order, as a user would; their quota resources removed afterwards."""
    for path in EXAMPLES:
        crds.kubectl("apply", "--server-side", "-f", str(path))
    yield crds
    # Other modules run operators on this API server: leave no resource pointing at cluster "local".
    # The namespace stays (without kube-controller-manager it would never finish deleting).
    for path in reversed(EXAMPLES):
        if yaml.safe_load(path.read_text())["kind"] != "Namespace":
            crds.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", str(path), check=False)


def test_crds_are_established(crds: KubeAPIServer) -> None:
    out = json.loads(crds.kubectl("get", "crd", "-o", "json").stdout)
    established = {
        item["metadata"]["name"]
        for item in out["items"]
        for cond in item["status"].get("conditions", [])
        if cond["type"] == "Established" and cond["status"] == "True"
    }
    assert set(CRD_NAMES) <= established
    assert len(CRD_NAMES) == 4


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_applies(examples: KubeAPIServer, path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    args = ["get", doc["kind"].lower(), doc["metadata"]["name"], "-o", "json"]
    if "namespace" in doc["metadata"]:
        args += ["-n", doc["metadata"]["namespace"]]
    stored = json.loads(examples.kubectl(*args).stdout)
    if doc["apiVersion"].startswith("kquota.io/"):
        # What the server stored (with its defaults) is still valid offline.
        assert parse_manifest(stored).metadata.name == doc["metadata"]["name"]
        for key, value in doc["spec"].items():
            assert stored["spec"][key] == value, f"{path.name}: spec.{key} changed on the way in"


@pytest.mark.parametrize("path", ADMISSION, ids=lambda p: p.stem)
def test_corpus_manifest_is_rejected_with_its_reason(
    crds: KubeAPIServer, corpus_namespace: str, path: Path, resilience: Resilience
) -> None:
    result = crds.kubectl("create", "--validate=strict", "-n", corpus_namespace, "-f", str(path), check=False)
    if result.returncode == 0:
        crds.kubectl("delete", "-n", corpus_namespace, "-f", str(path), "--wait=false", check=False)
    refused = result.returncode != 0
    reason = expectation(path)
    # The report counts each manifest; the asserts below are the verdict.
    resilience.hostile(
        f"admission: {path.stem}",
        ok=refused and reason in result.stderr,
        detail=f"refused at admission with '{reason}'" if refused else "ACCEPTED by the API server",
    )
    assert refused, f"{path.name} was accepted:\n{result.stdout}"
    assert reason in result.stderr, result.stderr


@pytest.mark.parametrize("path", TRANSITIONS, ids=lambda p: p.stem)
def test_entity_cannot_change(crds: KubeAPIServer, corpus_namespace: str, path: Path) -> None:
    before, after = (yaml.safe_dump(d) for d in yaml.safe_load_all(path.read_text(encoding="utf-8")))
    kind = yaml.safe_load(before)["kind"].lower()
    name = yaml.safe_load(before)["metadata"]["name"]
    crds.kubectl("apply", "--server-side", "-n", corpus_namespace, "-f", "-", input=before)
    try:
        for verb in (["apply", "--server-side"], ["replace"]):
            result = crds.kubectl(*verb, "-n", corpus_namespace, "-f", "-", input=after, check=False)
            assert result.returncode != 0, f"{' '.join(verb)} changed the entity"
            assert expectation(path) in result.stderr, result.stderr
        stored = json.loads(crds.kubectl("get", kind, name, "-n", corpus_namespace, "-o", "json").stdout)
        assert stored["spec"]["entity"] == yaml.safe_load(before)["spec"]["entity"]
        # The quota itself may change: only the entity is immutable.
        changed = yaml.safe_load(before)
        changed["metadata"]["namespace"] = corpus_namespace
        if kind == "clientquota":
            changed["spec"]["quota"] = (
                {"producerByteRate": "7Mi"}
                if "producerByteRate" in changed["spec"]["quota"]
                else {"consumerByteRate": "7Mi"}
            )
        else:
            changed["spec"]["rate"] = 7
        crds.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(changed))
    finally:
        crds.kubectl("delete", kind, name, "-n", corpus_namespace, "--wait=false", check=False)


VALID_BYTE_RATES = ["1.5Mi", "1000m", "1Pi", "0.9999999999", "9.007199254740991e15", "+5", "1e15", 9007199254740991]


@pytest.mark.parametrize("rate", VALID_BYTE_RATES, ids=lambda r: f"byte rate {r!r} is accepted")
def test_valid_byte_rates_are_accepted(crds: KubeAPIServer, corpus_namespace: str, rate: object) -> None:
    """The CEL rules do not over-reject: values Kubernetes' isInteger() gets wrong are whole bytes."""
    doc = {
        "apiVersion": "kquota.io/v1alpha1",
        "kind": "ClientQuota",
        "metadata": {"name": "valid-rate", "namespace": corpus_namespace},
        "spec": {"entity": {"user": {"name": "alice"}}, "quota": {"producerByteRate": rate}},
    }
    parse_manifest(doc)
    crds.kubectl("create", "--dry-run=server", "--validate=strict", "-f", "-", input=json.dumps(doc))


def _kafka_cluster_with_selector(name: str, selector: str) -> dict[str, object]:
    return {
        "apiVersion": "kquota.io/v1alpha1",
        "kind": "KafkaCluster",
        "metadata": {"name": name},
        "spec": {
            "bootstrapServers": "kafka-0.kafka:9092",
            "metrics": {"prometheusURL": "http://prometheus:9090", "prometheusSelector": selector},
        },
    }


@pytest.mark.parametrize("selector", VALID_SELECTORS)
def test_valid_prometheus_selectors_are_accepted(crds: KubeAPIServer, selector: str) -> None:
    """The CEL rule (RE2) accepts what the Python twin accepts."""
    doc = _kafka_cluster_with_selector("valid-selector", selector)
    parse_manifest(doc)
    crds.kubectl("create", "--dry-run=server", "--validate=strict", "-f", "-", input=json.dumps(doc))


@pytest.mark.parametrize("refused", INVALID_SELECTORS)
def test_invalid_prometheus_selectors_are_refused_with_the_twins_message(crds: KubeAPIServer, refused: Refused) -> None:
    """The CEL rule (RE2) refuses what the Python twin refuses, with the same message."""
    doc = _kafka_cluster_with_selector("invalid-selector", refused.selector)
    result = crds.kubectl(
        "create", "--dry-run=server", "--validate=strict", "-f", "-", input=json.dumps(doc), check=False
    )
    assert result.returncode != 0, "accepted by the API server"
    assert PROMETHEUS_SELECTOR_INVALID in " ".join(result.stderr.split()), result.stderr


COLUMNS = {
    "clientquota": ["ENTITY", "PRODUCER", "CONSUMER", "REQUEST%", "READY", "AGE"],
    "topicquota": ["TOPIC", "PRODUCER", "CONSUMER", "ENFORCEMENT", "READY", "AGE"],
    "controllermutationquota": ["ENTITY", "RATE", "BURST", "READY", "AGE"],
    "kafkacluster": ["BOOTSTRAP", "PROTOCOL", "BROKERS", "READY", "AGE"],
}


def test_get_kquota_lists_every_kind_with_its_columns(examples: KubeAPIServer) -> None:
    out = examples.kubectl("get", "kquota", "-A").stdout
    blocks = [b.splitlines() for b in out.strip().split("\n\n")]
    columns = {}
    for block in blocks:
        header, rows = block[0].split(), block[1:]
        assert header[:2] == ["NAMESPACE", "NAME"] and rows, block
        name = next(token for token in rows[0].split() if ".kquota.io/" in token)
        kind = name.split(".kquota.io/")[0]
        columns[kind] = header[2:]
    assert columns == COLUMNS, out
    row = next(line for line in out.splitlines() if "clientquota.kquota.io/alice " in line)
    assert row.split()[2:5] == ["10Mi", "20Mi", "50"], row
    for short, kind in (("cq", "clientquota"), ("tq", "topicquota"), ("cmq", "controllermutationquota")):
        names = examples.kubectl("get", short, "-n", "team-a", "-o", "name").stdout.split()
        assert names and all(n.startswith(f"{kind}.kquota.io/") for n in names)


def _words(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize(
    ("path", "model"),
    [("clientquota.spec", ClientQuotaSpec), ("clientquota.spec.quota", ClientQuotaLimits)],
    ids=["kubectl explain clientquota.spec", "kubectl explain clientquota.spec.quota"],
)
def test_explain_describes_every_field(crds: KubeAPIServer, path: str, model: type[ClientQuotaSpec]) -> None:
    out = _words(crds.kubectl("explain", path).stdout)
    for name, info in model.model_fields.items():
        alias = info.alias or name
        assert f"{alias} <" in out, f"{alias} missing from kubectl explain {path}"
        assert info.description, f"{name} has no description"
        assert _words(info.description)[:60] in out, f"{alias}'s description missing from kubectl explain {path}"


APPLY = {"client-side": ("apply",), "server-side": ("apply", "--server-side")}


def _stored_meta(kube: KubeAPIServer, kind: str, name: str, namespace: str | None) -> tuple[object, object]:
    args = ["get", kind, name, "-o", "json"]
    if namespace:
        args += ["-n", namespace]
    meta = json.loads(kube.kubectl(*args).stdout)["metadata"]
    return meta.get("generation"), meta["resourceVersion"]


def _apply_twice(kube: KubeAPIServer, mode: str, text: str) -> tuple[str, str]:
    """Apply ``text`` twice the same way; the second kubectl output and why a change was seen, if one was."""
    kube.kubectl(*APPLY[mode], "-f", "-", input=text)
    doc = yaml.safe_load(text)
    where = (doc["kind"].lower(), doc["metadata"]["name"], doc["metadata"].get("namespace"))
    before = _stored_meta(kube, *where)
    second = kube.kubectl(*APPLY[mode], "-f", "-", input=text).stdout.strip()
    after = _stored_meta(kube, *where)
    moved = "" if after == before else f"(generation, resourceVersion) moved from {before} to {after}"
    return second, moved


@pytest.mark.parametrize("mode", list(APPLY))
def test_applying_an_unchanged_kafka_cluster_with_grants_again_changes_nothing(crds: KubeAPIServer, mode: str) -> None:
    # A default inside a list item (tenancy.grants[].allowDefaults once had one) makes the
    # stored list differ from the applied one: client-side apply then says "configured" forever.
    name = f"idempotent-{mode}"
    doc = {
        "apiVersion": "kquota.io/v1alpha1",
        "kind": "KafkaCluster",
        "metadata": {"name": name},
        "spec": {
            "bootstrapServers": "kafka-0.kafka:9092",
            "tenancy": {
                "grants": [
                    {"namespaces": ["team-a"], "users": ["team-a-*"], "clientIds": ["a-*"]},
                    {"namespaces": ["team-b"], "ips": ["10.0.0.0/8"]},
                    {"namespaces": ["platform"], "users": ["*"], "allowDefaults": True},
                ]
            },
            "protectedUsers": ["admin"],
            "metrics": {"brokerEndpoints": ["http://kafka-0.kafka:7071/metrics"]},
        },
    }
    try:
        second, moved = _apply_twice(crds, mode, yaml.safe_dump(doc))
        if mode == "client-side":
            assert second == f"kafkacluster.kquota.io/{name} unchanged", second
        assert not moved, moved
    finally:
        crds.kubectl("delete", "kafkacluster", name, "--wait=false", check=False)


@pytest.mark.parametrize("mode", list(APPLY))
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_applying_an_unchanged_example_again_changes_nothing(examples: KubeAPIServer, path: Path, mode: str) -> None:
    second, moved = _apply_twice(examples, mode, path.read_text(encoding="utf-8"))
    if mode == "client-side":
        assert second.endswith(" unchanged"), second
    assert not moved, moved
