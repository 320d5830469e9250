"""The operator's default cluster: published by the operator in ConfigMap kquota-operator, read by the CLI.

A resource without clusterRef targets the operator's default cluster; the CLI
used to assume it is named ``default``, and planned removals that would never
happen. Now --default-cluster wins, else the operator's published setting,
else the CLI refuses to guess. The Kubernetes API is a fake here (lists and
puts of ConfigMaps, one KafkaCluster, quota resources); tests/e2e/test_cli.py
runs the same against the real API server and operator.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

import pytest

from kquota.cli import kafkacluster
from kquota.cli.connect import add_connection_args, load_target
from kquota.cli.kafkacluster import PUBLISHED_NAME, choose_default_cluster
from kquota.cli.sources import UNRESOLVED_DEFAULT, bind_default_cluster
from kquota.cli.target import TargetError
from kquota.domain.claims import ResourceClaim
from kquota.domain.plan import ResourceRef
from kquota.k8s import published
from kquota.k8s.published import PublishedSettings


class FakeKube:
    """The API calls the CLI and the operator make, over in-memory objects."""

    def __init__(self, config_maps: list[dict[str, Any]] | None = None, quotas: list[dict[str, Any]] | None = None):
        self.config_maps = config_maps or []
        self.quotas = quotas or []
        self.puts: list[tuple[str, str, dict[str, str], dict[str, str]]] = []
        self.selectors: list[str] = []

    async def list_config_maps(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        self.selectors.append(selector)
        key, _, value = selector.partition("=")
        return [
            cm
            for cm in self.config_maps
            if cm["metadata"]["namespace"] == namespace and (cm["metadata"].get("labels") or {}).get(key) == value
        ]

    async def put_config_map(self, namespace: str, name: str, labels: dict[str, str], data: dict[str, str]) -> None:
        self.puts.append((namespace, name, labels, data))
        self.config_maps = [
            cm for cm in self.config_maps if (cm["metadata"]["namespace"], cm["metadata"]["name"]) != (namespace, name)
        ]
        self.config_maps.append({"metadata": {"namespace": namespace, "name": name, "labels": labels}, "data": data})

    async def get_cluster_object(self, plural: str, name: str) -> dict[str, Any]:
        assert plural == "kafkaclusters"
        return {
            "apiVersion": "kquota.io/v1alpha1",
            "kind": "KafkaCluster",
            "metadata": {"name": name},
            "spec": {"bootstrapServers": "kafka:9092"},
        }

    async def list_cluster_objects(self, plural: str) -> dict[str, Any]:
        return {"items": self.quotas if plural == "clientquotas" else []}

    async def close(self) -> None:
        pass


def published_config_map(namespace: str, default_cluster: str) -> dict[str, Any]:
    kube = FakeKube()
    asyncio.run(published.publish(kube, namespace, PublishedSettings(default_cluster, "9.9.9")))  # type: ignore[arg-type]
    return kube.config_maps[0]


def test_the_operator_publishes_its_default_cluster_and_version() -> None:
    kube = FakeKube()
    settings = PublishedSettings("prod", "1.2.3")
    asyncio.run(published.publish(kube, "ops", settings))  # type: ignore[arg-type]
    [(namespace, name, labels, data)] = kube.puts
    assert (namespace, name) == ("ops", "kquota-operator")
    assert json.loads(data["settings.json"]) == {
        "defaultCluster": "prod",
        "version": "1.2.3",
        "protectedUsers": [],
        "protectedClientIds": [],
    }
    assert labels[published.LABEL] == "true"
    assert asyncio.run(published.read(kube, "ops")) == settings  # type: ignore[arg-type]
    assert kube.selectors == [f"{published.LABEL}=true"]
    assert asyncio.run(published.read(kube, "elsewhere")) is None  # type: ignore[arg-type]


def test_a_failed_publish_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    class Refusing(FakeKube):
        async def put_config_map(self, *args: Any) -> None:
            raise RuntimeError("Forbidden")

    asyncio.run(published.publish_or_warn(Refusing(), "ops", PublishedSettings("prod", "1")))  # type: ignore[arg-type]
    assert "could not publish the operator's settings in ConfigMap ops/kquota-operator" in caplog.text
    assert "Forbidden" in caplog.text


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("not json", id="not JSON"),
        pytest.param('{"version": "1"}', id="no defaultCluster"),
        pytest.param('{"defaultCluster": ""}', id="an empty defaultCluster"),
        pytest.param("[]", id="not an object"),
    ],
)
def test_unreadable_settings_are_an_error_not_a_guess(text: str) -> None:
    with pytest.raises(ValueError):
        published.decode(text)


def test_the_cli_names_the_configmap_the_operator_writes() -> None:
    assert PUBLISHED_NAME == published.NAME


PROD = PublishedSettings("prod", "1")


@pytest.mark.parametrize(
    ("flag", "found", "expected"),
    [
        pytest.param(None, PROD, ("prod", "the operator's, from ConfigMap ops/kquota-operator", None), id="published"),
        pytest.param("prod", None, ("prod", "--default-cluster", None), id="the flag alone"),
        pytest.param("prod", PROD, ("prod", "--default-cluster", None), id="the flag agreeing with the operator"),
        pytest.param(
            "staging",
            PROD,
            (
                "staging",
                "--default-cluster",
                "--default-cluster staging is not the operator's: it runs with prod "
                "(ConfigMap ops/kquota-operator); using staging as asked",
            ),
            id="the flag wins over the operator, with a warning",
        ),
    ],
)
def test_precedence(flag: str | None, found: PublishedSettings | None, expected: tuple[str, str, str | None]) -> None:
    assert choose_default_cluster(flag, found, None, "ops") == expected


@pytest.mark.parametrize(
    ("problem", "says"),
    [
        pytest.param(None, "no ConfigMap ops/kquota-operator", id="nothing published"),
        pytest.param("ConfigMap ops/kquota-operator: not allowed (HTTP 403)", "HTTP 403", id="not readable"),
    ],
)
def test_neither_flag_nor_operator_is_an_error(problem: str | None, says: str) -> None:
    with pytest.raises(TargetError) as info:
        choose_default_cluster(None, None, problem, "ops")
    message = str(info.value)
    assert message.startswith("the operator's default cluster is unknown (")
    assert says in message
    assert "pass --default-cluster NAME" in message


def test_manifests_without_cluster_ref_are_bound_once_it_is_known() -> None:
    ref = ResourceRef("ClientQuota", "a", "x")
    loose = ResourceClaim(ref, "", UNRESOLVED_DEFAULT, ())
    pinned = ResourceClaim(ref, "", "other", ())
    assert [c.cluster for c in bind_default_cluster([loose, pinned], "prod")] == ["prod", "other"]
    assert [c.cluster for c in bind_default_cluster([loose, pinned], None)] == [UNRESOLVED_DEFAULT, "other"]


# --- load_target against the fake API ---------------------------------------------------

#: A resource without clusterRef, already in the cluster.
LOOSE = {
    "apiVersion": "kquota.io/v1alpha1",
    "kind": "ClientQuota",
    "metadata": {"name": "alice", "namespace": "team-a", "creationTimestamp": "2024-01-01T00:00:00Z"},
    "spec": {"entity": {"user": {"name": "alice"}}, "quota": {"producerByteRate": 1024}},
}


def args_for(monkeypatch: pytest.MonkeyPatch, kube: FakeKube, *argv: str) -> argparse.Namespace:
    monkeypatch.delenv("KQUOTA_DEFAULT_CLUSTER", raising=False)

    async def open_kube(kubeconfig: str | None, context: str | None) -> FakeKube:
        return kube

    monkeypatch.setattr(kafkacluster, "_open_kube", open_kube)
    parser = argparse.ArgumentParser()
    add_connection_args(parser, "cluster")
    return parser.parse_args(["--cluster", "prod", "--ledger-namespace", "ops", *argv])


def test_resources_without_cluster_ref_target_the_published_default(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKube([published_config_map("ops", "prod")], [LOOSE])
    target = asyncio.run(load_target(args_for(monkeypatch, kube)))
    assert (target.default_cluster, target.default_cluster_source) == (
        "prod",
        "the operator's, from ConfigMap ops/kquota-operator",
    )
    assert [(c.ref.name, c.cluster) for c in target.claimants or []] == [("alice", "prod")]


def test_without_a_published_default_the_cli_refuses_to_guess(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKube([published_config_map("elsewhere", "prod")], [LOOSE])
    with pytest.raises(TargetError, match="pass --default-cluster"):
        asyncio.run(load_target(args_for(monkeypatch, kube)))
    # --default-cluster is the way out; export, which needs no claimants, never asks.
    target = asyncio.run(load_target(args_for(monkeypatch, kube, "--default-cluster", "prod")))
    assert [c.cluster for c in target.claimants or []] == ["prod"]
    assert asyncio.run(load_target(args_for(monkeypatch, kube), with_claimants=False)).default_cluster is None


def test_a_flag_unlike_the_operator_is_used_and_warned_about(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    kube = FakeKube([published_config_map("ops", "prod")], [LOOSE])
    target = asyncio.run(load_target(args_for(monkeypatch, kube, "--default-cluster", "staging")))
    # As asked: the resource without clusterRef targets staging, so it is not among prod's.
    assert target.claimants == []
    assert target.default_cluster == "staging"
    assert "kquota: warning: --default-cluster staging is not the operator's" in capsys.readouterr().err
