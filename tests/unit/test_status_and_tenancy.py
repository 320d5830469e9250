"""Status rendering (conditions, transitions, kstatus) and namespace grants."""

from __future__ import annotations

import time

import pytest

from kquota.domain.entities import Entity
from kquota.domain.status import Outcome, Reason, needs_write, render_status
from kquota.domain.tenancy import Grant, denied, glob_match

T0 = "2026-01-01T00:00:00Z"
T1 = "2026-01-01T00:05:00Z"


def conds(status: dict[str, object]) -> dict[str, dict[str, object]]:
    return {c["type"]: c for c in status["conditions"]}  # type: ignore[index, union-attr]


class TestStatus:
    def test_applied_outcome_is_ready_with_values(self) -> None:
        st = render_status(
            None, 3, Outcome(Reason.APPLIED, "ok", {"producer_byte_rate": 10.0}, True), "users/a", "c1", T0
        )
        c = conds(st)
        assert c["Ready"]["status"] == "True" and c["Ready"]["reason"] == "Applied"
        assert c["Applied"]["status"] == "True"
        assert "Stalled" not in c and "Reconciling" not in c
        assert st["observedGeneration"] == 3
        assert st["applied"] == {"cluster": "c1", "values": {"producer_byte_rate": 10.0}, "lastAppliedTime": T0}

    def test_transition_time_moves_only_when_status_flips(self) -> None:
        first = render_status(None, 1, Outcome(Reason.PENDING, "wait"), "users/a", "c", T0)
        still = render_status(first, 1, Outcome(Reason.KAFKA_UNAVAILABLE, "down"), "users/a", "c", T1)
        assert conds(first)["Ready"]["status"] == "Unknown"
        assert conds(still)["Ready"]["status"] == "False"
        assert conds(still)["Ready"]["lastTransitionTime"] == T1
        again = render_status(still, 1, Outcome(Reason.REJECTED, "bad"), "users/a", "c", "2026-01-02T00:00:00Z")
        assert conds(again)["Ready"]["lastTransitionTime"] == T1, "False -> False keeps the time"

    def test_same_outcome_renders_identically_so_no_write_is_needed(self) -> None:
        out = Outcome(Reason.APPLIED, "ok", {"consumer_byte_rate": 5.0}, True)
        first = render_status(None, 2, out, "clients/x", "c", T0)
        second = render_status(first, 2, out, "clients/x", "c", T1)
        assert second == first
        assert not needs_write(first, second)

    def test_new_generation_needs_a_write(self) -> None:
        out = Outcome(Reason.APPLIED, "ok", {"consumer_byte_rate": 5.0}, True)
        first = render_status(None, 2, out, "clients/x", "c", T0)
        assert needs_write(first, render_status(first, 3, out, "clients/x", "c", T1))

    @pytest.mark.parametrize(
        "reason", [Reason.CONFLICT, Reason.NOT_PERMITTED, Reason.PROTECTED, Reason.INVALID_SPEC, Reason.REJECTED]
    )
    def test_failures_only_the_user_can_fix_are_stalled(self, reason: Reason) -> None:
        c = conds(render_status(None, 1, Outcome(reason, "why"), "users/a", "c", T0))
        assert c["Stalled"]["status"] == "True" and c["Ready"]["status"] == "False"
        assert "Reconciling" not in c

    @pytest.mark.parametrize("reason", [Reason.PENDING, Reason.KAFKA_UNAVAILABLE, Reason.CLUSTER_NOT_READY])
    def test_transient_states_are_reconciling(self, reason: Reason) -> None:
        c = conds(render_status(None, 1, Outcome(reason, "why"), "users/a", "c", T0))
        assert c["Reconciling"]["status"] == "True"
        assert "Stalled" not in c

    def test_last_applied_time_kept_while_values_unchanged(self) -> None:
        out = Outcome(Reason.APPLIED, "ok", {"producer_byte_rate": 1.0}, True)
        first = render_status(None, 1, out, "users/a", "c", T0)
        later = render_status(first, 2, out, "users/a", "c", T1)
        assert later["applied"]["lastAppliedTime"] == T0
        changed = render_status(
            later, 3, Outcome(Reason.APPLIED, "ok", {"producer_byte_rate": 2.0}, True), "users/a", "c", T1
        )
        assert changed["applied"]["lastAppliedTime"] == T1


TEAM_A = Grant(frozenset({"team-a"}), users=("team-a-*",), client_ids=("a-*",), ips=("10.1.0.0/16",))
ADMIN = Grant(frozenset({"platform"}), users=("*",), client_ids=("*",), ips=("0.0.0.0/0",), allow_defaults=True)


class TestTenancy:
    @pytest.mark.parametrize(
        ("ns", "entity", "allowed"),
        [
            ("team-a", Entity.for_user("team-a-orders"), True),
            ("team-a", Entity.for_user("team-b-orders"), False),
            ("team-a", Entity.for_client("a-loader"), True),
            ("team-a", Entity.for_client("b-loader"), False),
            ("team-a", Entity.for_pair("team-a-x", "anything"), True),
            ("team-a", Entity.for_pair("team-b-x", "a-loader"), False),
            ("team-a", Entity.for_user(None), False),
            ("team-a", Entity.for_pair(None, "a-loader"), False),
            ("team-a", Entity.for_ip("10.1.2.3"), True),
            ("team-a", Entity.for_ip("10.2.0.1"), False),
            ("team-a", Entity.for_ip(None), False),
            ("platform", Entity.for_user(None), True),
            ("platform", Entity.for_ip(None), True),
            ("team-c", Entity.for_user("team-a-orders"), False),
        ],
        ids=[
            "own user pattern",
            "other team's user",
            "own client pattern",
            "other client",
            "own user's pair",
            "other user with own client id",
            "default user without allowDefaults",
            "default user pair without allowDefaults",
            "ip in range",
            "ip outside range",
            "default ip",
            "defaults granted",
            "default ip granted",
            "namespace without grant",
        ],
    )
    def test_grants(self, ns: str, entity: Entity, allowed: bool) -> None:
        assert (denied(ns, [entity], [TEAM_A, ADMIN]) is None) is allowed

    def test_no_tenancy_section_allows_everything(self) -> None:
        assert denied("anywhere", [Entity.for_user(None)], None) is None

    def test_empty_grant_list_denies_everything(self) -> None:
        assert denied("team-a", [Entity.for_user("x")], ()) is not None

    def test_message_names_what_is_missing(self) -> None:
        msg = denied("team-a", [Entity.for_user("team-b-orders")], [TEAM_A])
        assert msg is not None and "users/team-b-orders" in msg and "team-a" in msg
        assert "no quota grant" in (denied("team-z", [Entity.for_user("x")], [TEAM_A]) or "")

    def test_patterns_are_case_sensitive_like_kafka_principals(self) -> None:
        assert denied("team-a", [Entity.for_user("TEAM-A-x")], [TEAM_A]) is not None


class TestGrantPatterns:
    """Only '*' and '?' are special in grant patterns (as the CRD says); everything else is itself."""

    @pytest.mark.parametrize(
        ("pattern", "name", "matches"),
        [
            ("legacy[1]", "legacy[1]", True),
            ("legacy[1]", "legacy1", False),
            ("legacy[12]", "legacy2", False),
            ("team-[a-c]", "team-b", False),
            ("team-[!a]", "team-[!a]", True),
            ("ops]", "ops]", True),
            ("[", "[", True),
            ("a\\b", "a\\b", True),
            ("a\\*", "a\\x", True),
            ("a\\*", "ax", False),
            ("a.b", "a.b", True),
            ("a.b", "axb", False),
            ("a+", "a+", True),
            ("a+", "aa", False),
            ("(x|y)", "x", False),
            ("^a$", "^a$", True),
            ("{a,b}", "{a,b}", True),
            ("team-a-*", "team-a-orders", True),
            ("team-a-*", "team-a-", True),
            ("team-a-*", "team-b-orders", False),
            ("*", "", True),
            ("*", "any thing, at all", True),
            ("a*b", "a\nb", True),
            ("?", "x", True),
            ("?", "", False),
            ("?", "xy", False),
            ("user-?", "user-ä", True),
            ("user-?", "user-😀", True),
            ("ü*", "über", True),
            ("ü*", "uber", False),
            ("CN=*,OU=team-a", "CN=app,OU=team-a", True),
            ("CN=*,OU=team-a", "CN=app,OU=team-b", False),
            ("*a*b", "xaxxb", True),
            ("*a*b", "xbxxa", False),
            ("a*a", "a", False),
            ("a*a", "aa", True),
            ("x?*?y", "x12y", True),
            ("x?*?y", "x1y", False),
            ("Team-*", "team-a", False),
        ],
    )
    def test_only_star_and_question_mark_are_special(self, pattern: str, name: str, matches: bool) -> None:
        assert glob_match(name, pattern) is matches

    def test_a_bracketed_user_is_granted_by_its_literal_name(self) -> None:
        grant = Grant(frozenset({"team-a"}), users=("legacy[1]",), client_ids=("app.[x]",))
        assert denied("team-a", [Entity.for_user("legacy[1]")], [grant]) is None
        assert denied("team-a", [Entity.for_user("legacy1")], [grant]) is not None
        assert denied("team-a", [Entity.for_client("app.[x]")], [grant]) is None
        assert denied("team-a", [Entity.for_client("appx[x]")], [grant]) is not None

    def test_many_stars_against_a_long_name_stay_fast(self) -> None:
        # A naive translation (one greedy .* per star) backtracks polynomially in the
        # name's length to the power of the stars: about 5 s here, on a name a team chose.
        started = time.monotonic()
        assert not glob_match("a" * 600, "*a*a*a*b")
        assert time.monotonic() - started < 0.5
