"""The soak's tenancy grants, and which resources they permit: an oracle written apart from the operator.

A ``tenancy-revoked`` fault sets one of :data:`harness.soak.history.TENANCY_EDITS`
on the KafkaCluster; :func:`grants_for` is its ``spec.tenancy.grants``.
:func:`permitted` decides, from the README's "Multi-tenancy" rules and the
CRD's description alone (not from ``kquota.domain.tenancy``), whether a
resource in a namespace may set quotas for its entity: a grant lists the
namespace and covers the entity (a user by ``users``, a client-id by
``clientIds``, an ip by ``ips`` CIDRs, a default part only with
``allowDefaults``; a pair with a named user needs only the user). No tenancy
at all permits everything; an empty grant list denies everything.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from harness.soak.history import NAMESPACES, TENANCY_EDITS

Grants = list[dict[str, Any]]

#: What the history's entities may be: every user and client-id, its IPs (192.0.2.0/24), defaults.
SUBNET = "192.0.2.0/24"


def _full(namespace: str, **narrowed: Any) -> dict[str, Any]:
    grant: dict[str, Any] = {
        "namespaces": [namespace],
        "users": ["*"],
        "clientIds": ["*"],
        "ips": [SUBNET],
        "allowDefaults": True,
    }
    grant.update(narrowed)
    return {k: v for k, v in grant.items() if v is not None}


def grants_for(edit: str) -> Grants:
    """The KafkaCluster's ``spec.tenancy.grants`` for one of ``TENANCY_EDITS``."""
    a, b = NAMESPACES
    table: dict[str, Grants] = {
        "restored": [_full(a), _full(b)],
        "soak-b-no-defaults": [_full(a), _full(b, allowDefaults=False)],
        "soak-a-no-ips": [_full(a, ips=None), _full(b)],
        # '?' is a glob character: "u?" alone would grant them all, so the users are named.
        "soak-a-users-u2-u3": [_full(a, users=["u2", "u3"]), _full(b)],
        "soak-b-clients-c0-c1-ip-1": [_full(a), _full(b, clientIds=["c0", "c1"], ips=["192.0.2.1/32"])],
        "soak-b-no-grant": [_full(a)],
        "deny-all": [],
    }
    assert set(table) == set(TENANCY_EDITS)
    return table[edit]


def _glob(name: str, pattern: str) -> bool:
    """The CRD's glob: ``*`` any run, ``?`` one character, every other character itself."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, name, re.DOTALL) is not None


def _covers(grant: dict[str, Any], parts: dict[str, str | None]) -> bool:
    if None in parts.values() and not grant.get("allowDefaults", False):
        return False
    if "ip" in parts:
        ip = parts["ip"]
        return ip is None or any(
            ipaddress.ip_address(ip) in ipaddress.ip_network(c, strict=False) for c in grant.get("ips", [])
        )
    user, client = parts.get("user"), parts.get("clientId")
    if user is not None:
        return any(_glob(user, p) for p in grant.get("users", []))
    if client is not None:
        return any(_glob(client, p) for p in grant.get("clientIds", []))
    return True


def permitted(namespace: str, parts: dict[str, str | None], grants: Grants | None) -> bool:
    """Whether a resource in ``namespace`` naming entity ``parts`` (part -> name, None for default) may act."""
    if grants is None:
        return True
    return any(_covers(g, parts) for g in grants if namespace in g["namespaces"] or "*" in g["namespaces"])


def parts_of(obj: dict[str, Any]) -> dict[str, str | None]:
    """A resource's entity as part -> name (None for ``<default>``)."""
    return {p: None if v.get("default") else v["name"] for p, v in obj["spec"]["entity"].items()}
