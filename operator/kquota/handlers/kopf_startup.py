"""Make Kopf's index pre-population linear in the number of objects.

At start, Kopf gives every object of an indexed resource its own toggle in
one ``ToggleSet`` ("operator indexed") and makes every object's worker wait on
it before running the other handlers (here: the deletion handler). Each toggle
added or dropped calls ``notify_all`` on the set's condition, waking every
waiting worker to re-check the set: with N objects that is N wake-ups N times.
Measured with Kopf 1.45.2 on two cores: 10,000 ClientQuotas took 12 minutes to
pre-populate (80 ms per object, py-spy: all in ``Condition.notify`` and
``call_soon``); 1,000 took a few seconds.

The waiters only care about the set's overall state (all on, or any on), so
waking them is only needed when that state flips. :func:`install` replaces
``ToggleSet.make_toggle`` / ``drop_toggle`` / ``drop_toggles`` with versions
that notify only then. ``Toggle.turn_to`` (used for the few per-resource-kind
toggles) still notifies on every change, as before. Applied only to the Kopf
version it was written against; any other version runs unpatched (slower at
large N, still correct).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import kopf
from kopf._cogs.aiokits import aiotoggles

log = logging.getLogger(__name__)

#: Kopf versions whose ToggleSet internals (``_condition``, ``_toggles``) this was checked against.
CHECKED_VERSIONS = frozenset({"1.45.2"})


async def _make_toggle(
    self: aiotoggles.ToggleSet, __val: bool = False, *, name: str | None = None
) -> aiotoggles.Toggle:
    toggle = aiotoggles.Toggle(__val, name=name, condition=self._condition)
    async with self._condition:
        before = self.is_on()
        self._toggles.add(toggle)
        if self.is_on() != before:
            self._condition.notify_all()
    return toggle


async def _drop_toggle(self: aiotoggles.ToggleSet, toggle: aiotoggles.Toggle) -> None:
    async with self._condition:
        before = self.is_on()
        self._toggles.discard(toggle)
        if self.is_on() != before:
            self._condition.notify_all()


async def _drop_toggles(self: aiotoggles.ToggleSet, toggles: Iterable[aiotoggles.Toggle]) -> None:
    async with self._condition:
        before = self.is_on()
        self._toggles.difference_update(toggles)
        if self.is_on() != before:
            self._condition.notify_all()


def install() -> bool:
    """Patch Kopf's ToggleSet; returns False (and changes nothing) on an unchecked Kopf version."""
    version = getattr(kopf, "__version__", None)
    if version not in CHECKED_VERSIONS:
        log.info("Kopf %s: index pre-population left as it is (patch checked on %s)", version, CHECKED_VERSIONS)
        return False
    aiotoggles.ToggleSet.make_toggle = _make_toggle  # type: ignore[method-assign]
    aiotoggles.ToggleSet.drop_toggle = _drop_toggle  # type: ignore[method-assign]
    aiotoggles.ToggleSet.drop_toggles = _drop_toggles  # type: ignore[method-assign]
    return True
