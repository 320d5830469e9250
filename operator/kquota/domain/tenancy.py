"""Which namespace may set quotas for which principals (the KafkaCluster's grants).

Quota resources live in team namespaces, and anyone who can write a resource in
a namespace could otherwise raise any principal's limit. The cluster admin
grants each namespace principals by pattern; a resource outside its grant
contributes nothing and is reported NotPermitted.

No tenancy section at all (``grants is None``) means single-team mode: every
namespace may manage every principal. Once a tenancy section exists, everything
not granted is denied, so an empty grant list denies everything.

Grant patterns are globs in which only ``*`` (any run of characters, also none)
and ``?`` (exactly one character) are special, as the CRD documents: principals
are arbitrary strings (``CN=app,OU=[ops]``, ``legacy[1]``), so ``fnmatch``'s
``[...]`` character classes would silently grant the wrong names.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kquota.domain.entities import Entity
from kquota.domain.plan import Protection
from kquota.domain.status import Reason


@dataclass(frozen=True, slots=True)
class Grant:
    namespaces: frozenset[str]
    users: tuple[str, ...] = ()
    client_ids: tuple[str, ...] = ()
    ips: tuple[str, ...] = ()
    allow_defaults: bool = False


def _literal(text: str) -> str:
    return "".join("." if c == "?" else re.escape(c) for c in text)


@functools.lru_cache(maxsize=4096)
def glob_regex(pattern: str) -> re.Pattern[str]:
    """The regular expression of a grant pattern: ``*`` any run, ``?`` one character, the rest literal.

    Case-sensitive, as Kafka principals are. Every text between two ``*`` is
    an atomic group matched at its earliest position, which is always a
    correct choice for a glob, so a pattern such as ``*a*a*a*b`` cannot make
    the engine backtrack exponentially on a long name a team chose.
    """
    head, *middle = pattern.split("*")
    if not middle:
        return re.compile(_literal(head), re.DOTALL)
    *inner, tail = middle
    parts = [_literal(head), *(f"(?>.*?{_literal(seg)})" for seg in inner if seg), ".*", _literal(tail)]
    return re.compile("".join(parts), re.DOTALL)


def glob_match(name: str, pattern: str) -> bool:
    """Whether ``name`` matches the grant pattern ``pattern`` as a whole."""
    return glob_regex(pattern).fullmatch(name) is not None


def _match(name: str, patterns: Sequence[str]) -> bool:
    return any(glob_match(name, p) for p in patterns)


def _ip_match(ip: str, allowed: Sequence[str]) -> bool:
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return False
    for item in allowed:
        try:
            if addr in ipaddress.ip_network(item, strict=False):
                return True
        except ValueError:
            continue
    return False


def _covers(grant: Grant, entity: Entity) -> bool:
    if entity.has_default and not grant.allow_defaults:
        return False
    if entity.has_ip:
        return entity.ip is None or _ip_match(entity.ip, grant.ips)
    if entity.has_user and entity.user is not None and not _match(entity.user, grant.users):
        return False
    # A (user, client-id) pair is granted when its user part is; the client-id
    # part narrows within the user's own traffic and raises nobody else's limit.
    if entity.has_client_id and entity.client_id is not None and not entity.has_user:
        return _match(entity.client_id, grant.client_ids)
    if entity.has_user and entity.user is None and entity.has_client_id and entity.client_id is not None:
        return _match(entity.client_id, grant.client_ids)
    return True


def denied(namespace: str, entities: Iterable[Entity], grants: Sequence[Grant] | None) -> str | None:
    """None when permitted, else a message saying what is not granted."""
    if grants is None:
        return None
    mine = [g for g in grants if namespace in g.namespaces or "*" in g.namespaces]
    for entity in entities:
        if not any(_covers(g, entity) for g in mine):
            if not mine:
                return f"namespace {namespace} has no quota grant on this Kafka cluster"
            what = "default entities" if entity.has_default else entity.path()
            return f"namespace {namespace} is not granted {what} on this Kafka cluster"
    return None


def refusal(
    namespace: str, entities: Sequence[Entity], grants: Sequence[Grant] | None, protection: Protection
) -> tuple[Reason, str] | None:
    """Why kquota will not act on a resource in ``namespace`` naming ``entities``; None when it will.

    The one gate for both the operator (which reports it in status) and
    ``kquota plan`` (which prints it), so a plan never promises what the
    operator would refuse.
    """
    why = denied(namespace, entities, grants)
    if why is not None:
        return Reason.NOT_PERMITTED, why
    if protection.strimzi is not None:
        for e in entities:
            owner = protection.strimzi.owner(e)
            if owner is not None:
                return Reason.OWNED_BY_STRIMZI, f"{e.path()}: {owner}; kquota sets nothing for it"
    guarded = [e for e in entities if protection.covers(e)]
    if guarded:
        return Reason.PROTECTED, f"{guarded[0].path()} names a protected principal; kquota never changes it"
    return None
