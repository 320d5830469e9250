"""Which namespaces a glob of watched namespaces covers, as the namespaces' watch reports them, and what a
restart keeps of the resources in them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kquota.api.manifest import QUOTA_KINDS
from kquota.handlers.scopes import NamespaceScopes, _NamespaceSink, in_scope, kopf_namespaces
from kquota.reconcile.claim_index import ClaimIndex

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


def test_nothing_is_derived_from_the_first_list_until_it_is_complete() -> None:
    """The first list's items come one at a time: ``default`` before ``team-a``. Derived from the first few,
    the set would stop the informers of every namespace not yet read."""
    scopes = NamespaceScopes(None, None, ["team-*"])  # type: ignore[arg-type]
    covered: list[list[str | None]] = []
    scopes._ensure = lambda names: covered.append(list(names))  # type: ignore[method-assign]
    sink = _NamespaceSink(scopes)
    sink.upsert("Namespace", namespace("u0", "default"))
    sink.upsert("Namespace", namespace("u1", "team-a"))
    sink.delete("Namespace", namespace("u0", "default"))
    assert covered == []
    sink.upsert("Namespace", namespace("u2", "team-b"))
    sink.listed("Namespace", None, {"u1", "u2"})
    assert covered == [["team-a", "team-b"]]


class ScriptedApi:
    """An API server whose answers come in the order a busy one gave them on a restart: the quota
    resources' lists before the namespaces' informer's list. Watches stay open with nothing to say."""

    def __init__(self, namespaces: list[str], quotas: dict[str, list[dict[str, Any]]]) -> None:
        self.namespaces = namespaces
        self.quotas = quotas
        self.namespace_lists = 0
        self.quota_lists: set[str] = set()
        self.quotas_listed = asyncio.Event()
        self.namespaces_listed = asyncio.Event()

    async def request(self, method: str, path: str, query: list[tuple[str, str]] | None = None) -> dict[str, Any]:
        meta = {"resourceVersion": "7"}
        if path == "/api/v1/namespaces":
            self.namespace_lists += 1
            if self.namespace_lists > 1:
                # The informer's list (the first one is NamespaceScopes.scopes() choosing the informers).
                await self.quotas_listed.wait()
                self.namespaces_listed.set()
            return {"metadata": meta, "items": [namespace(f"uid-{n}", n) for n in sorted(self.namespaces)]}
        self.quota_lists.add(path)
        if len(self.quota_lists) == len(QUOTA_KINDS) * len([n for n in self.namespaces if n.startswith("team-")]):
            self.quotas_listed.set()
        parts = path.split("/")
        ns, plural = parts[-2], parts[-1]
        items = self.quotas.get(ns, []) if plural == "clientquotas" else []
        return {"metadata": meta, "items": items}

    async def stream(self, path: str, query: list[tuple[str, str]], read_timeout: float) -> AsyncIterator[Any]:
        await asyncio.Event().wait()
        yield {}


def client_quota(ns: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kquota.io/v1alpha1",
        "kind": "ClientQuota",
        "metadata": {"name": name, "namespace": ns, "uid": f"{ns}/{name}", "generation": 1, "resourceVersion": "5"},
        "spec": {"clusterRef": "c1", "entity": {"user": {"name": name}}, "quota": {"producerByteRate": 100}},
    }


def test_a_restart_keeps_every_resource_of_a_glob_when_the_namespaces_are_listed_last() -> None:
    """A restart in `make test` beside a CPU hog: 400 ClientQuotas taken for deleted within 130 ms of the start (their
    keys to be removed, the resources never reconciled again), because the namespaces' list arrived after
    the quota lists and its first item, ``default``, stopped every informer of the glob."""

    async def restart() -> tuple[list[str], list[str]]:
        api = ScriptedApi(
            ["default", "kube-system", "team-a", "team-b"],
            {"team-a": [client_quota("team-a", "a1")], "team-b": [client_quota("team-b", "b1")]},
        )
        vanished: list[str] = []
        idx = ClaimIndex("c1", lambda c, u: None, lambda c, u: None, None, lambda r: vanished.append(r.ref.name))
        scopes = NamespaceScopes(api, idx, ["team-*"])  # type: ignore[arg-type]
        await scopes.start()
        try:
            await asyncio.wait_for(api.namespaces_listed.wait(), 5)
            for _ in range(20):  # the namespaces' list decoded and handed on; any informer restarted has listed
                await asyncio.sleep(0.01)
            held = sorted(r.ref.name for r in idx.get("c1", ()))
        finally:
            await scopes.stop()
        return vanished, held

    vanished, held = asyncio.run(restart())
    assert vanished == []
    assert held == ["a1", "b1"]
