"""CRD descriptions (kubectl explain, docs/reference.md) name only what exists.

A description that names a status reason the operator never writes, a Helm
value the chart does not have or a setting the operator does not read sends
the reader the wrong way without any error; these tests catch each such name.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kquota import crdgen
from kquota.api.fields import EntityName, IpEntityName
from kquota.api.manifest import KINDS
from kquota.api.status import KafkaClusterStatus, QuotaStatus
from kquota.domain.status import CLUSTER_ONLY, Reason
from kquota.domain.status_format import STATUS_FROM_NEWER_OPERATOR
from kquota.reconcile.settings import OperatorSettings
from tests.support.paths import REPO

#: The KafkaCluster's Ready reason when connected (render_cluster_status), besides Reason.
CLUSTER_REASONS = {"Connected"}
#: The reason of the StatusFormat condition (not a Ready reason): a newer kquota's status rewritten.
CONDITION_REASONS = {STATUS_FROM_NEWER_OPERATOR}


def _descriptions(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if isinstance(node.get("description"), str):
            yield node["description"]
        for value in node.values():
            yield from _descriptions(value)
    elif isinstance(node, list):
        for value in node:
            yield from _descriptions(value)


TEXT = "\n".join(d for cls in KINDS.values() for d in _descriptions(crdgen.crd(cls)))


def _named(pattern: str) -> list[str]:
    return sorted(set(re.findall(pattern, TEXT)))


def test_descriptions_name_reasons_settings_and_helm_values() -> None:
    # Guards the guards: a rewording that stops matching the patterns below must not pass silently.
    assert _named(r"reason ([A-Z]\w+)") and _named(r"Helm value ([\w.]+\w)") and _named(r"KQUOTA_([A-Z_]+)")


@pytest.mark.parametrize("reason", _named(r"reason ([A-Z]\w+)"))
def test_every_reason_named_is_one_the_operator_writes(reason: str) -> None:
    assert reason in {r.value for r in Reason} | CLUSTER_REASONS | CONDITION_REASONS


@pytest.mark.parametrize("path", _named(r"Helm value ([\w.]+\w)"))
def test_every_helm_value_named_is_in_the_charts_values(path: str) -> None:
    values: Any = yaml.safe_load((REPO / "helm/kquota/values.yaml").read_text(encoding="utf-8"))
    for part in path.split("."):
        assert isinstance(values, dict) and part in values, f"helm/kquota/values.yaml has no {path}"
        values = values[part]


@pytest.mark.parametrize("name", _named(r"KQUOTA_([A-Z_]+)"))
def test_every_setting_named_is_one_the_operator_reads(name: str) -> None:
    assert name.lower() in OperatorSettings.model_fields


@pytest.mark.parametrize("reason", [r for r in Reason if r not in CLUSTER_ONLY], ids=lambda r: r.value)
def test_the_conditions_description_explains_every_reason(reason: Reason) -> None:
    described = QuotaStatus.model_fields["conditions"].description or ""
    assert re.search(rf"\b{reason.value}\b", described), f"status.conditions does not explain {reason.value}"


@pytest.mark.parametrize("model", [EntityName, IpEntityName], ids=lambda m: m.__name__)
def test_a_name_said_to_take_any_characters_takes_them(model: type[EntityName]) -> None:
    # IpEntityName once inherited this promise while accepting only a canonical IP address.
    if "Any characters are allowed" in (model.model_fields["name"].description or ""):
        model.model_validate({"name": "CN=app, OU=payments ü <default>"})
    else:
        assert "canonical" in (model.model_fields["name"].description or "")


def test_the_kafkacluster_conditions_description_explains_its_own_reasons() -> None:
    described = KafkaClusterStatus.model_fields["conditions"].description or ""
    for reason in CLUSTER_ONLY:
        assert re.search(rf"\b{reason.value}\b", described), reason
    assert "kquota.io/approve-removals" in described
