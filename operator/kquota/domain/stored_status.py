"""A resource's status as kquota keeps it between passes: compact JSON and a digest.

Every :class:`kquota.domain.claims.ResourceClaim` holds the status last read
back, and the reconciler holds what it last wrote; kept decoded, both were the
largest thing per resource at 10,000 resources. Encoded alike
(:meth:`StoredStatus.written`), a status read back as written is one object
held by both. :class:`StoredStatus` keeps the
JSON only, compares by digest (the drift check), and decodes a status only to
render a change.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any


def _as_read_back(value: Any) -> Any:
    """``value`` as the API server hands it back: whole-number floats as integers (1000.0 as 1000)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, Mapping):
        return {k: _as_read_back(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_read_back(v) for v in value]
    return value


def _frozen(value: Any) -> Any:
    """A hashable value equal wherever ``value`` is (maps as frozensets of items, lists as tuples)."""
    if isinstance(value, Mapping):
        return frozenset((k, _frozen(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


class StoredStatus(Mapping[str, Any]):
    """A resource's status kept compact: its JSON and a digest, read whole only to render a change.

    Decoded, a status is a few KB of dicts and strings per resource for as long as the
    operator runs (at 10,000 resources the largest thing kquota kept per resource, and kept
    twice: as read back and as written). Equal statuses have equal digests (Python's hash
    agrees with ``==``, 1000 and 1000.0 alike), so comparing a stored status with what kquota
    wrote compares two integers; each is computed once, when the drift check first asks.
    """

    __slots__ = ("_digest", "_json")

    def __init__(self, encoded: bytes) -> None:
        self._json = encoded
        self._digest: int | None = None

    @classmethod
    def of(cls, status: Mapping[str, Any] | None, same: StoredStatus | None = None) -> StoredStatus:
        """``status`` kept compact; ``same`` itself when it holds exactly these bytes (one copy, not two)."""
        if not status:
            return EMPTY_STATUS
        if isinstance(status, StoredStatus):
            return status
        encoded = json.dumps(status, separators=(",", ":")).encode()
        if same is not None and same._json == encoded:
            return same
        return cls(encoded)

    @classmethod
    def written(cls, status: Mapping[str, Any]) -> StoredStatus:
        """A status kquota writes, encoded as its watch event will read back when the API server stored it.

        The API server returns maps with sorted keys and whole numbers without a
        fraction, so encoded this way a status read back unchanged has the same
        bytes, and :meth:`of` keeps one copy of the two (each about 0.5 KB).
        Equal either way: the digest counts 1000 and 1000.0 alike.
        """
        if not status:
            return EMPTY_STATUS
        return cls(json.dumps(_as_read_back(status), separators=(",", ":"), sort_keys=True).encode())

    @property
    def digest(self) -> int:
        """Equal for equal statuses; computed when first asked (by the drift check), then kept."""
        if self._digest is None:
            self._digest = hash(_frozen(self.decoded()))
        return self._digest

    def mentions(self, fragment: bytes) -> bool:
        """Whether the compact JSON (no spaces after ``:`` or ``,``) holds ``fragment``, decoding nothing."""
        return fragment in self._json

    def decoded(self) -> dict[str, Any]:
        """The status as a new dict of its own."""
        found: dict[str, Any] = json.loads(self._json)
        return found

    def __getitem__(self, key: str) -> Any:
        return self.decoded()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.decoded())

    def __len__(self) -> int:
        return len(self.decoded())

    def __bool__(self) -> bool:
        return self._json != b"{}"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StoredStatus):
            return self.digest == other.digest
        return isinstance(other, Mapping) and self.decoded() == dict(other)

    def __hash__(self) -> int:
        return self.digest

    def __repr__(self) -> str:
        return f"StoredStatus({self._json.decode()})"


EMPTY_STATUS = StoredStatus(b"{}")
