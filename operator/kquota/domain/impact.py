"""Where a quota change moves each measured client's limit: the pure half of ``kquota plan --impact``.

Usage history (the advisor's input, ``kquota collect`` output) is measured per
quota *bucket*: Kafka tags a client's byte-rate and request-time metrics with
the (user, client-id) of the level that set its quota
(:func:`kquota.domain.resolver.bucket_for`), so a series tagged ``user=alice``
is the sum of every alice connection whose key came from ``users/alice`` or
``users/<default>``. A plan changes the configured entries; :func:`moves` says,
for each measured bucket and key, the limit its connections have now and after
the plan, through the same 8-level precedence as ``kquota explain``, and which
bucket their traffic lands in afterwards, where it may add up with other
buckets' traffic (a removed ``users/alice/clients/app`` sends that pair's
traffic into alice's user bucket).

What the data cannot say is said, never guessed. A bucket tagged by user alone
holds all of that user's clients as one series; when the change would limit
them per client-id (a new ``users/alice/clients/<default>``, or a specific
``users/alice/clients/app``), the share of each client-id is not in the data.
Such a bucket's whole traffic is then an *upper* bound of every part's
(:attr:`Move.bound` ``"at most"``, against the smallest limit its parts get),
and a bucket that part of it may join is known only from *below*
(``"at least"``). Buckets tagged by client-id alone split by user the same way.
Pure: no Spark, no I/O; :mod:`kquota.advisor.impact` runs the numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.resolver import LEVEL_NAMES, bucket_for, client_levels

Quotas = Mapping[Entity, Mapping[QuotaKey, float]]
Bound = Literal["at most", "at least"]

#: A client-id (or user) no configured entity names: resolving it finds what every unnamed one gets.
#: NUL cannot be part of a principal or a client-id Kafka accepts from a client.
_ANY: Final = "\x00any"
_USER_LEVELS: Final = frozenset({3, 6})
_CLIENT_LEVELS: Final = frozenset({7, 8})


@dataclass(frozen=True, slots=True)
class Bucket:
    """Kafka's quota metric tags of one series: the user and the client-id, None where the tag is absent."""

    user: str | None
    client_id: str | None

    def __post_init__(self) -> None:
        if self.user is None and self.client_id is None:
            raise ValueError("a bucket has a user, a client-id or both")

    @property
    def entity(self) -> Entity:
        """The bucket as an entity path names it: ``users/alice``, ``clients/app``, ``users/alice/clients/app``."""
        if self.user is not None and self.client_id is not None:
            return Entity.for_pair(self.user, self.client_id)
        if self.user is not None:
            return Entity.for_user(self.user)
        return Entity.for_client(self.client_id)

    def path(self) -> str:
        return self.entity.path()

    def sort_key(self) -> tuple[str, str, bool, bool]:
        return (self.user or "", self.client_id or "", self.user is None, self.client_id is None)


@dataclass(frozen=True, slots=True)
class Limit:
    """The value one key has for a bucket's connections, and the configured entity it comes from."""

    value: float | None = None
    entity: Entity | None = None
    level: int | None = None

    @property
    def unlimited(self) -> bool:
        return self.value is None

    def describe(self) -> str:
        if self.entity is None or self.level is None:
            return "none (unlimited)"
        return f"{self.entity.path()} (level {self.level}, {LEVEL_NAMES[self.level]})"


@dataclass(frozen=True, slots=True)
class Move:
    """One measured bucket and key: its limit now, its limit after the plan, and where its traffic goes."""

    key: QuotaKey
    measured: Bucket
    before: Limit
    after: Limit
    #: The bucket its connections share a limit in after the plan (the measured one when nothing moves).
    destination: Bucket
    #: None: the destination's traffic is exactly the sum of the buckets moving there. "at most": this
    #: bucket splits (its whole traffic bounds each part's, ``after`` is its parts' smallest limit);
    #: "at least": a split bucket may add traffic the data cannot attribute.
    bound: Bound | None = None
    why: str = ""

    @property
    def changes(self) -> bool:
        """Whether the plan changes anything for this bucket: its limit, or who it shares it with."""
        return self.before != self.after or self.destination != self.measured or self.bound is not None

    @property
    def loosens(self) -> bool:
        """Every connection of the bucket gets a higher limit, or none: the plan can only un-throttle it."""
        if self.before.unlimited:
            return False
        return self.after.unlimited or (self.after.value is not None and self.after.value > (self.before.value or 0))

    @property
    def tightens(self) -> bool:
        """The limit goes down (or appears), or the bucket shares it with traffic it did not share it with."""
        if self.after.unlimited:
            return False
        if self.before.unlimited:
            return True
        return (self.after.value or 0) < (self.before.value or 0)


def _winner(config: Quotas, key: QuotaKey, user: str, client_id: str) -> Limit:
    """The most specific configured entity that sets ``key`` for a (user, client-id) connection."""
    for level, entity in client_levels(user, client_id):
        value = config.get(entity, {}).get(key)
        if value is not None:
            return Limit(float(value), entity, level)
    return Limit()


def _destination(limit: Limit, user: str, client_id: str) -> Bucket:
    """The bucket a connection's traffic is measured (and limited) in, from the level that set its limit."""
    if limit.level is None:
        # No quota: Kafka tags the series with both names (DefaultQuotaCallback).
        return Bucket(user or None, client_id or None)
    tag_user, tag_client = bucket_for(limit.level, user, client_id)
    return Bucket(tag_user or None, tag_client or None)


def _named_clients(config: Quotas, key: QuotaKey, user: str) -> set[str]:
    """Client-ids an entry for ``user``'s connections names specifically (levels 1 and 4) and sets ``key``."""
    return {
        str(e.client_id)
        for e, values in config.items()
        if key in values
        and e.has_user
        and e.has_client_id
        and e.client_id is not None
        and (e.user is None or e.user == user)
    }


def _named_users(config: Quotas, key: QuotaKey, client_id: str) -> set[str]:
    """Users an entry for ``client_id``'s connections names specifically (levels 1, 2, 3) and sets ``key``."""
    return {
        str(e.user)
        for e, values in config.items()
        if key in values
        and e.has_user
        and e.user is not None
        and (not e.has_client_id or e.client_id is None or e.client_id == client_id)
    }


def _pair_move(before: Quotas, after: Quotas, key: QuotaKey, bucket: Bucket) -> Move:
    user, client = str(bucket.user), str(bucket.client_id)
    new = _winner(after, key, user, client)
    return Move(key, bucket, _winner(before, key, user, client), new, _destination(new, user, client))


def _shared_move(before: Quotas, after: Quotas, key: QuotaKey, bucket: Bucket) -> Move:
    """A bucket tagged by one name: the connections of a user (any client-id) or of a client-id (any user)."""
    by_user = bucket.user is not None
    name = str(bucket.user if by_user else bucket.client_id)
    shared = _USER_LEVELS if by_user else _CLIENT_LEVELS

    def limit(config: Quotas, other: str) -> Limit:
        return _winner(config, key, name, other) if by_user else _winner(config, key, other, name)

    # What the connections no entry names get, before and after: the bucket as measured.
    old, new = limit(before, _ANY), limit(after, _ANY)
    if new.level is not None and new.level not in shared:
        # Every connection gets a limit of its own per client-id (per user): the data has them as one.
        kind = "client-id" if by_user else "user"
        return Move(
            key,
            bucket,
            old,
            new,
            bucket,
            "at most",
            f"{new.entity} would limit each {kind} of {bucket.path()} apart; the history has them as one series",
        )
    # Connections the plan names specifically (a new users/alice/clients/app) leave the bucket: their
    # share of its traffic is not in the data. Only names the bucket held before can leave it.
    names = _named_clients(after, key, name) if by_user else _named_users(after, key, name)
    leaving = sorted(n for n in names if limit(before, n).level in shared and limit(after, n).level not in shared)
    if leaving:
        smallest = min((limit(after, n) for n in leaving), key=lambda lim: lim.value or float("inf"))
        part = smallest if (smallest.value or float("inf")) < (new.value or float("inf")) else new
        kind = "client-id" if by_user else "user"
        return Move(
            key,
            bucket,
            old,
            part,
            bucket,
            "at most",
            f"{kind} {', '.join(leaving[:3])}{' ...' if len(leaving) > 3 else ''} would leave {bucket.path()} for a "
            "limit of its own; the history has the bucket as one series",
        )
    return Move(key, bucket, old, new, bucket)


def moves(before: Quotas, after: Quotas, measured: Iterable[tuple[QuotaKey, Bucket]]) -> list[Move]:
    """Per measured (key, bucket), the :class:`Move` the plan makes; only those it changes, sorted.

    ``before`` and ``after`` are every configured quota on the brokers (unmanaged ones too) now and
    once the plan is applied. Buckets whose traffic moves into another are returned with the
    destination, and so is every bucket already there (its traffic adds up with theirs), so the
    caller has the whole of each destination's traffic.
    """
    every = {
        (key, bucket): (
            _pair_move(before, after, key, bucket)
            if bucket.user is not None and bucket.client_id is not None
            else _shared_move(before, after, key, bucket)
        )
        for key, bucket in measured
    }
    changed = {k: m for k, m in every.items() if m.changes}
    # A destination's whole traffic: the buckets moving in and the ones that stay there.
    destinations = {(m.key, m.destination) for m in changed.values()}
    for k, m in every.items():
        if (m.key, m.destination) in destinations:
            changed.setdefault(k, m)
    # A bucket that splits may send part of its traffic to a destination of the same user (client-id):
    # that destination is known only from below.
    splits = [m for m in changed.values() if m.bound == "at most"]
    out = []
    for m in changed.values():
        if m.bound is None and any(_may_receive(s, m.destination) for s in splits if s.key == m.key):
            why = "part of a bucket the plan splits may join it; the history cannot say how much"
            out.append(Move(m.key, m.measured, m.before, m.after, m.destination, "at least", why))
        else:
            out.append(m)
    out.sort(key=lambda m: (list(QuotaKey).index(m.key), m.destination.sort_key(), m.measured.sort_key()))
    return out


def _may_receive(split: Move, destination: Bucket) -> bool:
    """Whether part of ``split``'s traffic may land in ``destination``, conservatively.

    A user's connections may go to pair buckets of that user or, from ``clients/...`` entries, to
    client-id buckets; a client-id's to pair buckets of that client-id or to user buckets.
    """
    if destination == split.measured:
        return False
    if split.measured.user is not None:
        return destination.user == split.measured.user or destination.user is None
    return destination.client_id == split.measured.client_id or destination.client_id is None
