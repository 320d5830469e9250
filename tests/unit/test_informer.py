"""kquota's informer: pages handed on as they come, watches resumed, an expired watch listed again.

The API server's side is played by a stand-in (the real one is tests/e2e/test_informer.py's):
what is checked here is the informer's own control flow.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from kubernetes.aio.client.exceptions import ApiException

from kquota.k8s import informer as informer_module
from kquota.k8s.informer import Informer

pytestmark = pytest.mark.unit


def obj(uid: str, rv: int) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "name": uid, "namespace": "ns", "resourceVersion": str(rv)}}


class Sink:
    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []

    def upsert(self, kind: str, body: Mapping[str, Any]) -> None:
        self.log.append(("upsert", body["metadata"]["uid"]))

    def delete(self, kind: str, body: Mapping[str, Any]) -> None:
        self.log.append(("delete", body["metadata"]["uid"]))

    def listed(self, kind: str, namespace: str | None, uids: set[str]) -> None:
        self.log.append(("listed", sorted(uids)))


class Api:
    """Lists from ``objects`` in pages; each watch plays the next script of events (or raises its exception)."""

    def __init__(self, objects: list[dict[str, Any]], watches: list[Any]) -> None:
        self.objects, self.watches = objects, watches
        self.requests: list[list[tuple[str, str]]] = []
        self.streams: list[list[tuple[str, str]]] = []
        self.expire_continue_once = False

    async def request(self, method: str, path: str, query: list[tuple[str, str]] | None = None) -> dict[str, Any]:
        q = dict(query or [])
        self.requests.append(list(query or []))
        if "continue" in q and self.expire_continue_once:
            self.expire_continue_once = False
            raise ApiException(status=410, reason="Expired")
        start = int(q.get("continue", "0"))
        limit = int(q["limit"])
        page = self.objects[start : start + limit]
        more = start + limit < len(self.objects)
        meta = {"resourceVersion": "100"} | ({"continue": str(start + limit)} if more else {})
        return {"items": page, "metadata": meta}

    async def stream(
        self, path: str, query: list[tuple[str, str]], read_timeout: float
    ) -> AsyncIterator[dict[str, Any]]:
        self.streams.append(query)
        script = self.watches.pop(0) if self.watches else None
        if callable(script):
            script = script()
        if script is None:
            await asyncio.Event().wait()  # a quiet watch: until cancelled
        if isinstance(script, BaseException):
            raise script
        for event in script:
            yield event


async def run_until(inf: Informer, done: Any, timeout: float = 5.0) -> None:
    task = asyncio.create_task(inf.run())
    try:
        deadline = asyncio.get_running_loop().time() + timeout
        while not done():
            assert asyncio.get_running_loop().time() < deadline, "timed out"
            await asyncio.sleep(0.005)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_pages_are_handed_on_then_the_watch_resumes_from_the_last_version(monkeypatch: pytest.MonkeyPatch) -> None:
    objects = [obj(f"u{i}", i) for i in range(5)]
    api = Api(
        objects,
        [
            [
                {"type": "ADDED", "object": obj("u5", 101)},
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "150"}}},
                {"type": "MODIFIED", "object": obj("u1", 160)},
                {"type": "DELETED", "object": obj("u2", 170)},
            ],
        ],
    )
    sink = Sink()
    inf = Informer(api, "ClientQuota", "clientquotas", None, sink, page=2)  # type: ignore[arg-type]

    async def go() -> None:
        await run_until(inf, lambda: len(api.streams) >= 2)

    asyncio.run(go())
    assert sink.log == [("upsert", f"u{i}") for i in range(5)] + [
        ("listed", [f"u{i}" for i in range(5)]),
        ("upsert", "u5"),
        ("upsert", "u1"),
        ("delete", "u2"),
    ]
    assert [dict(q)["limit"] for q in api.requests] == ["2", "2", "2"], "three pages of two"
    assert dict(api.streams[0])["resourceVersion"] == "100", "the watch starts where the list ended"
    assert dict(api.streams[1])["resourceVersion"] == "170", "and resumes from the last event (bookmarks too)"
    assert dict(api.streams[0])["allowWatchBookmarks"] == "true"
    assert inf.synced.is_set() and inf.lists == 1


@pytest.mark.parametrize(
    "expiry",
    [
        pytest.param([{"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}}], id="event"),
        pytest.param(ApiException(status=410, reason="Gone"), id="status"),
    ],
)
def test_an_expired_watch_lists_again_and_the_new_list_tells_what_went(expiry: Any) -> None:
    objects = [obj("a", 1), obj("b", 2)]

    def expired() -> Any:
        api.objects = [obj("a", 3)]  # b is deleted while the watch is expired
        return expiry

    api = Api(objects, [expired])
    sink = Sink()
    inf = Informer(api, "ClientQuota", "clientquotas", None, sink, page=10)  # type: ignore[arg-type]

    async def go() -> None:
        await run_until(inf, lambda: len([e for e in sink.log if e[0] == "listed"]) >= 2)

    asyncio.run(go())
    assert [e for e in sink.log if e[0] == "listed"] == [("listed", ["a", "b"]), ("listed", ["a"])]
    assert inf.lists == 2


def test_an_expired_continue_token_lists_from_the_start() -> None:
    api = Api([obj(f"u{i}", i) for i in range(4)], [])
    api.expire_continue_once = True
    sink = Sink()
    inf = Informer(api, "ClientQuota", "clientquotas", None, sink, page=2)  # type: ignore[arg-type]

    async def go() -> None:
        await run_until(inf, inf.synced.is_set)

    asyncio.run(go())
    assert [e for e in sink.log if e[0] == "listed"] == [("listed", ["u0", "u1", "u2", "u3"])]


def test_a_failure_is_retried_after_a_backoff_and_never_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(informer_module, "BACKOFF_FIRST", 0.01)
    api = Api(
        [obj("a", 1)], [ConnectionResetError("the API server restarted"), [{"type": "ADDED", "object": obj("b", 5)}]]
    )
    sink = Sink()
    inf = Informer(api, "ClientQuota", "clientquotas", "team-a", sink)  # type: ignore[arg-type]

    async def go() -> None:
        await run_until(inf, lambda: ("upsert", "b") in sink.log)

    asyncio.run(go())
    assert inf.lists == 1, "a broken watch resumes; it does not list again"
    assert dict(api.streams[1])["resourceVersion"] == "100"
    assert inf.path == "/apis/kquota.io/v1alpha1/namespaces/team-a/clientquotas"
