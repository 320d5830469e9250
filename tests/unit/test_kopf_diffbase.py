"""Kopf keeps no diff base for kquota: nothing copied or written per event, deletions still detected.

Kopf's cause detection is fed what :class:`NoDiffBase` builds and fetches, as
its processing does (``_detect_causes``): an object is resumed on the first
listing, unchanged after (whatever changed in it), and deleting once it has a
deletion timestamp; Kopf then has nothing to store, so no annotation PATCH.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf
import pytest
from kopf._cogs.structs import bodies, diffs, patches
from kopf._core.intents import causes

from kquota.handlers.diffbase import NoDiffBase
from kquota.handlers.operator import FINALIZER

RESOURCE = kopf.Resource("kquota.io", "v1alpha1", "clientquotas")


def quota(rate: int, generation: int = 1, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kquota.io/v1alpha1",
        "kind": "ClientQuota",
        "metadata": {"name": "q", "namespace": "ns", "uid": "u1", "generation": generation, **meta},
        "spec": {"entity": {"user": {"name": "alice"}}, "quota": {"producerByteRate": rate}},
    }


def cause_of(raw: dict[str, Any], *, initial: bool, event: str | None = "MODIFIED") -> causes.Reason:
    storage = NoDiffBase()
    body = bodies.Body(raw)
    old = storage.fetch(body=body)
    new = storage.build(body=body)
    cause = causes.detect_changing_cause(
        finalizer=FINALIZER,
        raw_event={"type": event, "object": raw},  # type: ignore[typeddict-item]
        resource=RESOURCE,
        indices={},  # type: ignore[arg-type]
        logger=logging.getLogger("test"),
        patch=patches.Patch(),
        body=body,
        old=old,
        new=new,
        diff=diffs.diff(old, new),
        memo=kopf.Memo(),
        initial=initial,
    )
    return cause.reason


def test_the_first_listing_resumes_and_every_later_event_is_no_change() -> None:
    """Never CREATE or UPDATE: kquota has no handler for them, and Kopf stores a diff base after each."""
    assert cause_of(quota(1000), initial=True, event=None) is causes.Reason.RESUME
    assert cause_of(quota(2000, generation=2), initial=False) is causes.Reason.NOOP
    assert cause_of(quota(2000, generation=2, labels={"team": "a"}), initial=False) is causes.Reason.NOOP


def test_a_deletion_is_still_a_deletion_and_a_release_still_free() -> None:
    deleting = quota(1000, deletionTimestamp="2026-11-26T00:00:00Z", finalizers=[FINALIZER])
    assert cause_of(deleting, initial=False) is causes.Reason.DELETE
    assert cause_of(deleting, initial=True, event=None) is causes.Reason.DELETE
    released = quota(1000, deletionTimestamp="2026-11-26T00:00:00Z", finalizers=[])
    assert cause_of(released, initial=False) is causes.Reason.FREE
    assert cause_of(quota(1000), initial=False, event="DELETED") is causes.Reason.GONE


@pytest.mark.parametrize(
    "annotations",
    [{}, {"kquota.io/last-handled-configuration": '{"spec":{"quota":{"producerByteRate":1}}}\n'}],
    ids=["none", "left by an earlier kquota"],
)
def test_nothing_is_copied_read_or_written(annotations: dict[str, str]) -> None:
    storage = NoDiffBase()
    body = bodies.Body(quota(1000, annotations=annotations))
    assert storage.fetch(body=body) == storage.build(body=body) == {}
    patch = patches.Patch()
    storage.store(body=body, patch=patch, essence=storage.build(body=body))
    assert not patch, "no annotation PATCH"


def test_the_operator_uses_it() -> None:
    from kquota.handlers import operator as handlers

    settings = kopf.OperatorSettings()
    handlers.configure_kopf(settings)
    assert isinstance(settings.persistence.diffbase_storage, NoDiffBase)
