"""``kquota plan --impact``'s pure parts: the quotas after the plan, exit code 4, the flags, the plan in markdown."""

from __future__ import annotations

import pytest

from kquota.advisor.report.impact import Impact, ImpactRow, Verdict
from kquota.cli import common
from kquota.cli.impact import after_plan, exit_code
from kquota.cli.main import main
from kquota.cli.plan import render_markdown
from kquota.cli.planning import Action, Report, Row
from kquota.domain.entities import Entity
from kquota.domain.plan import ResourceRef
from tests.support.quotas import ALICE, BOB, C, P, R

pytestmark = pytest.mark.unit

CAROL = Entity.for_user("carol")


def test_the_quotas_after_the_plan_are_the_live_ones_with_the_changes_the_operator_makes() -> None:
    live = {ALICE: {P: 100.0, C: 200.0}, BOB: {P: 5.0}, CAROL: {R: 50.0}}
    report = Report("prod", "3 keys owned", rows=[
        Row(Action.CHANGE, ALICE, P, 100.0, 50.0),
        Row(Action.REMOVE, ALICE, C, 200.0, None),
        Row(Action.ADD, Entity.for_user(None), P, None, 10.0),
        # Not made by the operator: a held removal, a kept key, a key only recorded, an unmanaged one.
        Row(Action.HELD, BOB, P, 5.0, None),
        Row(Action.KEEP, CAROL, R, 50.0, None),
        Row(Action.OWN, BOB, P, 5.0, 5.0),
        Row(Action.UNMANAGED, CAROL, R, 50.0, None),
    ])  # fmt: skip
    assert after_plan(live, report) == {
        ALICE: {P: 50.0},
        BOB: {P: 5.0},
        CAROL: {R: 50.0},
        Entity.for_user(None): {P: 10.0},
    }
    assert live[ALICE] == {P: 100.0, C: 200.0}  # the live quotas themselves are not touched


def row(verdict: Verdict, share: float) -> ImpactRow:
    return ImpactRow(
        verdict, "producer_byte_rate", "users/a", 2.0, "users/a", 1.0, "users/a", 100, share, 1.5, 1.5, 0.0
    )  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("plan_code", "rows", "threshold", "expected"),
    [
        pytest.param(2, [row("throttles", 0.02)], 0.0, 4, id="a change throttles an entity: 4 instead of 2"),
        pytest.param(3, [row("throttles", 0.02)], 0.0, 4, id="with held removals too: 4, the one that fails CI"),
        pytest.param(3, [row("throttles", 0.02)], 0.05, 3, id="held removals, nobody throttled above it: 3"),
        pytest.param(2, [row("throttles", 0.02)], 0.05, 2, id="throttled less than the threshold: 2 as before"),
        pytest.param(2, [row("throttles", 0.05)], 0.05, 2, id="exactly the threshold is not more than it"),
        pytest.param(2, [row("un-throttles", 0.9), row("within", 0.0)], 0.0, 2, id="freeing an entity is no risk"),
        pytest.param(1, [row("throttles", 1.0)], 0.0, 1, id="an error stays an error"),
        pytest.param(0, [], 0.0, 0, id="no change, no impact"),
    ],
)
def test_exit_code_4_when_a_change_throttles_more_than_the_threshold(
    plan_code: int, rows: list[ImpactRow], threshold: float, expected: int
) -> None:
    impact = Impact(rows, threshold, "history", 100, 1, None, None)
    assert exit_code(plan_code, impact) == expected
    assert exit_code(plan_code, None) == plan_code
    assert (common.HELD, common.THROTTLES) == (3, 4)


@pytest.mark.parametrize("value", ["1", "1.5", "-0.1", "often"])
def test_a_threshold_that_is_not_a_share_of_time_is_a_usage_error(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["plan", "-f", "x.yaml", "--impact", "usage/", "--throttle-threshold", value])
    assert exc.value.code == 1  # never 2 ("changes"), 3 ("held") or 4 ("throttles")
    assert "--throttle-threshold" in capsys.readouterr().err


def test_the_plan_in_markdown_is_one_table_row_per_plan_row_with_names_escaped() -> None:
    hostile = Entity.for_user("a|b`c")
    report = Report("cluster prod (kafka:9092)", "2 keys owned", rows=[
        Row(Action.CHANGE, hostile, P, 1048576.0, 2097152.0, ResourceRef("ClientQuota", "team-a", "x")),
        Row(Action.REMOVE, BOB, R, 33.3, None, note="ClientQuota team-a/bob is deleted"),
    ])  # fmt: skip
    text = render_markdown(report)
    assert text.startswith("#### kquota plan for cluster prod (kafka:9092)\n\n**Plan: 0 to add, 1 to change, 1 to")
    lines = [line for line in text.splitlines() if line.startswith(("| change", "| remove"))]
    assert lines == [
        "| change | users/a\\|b\\`c | producer\\_byte\\_rate | 1Mi | 2Mi | ClientQuota team-a/x |",
        "| remove | users/bob | request\\_percentage | 33.3 | - | ClientQuota team-a/bob is deleted |",
    ]
