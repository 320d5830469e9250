"""kquota export: by default only what kquota does not manage yet (the ownership ledger), --all for everything."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from kquota.advisor.current import read_current
from kquota.cli import export as export_cmd
from kquota.cli.export import unmanaged
from kquota.cli.main import main
from kquota.cli.target import Quotas, Target
from kquota.kafka.settings import ConnectionSettings
from tests.support.quotas import ALICE, BOB, C, P, R

CONN = ConnectionSettings("kafka:9092")


@pytest.mark.parametrize(
    ("live", "ledger", "expected", "left_out"),
    [
        pytest.param({ALICE: {P: 1.0}}, {}, {ALICE: {P: 1.0}}, 0, id="an empty ledger leaves everything"),
        pytest.param(
            {ALICE: {P: 1.0, C: 2.0}},
            {ALICE: {P: 1.0}},
            {ALICE: {C: 2.0}},
            1,
            id="an owned key is left out, the entity's other key stays",
        ),
        pytest.param(
            {ALICE: {P: 5.0}, BOB: {R: 50.0}},
            {ALICE: {P: 1.0}},
            {BOB: {R: 50.0}},
            1,
            id="an owned key changed by hand is drift the operator restores, not a quota to adopt",
        ),
        pytest.param(
            {ALICE: {P: 1.0}},
            {ALICE: {C: 1.0}, BOB: {P: 1.0}},
            {ALICE: {P: 1.0}},
            0,
            id="ledger keys the brokers do not have change nothing",
        ),
    ],
)
def test_unmanaged(live: Quotas, ledger: Quotas, expected: Quotas, left_out: int) -> None:
    assert unmanaged(live, ledger) == (expected, left_out)


LIVE: Quotas = {ALICE: {P: 1048576.0, C: 2048.0}, BOB: {R: 50.0}}


def run_export(
    flags: list[str],
    target: Target,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> tuple[int, set[tuple[str, str]], str]:
    """Export against fakes of the cluster: exit code, the (entity user, quota field) pairs written, stderr."""
    seen: dict[str, Any] = {}

    async def load_target(args: Any, with_claimants: bool = True, need_ledger: bool = True) -> Target:
        seen["need_ledger"] = need_ledger
        return target

    monkeypatch.setattr(export_cmd, "load_target", load_target)
    monkeypatch.setattr(export_cmd, "read_live", lambda connection, topics=(): (LIVE, {}))
    code = main(["export", "--bootstrap-server", "kafka:9092", *flags])
    out, err = capsys.readouterr()
    written = {
        (doc["spec"]["entity"]["user"]["name"], field)
        for doc in yaml.safe_load_all(out)
        if doc
        for field in doc["spec"]["quota"]
    }
    if code == 0:
        # The ledger is read when it can be, but a missing one does not stop an export.
        assert seen["need_ledger"] is False
    return code, written, err


EVERYTHING = {("alice", "producerByteRate"), ("alice", "consumerByteRate"), ("bob", "requestPercentage")}
WITH_LEDGER = Target(CONN, cluster="prod", ledger={ALICE: {P: 1048576.0}}, ledger_namespace="ops")
NO_CLUSTER = Target(CONN)
UNREADABLE = Target(CONN, cluster="prod", ledger_problem="ownership ledger in namespace ops: not allowed (HTTP 403)")


@pytest.mark.parametrize(
    ("flags", "target", "code", "written", "stderr"),
    [
        pytest.param(
            [],
            WITH_LEDGER,
            0,
            EVERYTHING - {("alice", "producerByteRate")},
            "kquota: note: left out 1 key kquota already manages (in its ownership ledger, namespace ops); "
            "--all exports them too",
            id="with a readable ledger the default is unmanaged only, and stderr says what was left out",
        ),
        pytest.param(
            ["--unmanaged-only"],
            WITH_LEDGER,
            0,
            EVERYTHING - {("alice", "producerByteRate")},
            "left out 1 key",
            id="--unmanaged-only says the same",
        ),
        pytest.param(["--all"], WITH_LEDGER, 0, EVERYTHING, "", id="--all exports the managed keys too, quietly"),
        pytest.param(
            [],
            NO_CLUSTER,
            0,
            EVERYTHING,
            "kquota: note: exporting every quota, including any kquota already manages: "
            "no --cluster, so no ownership ledger to read",
            id="without --cluster everything is exported, with a note",
        ),
        pytest.param(
            [],
            UNREADABLE,
            0,
            EVERYTHING,
            "including any kquota already manages: ownership ledger in namespace ops: not allowed (HTTP 403)",
            id="an unreadable ledger exports everything and says why",
        ),
        pytest.param(
            ["--unmanaged-only"],
            NO_CLUSTER,
            1,
            set(),
            "kquota: error: --unmanaged-only needs kquota's ownership ledger: no --cluster",
            id="--unmanaged-only without a ledger is an error, not a silent export of everything",
        ),
    ],
)
def test_export_scope(
    flags: list[str],
    target: Target,
    code: int,
    written: set[tuple[str, str]],
    stderr: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    got_code, got, err = run_export(flags, target, monkeypatch, capsys)
    assert (got_code, got) == (code, written), err
    assert stderr in err
    if not stderr:
        assert "note" not in err


def test_unmanaged_only_and_all_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["export", "--bootstrap-server", "kafka:9092", "--all", "--unmanaged-only"])
    assert info.value.code == 1
    assert "not allowed with argument" in capsys.readouterr().err


def test_export_output_is_what_advise_current_reads(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`kquota export --all > applied.yaml` then `kquota advise --current applied.yaml` (docs/advisor.md)."""
    # run_export puts the fakes of the cluster in place (and checks an export works at all).
    code, _, _ = run_export(["--all"], NO_CLUSTER, monkeypatch, capsys)
    assert code == 0
    assert main(["export", "--bootstrap-server", "kafka:9092", "--all"]) == 0
    applied = tmp_path / "applied.yaml"
    applied.write_text(capsys.readouterr().out)
    current = read_current(str(applied))
    expected = {
        ("user", e.user, None, False): {{P: "produce", C: "fetch", R: "request"}[k]: v for k, v in values.items()}
        for e, values in LIVE.items()
    }
    assert current.quotas == expected and current.skipped == []
