"""GitOps health of kquota's resources in each state: Argo CD's check and Flux's, which agree.

Argo CD runs health checks in gopher-lua, a Lua 5.1; deploy/argocd/health.lua runs here in a real
Lua 5.1 (lupa's bundled interpreter) the way Argo CD runs it (tests/support/argocd.py: its deletion
rule, ``obj`` in, ``hs`` out, only the libraries it opens). Flux computes health with kstatus, or
with a Kustomization's healthCheckExprs; the same resources go through Flux's own kstatus and CEL
evaluator (deploy/flux/kstatus-check, built with Go) with and without
deploy/flux/health-check-exprs.yaml. The statuses come from the operator's own renderer
(kquota.domain.status), so a change to what the operator writes that either tool misreads fails
here; every combination of the conditions both tools read is checked too. The copies of the script
and of the expressions in docs/gitops.md must be the same files.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness import cache, procs

from kquota.domain.status import CLUSTER_ONLY, STALLED, Outcome, Reason, render_cluster_status, render_status
from tests.support import argocd
from tests.support.paths import REPO

SCRIPT = REPO / "deploy" / "argocd" / "health.lua"
EXPRS = REPO / "deploy" / "flux" / "health-check-exprs.yaml"
NOW = "2026-01-01T00:00:00Z"


def health(obj: dict[str, Any]) -> tuple[str, str]:
    """Argo CD's health of ``obj`` with kquota's check (tests/support/argocd.py)."""
    return argocd.health(obj, SCRIPT.read_text())


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
        "Ready=False without Stalled or Reconciling: not failed (kstatus: InProgress)",
        quota(2, {"observedGeneration": 2, "conditions": [{"type": "Ready", "status": "False", "reason": "Broken"}]}),
        "Progressing",
        "Broken",
    ),
    (
        "Reconciling comes before Ready=True",
        quota(
            2,
            {
                "observedGeneration": 2,
                "conditions": [
                    {"type": "Ready", "status": "True", "reason": "Applied"},
                    {"type": "Reconciling", "status": "True", "reason": "Pending", "message": "a removal waits"},
                ],
            },
        ),
        "Progressing",
        "Pending: a removal waits",
    ),
    (
        "an observedGeneration ahead of the generation is not this spec's either",
        {**rendered(Reason.APPLIED, generation=4), "metadata": {"name": "alice", "generation": 3}},
        "Progressing",
        "observe generation 3",
    ),
    (
        "being deleted: Argo CD's own rule, before the script",
        {**rendered(Reason.APPLIED), "metadata": {"name": "alice", "generation": 3, "deletionTimestamp": NOW}},
        "Progressing",
        "Pending deletion",
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


# -- Argo CD's runner itself ----------------------------------------------------------------------


def test_the_runner_opens_only_the_libraries_argo_cd_opens() -> None:
    obj = quota(1, None)
    with pytest.raises(argocd.LuaHealthError, match="string"):
        argocd.health(obj, 'return {status = string.upper("healthy")}')
    with pytest.raises(argocd.LuaHealthError):
        argocd.health(obj, 'return {status = ("x"):upper()}')
    assert argocd.health(obj, 'return {status = "Healthy", message = tostring(os.time() > 0)}') == ("Healthy", "true")
    assert argocd.health(obj, 'return {status = "Green"}') == ("Unknown", "Lua returned an invalid health status")
    with pytest.raises(argocd.LuaHealthError, match="table"):
        argocd.health(obj, 'return "Healthy"')


def test_the_deletion_rule_comes_before_the_script_unless_argo_cds_hook_finalizer_holds_it() -> None:
    deleting = {**quota(1, None), "metadata": {"name": "q", "generation": 1, "deletionTimestamp": NOW}}
    assert argocd.health(deleting, 'return {status = "Degraded"}') == ("Progressing", "Pending deletion")
    hooked = {**deleting, "metadata": {**deleting["metadata"], "finalizers": [argocd.HOOK_FINALIZER]}}
    assert argocd.health(hooked, 'return {status = "Degraded"}') == ("Degraded", "")


# -- the operator's statuses: one verdict each --------------------------------------------------


def operator_statuses() -> list[tuple[str, dict[str, Any]]]:
    """Every status the operator renders: each quota reason, and the KafkaCluster's."""
    out = [(r.value, rendered(r, message="the broker said no")) for r in Reason if r not in CLUSTER_ONLY]
    cluster = {"apiVersion": "kquota.io/v1alpha1", "kind": "KafkaCluster", "metadata": {"name": "c", "generation": 2}}
    for reason in (Reason.APPLIED, Reason.KAFKA_UNAVAILABLE):
        out.append(
            (f"cluster {reason.value}", {**cluster, "status": render_cluster_status(None, 2, reason, "m", None, NOW)})
        )
    held = render_cluster_status(None, 2, Reason.APPLIED, "m", 1, NOW, held="12 quota key removals held")
    out.append(("cluster held", {**cluster, "status": held}))
    return out


@pytest.mark.parametrize(("name", "obj"), operator_statuses(), ids=[n for n, _ in operator_statuses()])
def test_the_operator_sets_exactly_one_of_ready_stalled_reconciling(name: str, obj: dict[str, Any]) -> None:
    """So the order of the rules between them (and kstatus' order of the conditions) never decides."""
    true = [c["type"] for c in obj["status"]["conditions"] if c["status"] == "True"]
    assert len({"Ready", "Stalled", "Reconciling"} & set(true)) == 1, (name, true)


# -- Flux: the same resources through Flux's kstatus and its CEL evaluator ------------------------

KSTATUS_SOURCE = REPO / "deploy" / "flux" / "kstatus-check"
#: Argo CD's health and Flux's status mean the same for every status kquota writes.
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


def flux(objs: list[dict[str, Any]], exprs: bool = False) -> list[tuple[str, str]]:
    """(status, message) Flux computes for each object: kstatus, or with ``exprs`` kquota's healthCheckExprs."""
    named = [{**o, "metadata": {**o["metadata"], "name": f"o{i}"}} for i, o in enumerate(objs)]
    argv = [str(kstatus_binary()), *(["-exprs", str(EXPRS)] if exprs else [])]
    result = subprocess.run(argv, input=json.dumps(named), capture_output=True, text=True, check=False, timeout=60)
    assert result.returncode == 0, result.stderr
    return [(r["status"], r["message"]) for r in json.loads(result.stdout)]


def kstatus(objs: list[dict[str, Any]]) -> list[str]:
    return [status for status, _ in flux(objs)]


@pytest.mark.slow
def test_kstatus_agrees_with_argo_on_every_status_the_operator_writes() -> None:
    names, objs = zip(*operator_statuses(), strict=True)
    want = [ARGO_TO_KSTATUS[health(o)[0]] for o in objs]
    for exprs in (False, True):
        got = [status for status, _ in flux(list(objs), exprs=exprs)]
        assert got == want, (exprs, list(zip(names, got, want, strict=True)))
    assert want[-1] == "Failed", "held removals need an approval: never Current"


@pytest.mark.slow
def test_kstatus_on_the_samples() -> None:
    """Where kstatus and the Argo CD check differ, it is in states the operator never leaves a resource in,
    except one: before the operator's first status write, kstatus calls a resource Current (docs/gitops.md).
    With kquota's healthCheckExprs, Flux agrees with Argo CD on every sample."""
    expected = {
        "no status yet: the operator has not seen it": "Current",
        "a status without observedGeneration": "Current",
        "no Ready condition at all": "Current",
        "being deleted: Argo CD's own rule, before the script": "Terminating",
    }
    got = kstatus([s[1] for s in SAMPLES])
    for (name, _, argo, _), status in zip(SAMPLES, got, strict=True):
        assert status == expected.get(name, ARGO_TO_KSTATUS[argo]), name
    with_exprs = flux([s[1] for s in SAMPLES], exprs=True)
    for (name, _, argo, _), (status, message) in zip(SAMPLES, with_exprs, strict=True):
        if name.startswith("no status yet"):
            # CEL has no `status` to read: Flux's status reader reports the error, never Current.
            assert status == "Unknown" and "no such attribute" in message, message
        else:
            assert status == ARGO_TO_KSTATUS[argo], name


CONDITION_STATES = {"Ready": [None, "True", "False", "Unknown"], "Reconciling": [None, "True", "False"],
                    "Stalled": [None, "True", "False"]}  # fmt: skip


def every_combination() -> list[tuple[str, dict[str, Any]]]:
    """Each status the two tools read can be in: no status; observedGeneration missing, behind or current;
    each of Ready, Reconciling and Stalled absent or in each state, in every order; being deleted."""
    out: list[tuple[str, dict[str, Any]]] = [("no status", quota(3, None))]
    for observed in (None, 2, 3):
        for states in itertools.product(*CONDITION_STATES.values()):
            present = [(t, v) for t, v in zip(CONDITION_STATES, states, strict=True) if v is not None]
            for order in itertools.permutations(present):
                conds = [{"type": t, "status": v, "reason": f"R{t}", "message": f"m{t}"} for t, v in order]
                status: dict[str, Any] = {"conditions": conds}
                if observed is not None:
                    status["observedGeneration"] = observed
                label = f"observed={observed} " + ",".join(f"{t}={v}" for t, v in order)
                out.append((label, quota(3, status)))
    deleting = quota(3, {"observedGeneration": 3, "conditions": [{"type": "Ready", "status": "True"}]})
    deleting["metadata"]["deletionTimestamp"] = NOW
    out.append(("deleting", deleting))
    return out


def first_true(obj: dict[str, Any], types: tuple[str, ...]) -> str | None:
    for c in obj.get("status", {}).get("conditions", []):
        if c["type"] in types and c["status"] == "True":
            return str(c["type"])
    return None


@pytest.mark.slow
def test_argo_cd_and_flux_agree_on_every_combination() -> None:
    """Argo CD's check and Flux with kquota's healthCheckExprs give the same verdict for every combination;
    kstatus alone differs only where it reads on without what kquota's rules wait for (no status: Current;
    no observedGeneration: whatever the conditions say; no Ready condition: Current), in its own Terminating,
    and when Stalled=True is listed before Reconciling=True (kstatus takes the first; the operator never
    sets both)."""
    combos = every_combination()
    objs = [o for _, o in combos]
    argo = [ARGO_TO_KSTATUS[health(o)[0]] for o in objs]
    exprs = flux(objs, exprs=True)
    plain = kstatus(objs)
    for (label, obj), want, (got, message), alone in zip(combos, argo, exprs, plain, strict=True):
        if label == "no status":
            assert got == "Unknown" and "status" in message, message
            assert alone == "Current"
            continue
        assert got == want, (label, got, want, message)
        if alone == want:
            continue
        status = obj.get("status", {})
        ready = next((c["status"] for c in status.get("conditions", []) if c["type"] == "Ready"), None)
        if label == "deleting":
            assert alone == "Terminating"
        elif first_true(obj, ("Reconciling", "Stalled")) == "Stalled" and first_true(obj, ("Reconciling",)):
            assert (alone, want) == ("Failed", "InProgress"), label
        elif "observedGeneration" not in status:
            # kstatus reads on to the conditions; kquota's rules wait for the operator to observe the spec.
            assert want == "InProgress", label
        else:
            assert (alone, want, ready) == ("Current", "InProgress", None), label


def test_docs_carry_the_tested_health_check_exprs() -> None:
    """docs/gitops.md's healthCheckExprs are deploy/flux/health-check-exprs.yaml's, for all four kinds."""
    doc = (REPO / "docs" / "gitops.md").read_text()
    blocks = [yaml.safe_load(textwrap.dedent(b)) for b in re.findall(r"\n  healthCheckExprs:\n((?:    .*\n)+)", doc)]
    assert blocks, "docs/gitops.md has no healthCheckExprs block"
    tested = yaml.safe_load(EXPRS.read_text())
    assert blocks[0] == tested, "the first is the whole list"
    for block in blocks[1:]:
        assert all(entry in tested for entry in block), block
    kinds = [e["kind"] for e in tested]
    assert kinds == ["ClientQuota", "ControllerMutationQuota", "TopicQuota", "KafkaCluster"]
