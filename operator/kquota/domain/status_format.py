"""The format of the statuses kquota writes, and the one reader of a status kquota wrote before.

kquota reads its own statuses back: a quota resource's ``applied`` values (what
an unreachable or deleted KafkaCluster's resources keep reporting),
``applied.lastAppliedTime`` and each condition's ``lastTransitionTime`` (kept
while nothing changed), ``observed`` (numbers held back between bounded-rate
writes, the NearLimit hysteresis); and a KafkaCluster's ``conditions``,
``brokers`` and ``clusterId``. Every such read, of any kind, goes through
:func:`read_status`, never through the stored dict directly.

Format versions. Every status kquota writes carries ``status.formatVersion``;
version 1 is what kquota 0.1.0 wrote (it wrote no ``formatVersion``, so a status
without one is version 1; ``tests/data/status-0.1.0/`` keeps statuses of every
kind made by that code, and a test reads them). The reader brings an older
known version up to date through ``MIGRATIONS`` (empty while version 1 is the
only format, as the ledger's), exactly as :mod:`kquota.domain.ledger` does.

A status of a *newer* version (a downgrade, or an older replica beside a newer
one) is never guessed at: the reader returns it as unknown, as if the resource
had no status (:attr:`StatusRead.newer` says which version it was). What the
operator then does, and why it is safe:

* Ownership is not in the status: the ownership ledger is the authority
  (:mod:`kquota.domain.ledger`, which refuses a newer ledger on its own). So a
  pass still acts from the spec and the ledger and the live brokers, as for a
  resource created a moment ago: the values it reports as applied are the ones
  it reads live from the brokers, never the newer status's.
* Where the only source of applied values is the status (the KafkaCluster is
  unreachable, deleted or refused: ``unavailable``, ``ClusterNotFound``,
  ``NotAuthorized``), none are reported: ``applied.values`` is empty and the
  Ready message says the previous status was in a format this operator does not
  read, instead of reporting values of unknown meaning as applied.
* The status is then rewritten whole in this operator's format (every field of
  the newer one this code does not render is removed, so nothing of unknown
  meaning is left under ``formatVersion`` 1), with a ``StatusFormat`` condition
  (reason ``StatusFromNewerOperator``) and a Warning event of the same reason
  saying "status written by a newer kquota (format N); rewritten in format M".
  The condition stays until the status is next rendered from a status this
  code reads (the outcome changes), the event stays as events do. A newer and
  an older operator both running would rewrite each other's status on every
  change: that is not hidden, each rewrite by the older one is an event.
* Timestamps of unknown meaning are not kept: ``lastAppliedTime`` and the
  conditions' ``lastTransitionTime`` start again at the rewrite.

A future version N adds one pure step to ``MIGRATIONS`` (``N - 1`` -> ``N``) and
raises ``FORMAT_VERSION`` to N. A status whose ``formatVersion`` is not an
integer, or older than ``OLDEST_VERSION``, is read as unknown in the same way
(no release wrote it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kquota.domain.stored_status import StoredStatus

#: The format this code writes (and the newest it reads). Version 1: kquota 0.1.0.
FORMAT_VERSION: Final = 1
#: The oldest format this code reads: no release ever wrote an older one.
OLDEST_VERSION: Final = 1
#: The version of a status without ``formatVersion``: kquota 0.1.0 wrote none.
UNVERSIONED: Final = 1

#: ``MIGRATIONS[n]`` turns a version-``n`` status into a version-``n + 1`` one: pure, no
#: I/O, so each step is table-tested. Empty while version 1 is the only format; a
#: version 2 adds ``MIGRATIONS[1]`` and sets ``FORMAT_VERSION = 2``.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}

#: The reason (Warning event, ``StatusFormat`` condition) of a status rewritten from a newer format.
STATUS_FROM_NEWER_OPERATOR: Final = "StatusFromNewerOperator"
#: The condition that says a status of a newer format was rewritten in this one.
STATUS_FORMAT_CONDITION: Final = "StatusFormat"


def status_version(status: Mapping[str, Any]) -> int | None:
    """The format version a stored status says it is in; None when it says something that is no version."""
    version = status.get("formatVersion", UNVERSIONED)
    # bool is an int in Python, and JSON's true is no version.
    if not isinstance(version, int) or isinstance(version, bool):
        return None
    return version


def migrate(status: Mapping[str, Any]) -> dict[str, Any] | None:
    """``status`` in the current format, or None when this code cannot know what it means.

    None for a newer version (never guessed), a version older than
    OLDEST_VERSION or not an integer (no release wrote it), or a missing step.
    """
    version = status_version(status)
    if version is None or version > FORMAT_VERSION or version < OLDEST_VERSION:
        return None
    doc = dict(status)
    while version < FORMAT_VERSION:
        step = MIGRATIONS.get(version)
        if step is None:
            return None
        doc = step(doc)
        if status_version(doc) != version + 1:
            return None
        version += 1
    doc["formatVersion"] = FORMAT_VERSION
    return doc


@dataclass(frozen=True, slots=True)
class StatusRead:
    """A stored status as this code understands it (everything empty when it cannot)."""

    #: The status in the current format (``formatVersion`` included); {} when there was none or it is unknown.
    current: Mapping[str, Any] = field(default_factory=dict)
    #: The stored status is in a format this code does not know: nothing of it was read.
    unreadable: bool = False
    #: The ``formatVersion`` of such a status (a newer one, or something that is no version).
    unknown_version: object = None

    @property
    def applied(self) -> Mapping[str, Any]:
        found = self.current.get("applied")
        return found if isinstance(found, Mapping) else {}

    @property
    def applied_cluster(self) -> str | None:
        cluster = self.applied.get("cluster")
        return cluster if isinstance(cluster, str) else None

    @property
    def applied_values(self) -> dict[str, float]:
        """The quota keys the status reports as applied (empty when unknown)."""
        values = self.applied.get("values")
        if not isinstance(values, Mapping):
            return {}
        return {str(k): v for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}

    @property
    def last_applied_time(self) -> str | None:
        when = self.applied.get("lastAppliedTime")
        return when if isinstance(when, str) else None

    @property
    def _origin(self) -> str:
        """Who wrote an unreadable status: a newer kquota, or (a version no release writes) someone else."""
        version = self.unknown_version
        if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
            return f"written by a newer kquota (format {version})"
        return f"in no format kquota writes (formatVersion {version!r})"

    def note(self) -> str:
        """What the operator did with an unreadable status, in words (for the condition, event and message)."""
        return (
            f"status {self._origin}; rewritten in format "
            f"{FORMAT_VERSION}: this operator reads status formats up to {FORMAT_VERSION} only, so it took "
            "nothing from it (applied values, times); ownership comes from the ledger"
        )

    def unknown_applied(self) -> str:
        """Added to a message that reports applied values from the status: "" unless they were not read."""
        if not self.unreadable:
            return ""
        return (
            f"; what it applied before is unknown to this operator: its status was {self._origin}; "
            f"this operator reads formats up to {FORMAT_VERSION}"
        )


NO_STATUS: Final = StatusRead()


def read_status(status: Mapping[str, Any] | None) -> StatusRead:
    """A quota resource's stored status, from any format this code reads (see the module's docstring)."""
    if not status:
        return NO_STATUS
    # Decoded once: each key read from a StoredStatus would decode it whole again.
    raw = status.decoded() if isinstance(status, StoredStatus) else status
    current = migrate(raw)
    if current is None:
        return StatusRead({}, True, raw.get("formatVersion"))
    return StatusRead(current)
