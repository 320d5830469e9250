"""Which namespaces a glob of watched namespaces covers, as the namespaces' watch reports them."""

from __future__ import annotations

from typing import Any

import pytest

from kquota.handlers.scopes import NamespaceScopes, _NamespaceSink

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
