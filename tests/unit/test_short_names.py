"""kquota's kinds answer to names no well-known Kafka operator (or Kubernetes itself) uses.

``kubectl get kc`` must not become ambiguous beside Strimzi (whose KafkaConnect
is ``kc``). The lists are the short names in those projects' published CRDs
(Strimzi 0.45-1.2, Confluent for Kubernetes, Koperator, Redpanda operator) and
the built-in resources' short names in Kubernetes 1.35.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kquota.api import KINDS

CRDS = Path(__file__).resolve().parents[2] / "crds"

KNOWN: dict[str, frozenset[str]] = {
    "strimzi": frozenset({"k", "kc", "kt", "ku", "knp", "kb", "kctr", "kmm", "kmm2", "kr", "sps"}),
    "confluent-for-kubernetes": frozenset(
        {
            "kafka",
            "broker",
            "kt",
            "topic",
            "krc",
            "kafkarestclass",
            "ctr",
            "connector",
            "connect",
            "zookeeper",
            "zk",
            "schemaregistry",
            "sr",
            "cl",
            "clusterlink",
            "clink",
            "cfrb",
            "confluentrolebinding",
            "kafkarestproxy",
            "krp",
            "ksqldb",
            "ksql",
            "controlcenter",
            "c3",
            "schema",
            "migrationjob",
            "migration",
        }
    ),
    "koperator": frozenset(),
    "redpanda": frozenset({"rp", "rpu", "sc", "rpr", "grp", "np", "brk", "rpcn", "sl", "stretch", "rpbrokerpool"}),
    "kubernetes": frozenset(
        {
            "cs",
            "cm",
            "ep",
            "ev",
            "limits",
            "ns",
            "no",
            "pvc",
            "pv",
            "po",
            "rc",
            "quota",
            "sa",
            "svc",
            "crd",
            "crds",
            "ds",
            "deploy",
            "rs",
            "sts",
            "hpa",
            "cj",
            "csr",
            "ing",
            "netpol",
            "pdb",
            "pc",
            "sc",
            "ingressclass",
            "vac",
        }
    ),
}


def short_names() -> dict[str, list[str]]:
    out = {}
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        out[crd["spec"]["names"]["kind"]] = list(crd["spec"]["names"].get("shortNames") or [])
    return out


def test_every_kind_has_a_short_name_and_the_kquota_category() -> None:
    names = short_names()
    assert set(names) == set(KINDS)
    assert all(names.values()), names
    for path in CRDS.glob("*.yaml"):
        assert "kquota" in yaml.safe_load(path.read_text())["spec"]["names"]["categories"]


@pytest.mark.parametrize("project", sorted(KNOWN))
def test_no_short_name_collides_with(project: str) -> None:
    ours = {n: kind for kind, names in short_names().items() for n in names}
    clash = sorted(set(ours) & KNOWN[project])
    assert not clash, f"{clash} are also {project}'s short names: kubectl get {clash[0]} would be ambiguous"


def test_the_kafkacluster_short_name_is_kqc() -> None:
    # Documented in the README and CHANGELOG (it was kc, Strimzi KafkaConnect's).
    assert short_names()["KafkaCluster"] == ["kqc"]
