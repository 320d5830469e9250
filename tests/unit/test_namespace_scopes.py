"""Which namespaces a glob of watched namespaces covers, as the namespaces' watch reports them."""

from __future__ import annotations

from typing import Any

import pytest

from kquota.handlers.scopes import NamespaceScopes, _NamespaceSink, in_scope, kopf_namespaces

pytestmark = pytest.mark.unit


def namespace(uid: str, name: str) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "name": name}}


def test_a_matching_namespace_is_covered_as_soon_as_it_is_created_and_left_once_gone() -> None:
    scopes = NamespaceScopes(None, None, ["team-*,!team-x"])  # type: ignore[arg-type]
    covered: list[list[str | None]] = []
    scopes._ensure = lambda names: covered.append(list(names))  # type: ignore[method-assign]
    sink = _NamespaceSink(scopes)
    sink.listed("Namespace", None, set())
    sink.upsert("Namespace", namespace("u1", "team-a"))
    sink.upsert("Namespace", namespace("u2", "other"))
    sink.upsert("Namespace", namespace("u3", "team-x"))
    sink.upsert("Namespace", namespace("u4", "team-b"))
    # A namespace's own changes (labels, its phase) change nothing.
    sink.upsert("Namespace", namespace("u4", "team-b"))
    sink.delete("Namespace", namespace("u1", "team-a"))
    # A new list (after an expired watch) drops what it lacks.
    sink.listed("Namespace", None, {"u2", "u3"})
    assert covered == [[], ["team-a"], ["team-a"], ["team-a"], ["team-a", "team-b"], ["team-b"], []]


def test_kopf_is_always_given_the_operators_own_namespace_when_scoped() -> None:
    # Kopf watches the cluster-scoped KafkaClusters once per existing watched namespace: never none.
    assert kopf_namespaces(["team-*"], "kquota-system") == ["team-*", "kquota-system"]
    assert kopf_namespaces(["a", "kquota-system"], "kquota-system") == ["a", "kquota-system"]
    # Unscoped: Kopf watches cluster-wide, nothing is added.
    assert kopf_namespaces([], "kquota-system") == []


@pytest.mark.parametrize(
    ("namespace", "patterns", "served"),
    [
        ("team-a", ["team-*"], True),
        ("kquota-system", ["team-*"], False),
        ("team-x", ["team-*, !team-x"], False),
        ("anything", [], True),
        (None, ["team-*"], False),
    ],
)
def test_quota_handlers_serve_only_the_watched_namespaces(
    namespace: str | None, patterns: list[str], served: bool
) -> None:
    assert in_scope(namespace, patterns) is served
