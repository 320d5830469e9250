"""kquota's informer (operator/kquota/k8s/informer.py) against the real API server.

tests/unit/test_informer.py checks its control flow against a stand-in; here the pages, continue
tokens, resourceVersions and watch events are the API server's own: a list of more than two pages
hands every object on exactly once, and the watch that follows delivers a create and a delete made
after it.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping
from typing import Any

import pytest
from harness.kube_apiserver import KubeAPIServer
from harness.operator_proc import apply, apply_many, client_quota

from kquota.k8s.api import Kube, connect
from kquota.k8s.informer import Informer

pytestmark = pytest.mark.e2e

N = 1100
PAGE = 500


class Recorder:
    def __init__(self) -> None:
        self.upserts: Counter[str] = Counter()
        self.names: dict[str, str] = {}
        self.deleted: list[str] = []
        self.ended: list[set[str]] = []
        #: Set on every object handed on (the watch's events included).
        self.changed = asyncio.Event()

    def upsert(self, kind: str, body: Mapping[str, Any]) -> None:
        meta = body["metadata"]
        self.upserts[meta["uid"]] += 1
        self.names[meta["uid"]] = meta["name"]
        self.changed.set()

    def delete(self, kind: str, body: Mapping[str, Any]) -> None:
        self.deleted.append(body["metadata"]["name"])
        self.changed.set()

    def listed(self, kind: str, namespace: str | None, uids: set[str]) -> None:
        self.ended.append(set(uids))


def test_a_paged_list_then_the_watch_on_the_real_api_server(kube: KubeAPIServer, namespace: str) -> None:
    kube.apply_crds()
    quotas = [
        client_quota(namespace, f"q{i}", {"user": {"name": f"inf-{i}"}}, {"producerByteRate": 1000}) for i in range(N)
    ]
    apply_many(kube, quotas)
    sink = Recorder()

    async def go() -> None:
        api = Kube(await connect(str(kube.kubeconfig)))
        inf = Informer(api, "ClientQuota", "clientquotas", namespace, sink, page=PAGE)
        task = asyncio.create_task(inf.run())
        try:
            await asyncio.wait_for(inf.synced.wait(), 120)
            assert inf.lists == 1
            assert len(sink.upserts) == N and set(sink.upserts.values()) == {1}, "each object once"
            assert sorted(sink.names.values()) == sorted(q["metadata"]["name"] for q in quotas)
            assert sink.ended == [set(sink.upserts)], "the list's end names every uid it held"
            await asyncio.to_thread(
                apply, kube, client_quota(namespace, "late", {"user": {"name": "inf-late"}}, {"producerByteRate": 1})
            )
            await asyncio.to_thread(kube.kubectl, "delete", "clientquota", "q0", "-n", namespace)
            async with asyncio.timeout(60):
                while "late" not in sink.names.values() or "q0" not in sink.deleted:
                    sink.changed.clear()
                    await sink.changed.wait()
            assert inf.lists == 1, "the watch carried on from the list, no second list"
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await api.close()

    asyncio.run(go())
