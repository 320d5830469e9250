"""GitOps health of kquota's resources in each state: Argo CD's check and Flux's kstatus.

Argo CD runs health checks in gopher-lua, a Lua 5.1; deploy/argocd/health.lua
runs here in a real Lua 5.1 (lupa's bundled interpreter), with ``obj`` set the
way Argo CD sets it. Flux computes health with kstatus; the same resources go
through the real kstatus library (deploy/flux/kstatus-check, built with Go).
The statuses come from the operator's own renderer (kquota.domain.status), so
a change to what the operator writes that either tool misreads fails here.
The copy of the script in docs/gitops.md must be the same script.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
from harness import cache, procs
from lupa import lua51

from kquota.domain.status import CLUSTER_ONLY, STALLED, Outcome, Reason, render_cluster_status, render_status
from tests.support.paths import REPO

SCRIPT = REPO / "deploy" / "argocd" / "health.lua"
NOW = "2026-01-01T00:00:00Z"


def health(obj: dict[str, Any]) -> tuple[str, str]:
    """Run the script as Argo CD does: a fresh Lua state, global ``obj``, ``hs`` returned."""
    lua = lua51.LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    result = lua.execute(SCRIPT.read_text())
    return str(result["status"]), str(result["message"] or "")


def quota(generation: int, status: dict[str, Any] | None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "kquota.io/v1alpha1",
        "kind": "ClientQuota",
        "metadata": {"name": "alice", "namespace": "team-a", "generation": generation},
        "spec": {"entity": {"user": {"name": "alice"}}, "quota": {"producerByteRate": 1024}},
    }
    if status is not None:
        obj["status"] = status
    return obj


def rendered(reason: Reason, message: str = "details", generation: int = 3) -> dict[str, Any]:
    outcome = Outcome(reason, message, fully_applied=reason is Reason.APPLIED)
    return quota(generation, render_status(None, generation, outcome, "users/alice", "main", NOW))


def expected_health(reason: Reason) -> str:
    """What Argo CD must show, from the operator's own classification of the reason."""
    if Outcome(reason, "").ready == "True":
        return "Healthy"
    return "Degraded" if reason in STALLED else "Progressing"


@pytest.mark.unit
def test_classification_of_known_reasons() -> None:
    assert expected_health(Reason.APPLIED) == "Healthy"
    assert expected_health(Reason.PENDING) == "Progressing"
    assert expected_health(Reason.KAFKA_UNAVAILABLE) == "Progressing"
    assert expected_health(Reason.CONFLICT) == "Degraded"
    assert expected_health(Reason.INVALID_SPEC) == "Degraded"


@pytest.mark.unit
@pytest.mark.parametrize("reason", [r for r in Reason if r not in CLUSTER_ONLY], ids=lambda r: r.value)
def test_operator_status_maps_to_argo_health(reason: Reason) -> None:
    """Every reason the operator writes, rendered by the operator, read by the check."""
    status, message = health(rendered(reason, message="the broker said no"))
    assert status == expected_health(reason)
    assert message.startswith(reason.value)
    if status != "Healthy":
        assert "the broker said no" in message


SAMPLES: list[tuple[str, dict[str, Any], str, str]] = [
    ("no status yet: the operator has not seen it", quota(1, None), "Progressing", "Waiting for the kquota operator"),
    (
        "a status without observedGeneration",
        quota(1, {"conditions": [{"type": "Ready", "status": "True", "reason": "Applied"}]}),
        "Progressing",
        "observe generation 1",
    ),
    (
        "Ready=True but for an older generation: the new spec is not applied yet",
        {**rendered(Reason.APPLIED, generation=2), "metadata": {"name": "alice", "generation": 3}},
        "Progressing",
        "observe generation 3",
    ),
    (
        "Stalled wins over a stale Ready=True",
        quota(
            2,
            {
                "observedGeneration": 2,
                "conditions": [
                    {"type": "Ready", "status": "True", "reason": "Applied"},
                    {"type": "Stalled", "status": "True", "reason": "Conflict", "message": "held by team-b/q"},
                ],
            },
        ),
        "Degraded",
        "Conflict: held by team-b/q",
    ),
    (
        "Stalled=False is not a failure",
        quota(
            2,
            {
                "observedGeneration": 2,
                "conditions": [
                    {"type": "Ready", "status": "True", "reason": "Applied", "message": ""},
                    {"type": "Stalled", "status": "False", "reason": "Applied"},
                ],
            },
        ),
        "Healthy",
        "Applied",
    ),
    (
        "Ready=Unknown without Reconciling",
        quota(
            2, {"observedGeneration": 2, "conditions": [{"type": "Ready", "status": "Unknown", "reason": "Pending"}]}
        ),
        "Progressing",
        "Pending",
    ),
    (
        "no Ready condition at all",
        quota(2, {"observedGeneration": 2, "conditions": []}),
        "Progressing",
        "Waiting for the Ready condition",
    ),
    (
        "Ready=False without Stalled or Reconciling",
        quota(2, {"observedGeneration": 2, "conditions": [{"type": "Ready", "status": "False", "reason": "Broken"}]}),
        "Degraded",
        "Broken",
    ),
]


@pytest.mark.unit
@pytest.mark.parametrize(("obj", "status", "message"), [s[1:] for s in SAMPLES], ids=[s[0] for s in SAMPLES])
def test_sample_resources(obj: dict[str, Any], status: str, message: str) -> None:
    got_status, got_message = health(obj)
    assert got_status == status
    assert message in got_message


@pytest.mark.unit
def test_a_kafkacluster_holding_removals_is_degraded() -> None:
    status = render_cluster_status(None, 4, Reason.APPLIED, "connected", 3, NOW, held="12 quota key removals held")
    obj = {"apiVersion": "kquota.io/v1alpha1", "kind": "KafkaCluster", "metadata": {"name": "main", "generation": 4}}
    assert health({**obj, "status": status}) == ("Degraded", "RemovalsHeld: 12 quota key removals held")


@pytest.mark.unit
@pytest.mark.parametrize(
    ("reason", "expected"), [(Reason.APPLIED, "Healthy"), (Reason.KAFKA_UNAVAILABLE, "Progressing")]
)
def test_kafka_cluster_status_maps_to_argo_health(reason: Reason, expected: str) -> None:
    status = render_cluster_status(
        None, 4, reason, "connected; 3 broker(s)", 3 if reason is Reason.APPLIED else None, NOW
    )
    obj = {"apiVersion": "kquota.io/v1alpha1", "kind": "KafkaCluster", "metadata": {"name": "main", "generation": 4}}
    assert health({**obj, "status": status})[0] == expected


@pytest.mark.unit
def test_docs_carry_the_tested_script() -> None:
    """docs/gitops.md shows the argocd-cm snippet; its Lua must be this very script."""
    doc = (REPO / "docs" / "gitops.md").read_text()
    blocks = re.findall(r"resource\.customizations\.health\.kquota\.io_(\w+): (?:&\w+ )?\|\n((?:    .*\n|\n)+)", doc)
    assert blocks, "docs/gitops.md has no resource.customizations.health.kquota.io_<Kind> block"
    assert textwrap.dedent(blocks[0][1]).strip() == SCRIPT.read_text().strip()
    kinds = set(re.findall(r"resource\.customizations\.health\.kquota\.io_(\w+):", doc))
    assert kinds == {"ClientQuota", "ControllerMutationQuota", "TopicQuota", "KafkaCluster"}


# -- Flux: the same resources through kstatus itself ------------------------------------------

KSTATUS_SOURCE = REPO / "deploy" / "flux" / "kstatus-check"
#: Argo CD's health and kstatus' status mean the same for every status kquota writes.
ARGO_TO_KSTATUS = {"Healthy": "Current", "Progressing": "InProgress", "Degraded": "Failed"}


def kstatus_binary() -> Path:
    """Build (or reuse) deploy/flux/kstatus-check, keyed by its source."""
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "main.go"):
        digest.update((KSTATUS_SOURCE / name).read_bytes())
    binary = cache.root() / "bin" / f"kstatus-check-{digest.hexdigest()[:12]}"
    if binary.exists():
        return binary
    with cache.locked("kstatus-check-build"):
        if not binary.exists():
            tmp = binary.with_suffix(".tmp")
            procs.run_checked(
                ["go", "build", "-trimpath", "-o", str(tmp), "."],
                what="building deploy/flux/kstatus-check",
                log=cache.root() / "logs" / "kstatus-check-build.log",
                env=dict(os.environ, CGO_ENABLED="0"),
                cwd=KSTATUS_SOURCE,
                timeout=900,
            )
            tmp.rename(binary)
    return binary


def kstatus(objs: list[dict[str, Any]]) -> list[str]:
    named = [{**o, "metadata": {**o["metadata"], "name": f"o{i}"}} for i, o in enumerate(objs)]
    result = subprocess.run(
        [str(kstatus_binary())], input=json.dumps(named), capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return [r["status"] for r in json.loads(result.stdout)]


@pytest.mark.slow
def test_kstatus_agrees_with_argo_on_every_status_the_operator_writes() -> None:
    reasons = [r for r in Reason if r not in CLUSTER_ONLY]
    objs = [rendered(r, message="the broker said no") for r in reasons]
    cluster = {"apiVersion": "kquota.io/v1alpha1", "kind": "KafkaCluster", "metadata": {"name": "c", "generation": 2}}
    for reason in (Reason.APPLIED, Reason.KAFKA_UNAVAILABLE):
        objs.append({**cluster, "status": render_cluster_status(None, 2, reason, "m", None, NOW)})
    held = render_cluster_status(None, 2, Reason.APPLIED, "m", 1, NOW, held="12 quota key removals held")
    objs.append({**cluster, "status": held})
    got = kstatus(objs)
    want = [ARGO_TO_KSTATUS[health(o)[0]] for o in objs]
    assert got == want, list(zip([*reasons, "cluster ok", "cluster down", "held"], got, want, strict=True))
    assert got[-1] == "Failed", "held removals need an approval: never Current"


@pytest.mark.slow
def test_kstatus_on_the_samples() -> None:
    """Where kstatus and the Argo CD check differ, it is in states the operator never leaves a resource in,
    except one: before the operator's first status write, kstatus calls a resource Current (docs/gitops.md)."""
    expected = {
        "no status yet: the operator has not seen it": "Current",
        "a status without observedGeneration": "Current",
        "no Ready condition at all": "Current",
        "Ready=False without Stalled or Reconciling": "InProgress",
    }
    got = kstatus([s[1] for s in SAMPLES])
    for (name, _, argo, _), status in zip(SAMPLES, got, strict=True):
        assert status == expected.get(name, ARGO_TO_KSTATUS[argo]), name
