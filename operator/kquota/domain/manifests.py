"""Manifests from live broker quotas: the pure half of ``kquota export``.

``kquota export`` is the migration path from hand-run ``kafka-configs``: it
reads every quota on the brokers and writes one file per entity holding a
ClientQuota (and a ControllerMutationQuota when the entity has a
``controller_mutation_rate``). Applying those files and letting the operator
take the keys over must change nothing on the brokers, so everything here is
exact:

* **Values.** The broker reports every quota as a float64. Byte rates and
  connection rates are whole numbers (the broker refuses fractions) and are
  written as integers, or as a binary quantity when that is exact
  (``10485760`` -> ``10Mi``); ``request_percentage`` and
  ``controller_mutation_rate`` keep their float value, so ``33.3`` survives.
* **Names.** Kafka principals can be anything (``CN=app,OU=x``, ``Ålice``, a
  user literally named ``<default>``), Kubernetes names cannot. A name part is
  the principal itself when it is already a short DNS label, otherwise a slug
  plus 8 hex digits of its SHA-256; the real name is in ``spec.entity``.
  Verbatim parts never end in ``-<8 hex digits>`` (such names are hashed too),
  and parts never contain ``.``, which joins the user and client-id parts, so
  two entities only share a name through a SHA-256 prefix collision, which
  :func:`export_manifests` reports instead of writing one file over another.
* **Validity.** Every manifest is checked with
  :func:`kquota.api.parse_manifest`: a quota the API cannot express (a byte
  rate above 2**53-1, a percentage above the schema's bound, a name longer
  than 1024 characters) is reported as a problem, never written.
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kquota.api.manifest import ManifestError, parse_manifest
from kquota.api.resource import API_VERSION
from kquota.domain.entities import INTEGER_KEYS, MAX_EXACT_INTEGER, Entity, QuotaKey

#: Annotation holding the entity in kquota's path form, for people reading the manifests.
ENTITY_ANNOTATION: Final = "kquota.io/entity"

_DNS_LABEL: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_HASH_SUFFIX: Final = re.compile(r"-[0-9a-f]{8}$")
#: Longest principal used verbatim in a name; longer ones are slugged and hashed.
VERBATIM_MAX: Final = 40
#: Length of the readable part of a hashed name.
SLUG_MAX: Final = 24
_BINARY: Final = (("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10))
#: spec.quota field of each ClientQuota key.
CLIENT_FIELDS: Final = {
    QuotaKey.PRODUCER_BYTE_RATE: "producerByteRate",
    QuotaKey.CONSUMER_BYTE_RATE: "consumerByteRate",
    QuotaKey.REQUEST_PERCENTAGE: "requestPercentage",
    QuotaKey.CONNECTION_CREATION_RATE: "connectionCreationRate",
}


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def name_part(name: str) -> str:
    """A DNS-label-safe stand-in for one principal name (see the module docstring)."""
    if _DNS_LABEL.match(name) and len(name) <= VERBATIM_MAX and not _HASH_SUFFIX.search(name):
        return name
    readable = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:SLUG_MAX].strip("-")
    return f"{readable or 'x'}-{_digest(name)}"


def _ip_part(ip: str) -> str:
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return name_part(ip)
    if isinstance(addr, ipaddress.IPv4Address) and str(addr) == ip:
        # Dotted quads read well with dashes and cannot collide: four groups of at
        # most three digits never look like a hashed part.
        return ip.replace(".", "-")
    return name_part(ip)


def object_name(entity: Entity) -> str:
    """The metadata.name kquota export gives an entity's resources.

    ``user-alice``, ``client-app``, ``user-alice.client-app``, ``default-user``,
    ``default-user.client-app``, ``user-alice.default-client``, ``ip-10-0-0-1``,
    ``default-ip``; principals that are not DNS labels are slugged and hashed
    (``user-cn-app-ou-x-1a2b3c4d``).
    """
    parts: list[str] = []
    if entity.has_user:
        parts.append("default-user" if entity.user is None else f"user-{name_part(entity.user)}")
    if entity.has_client_id:
        parts.append("default-client" if entity.client_id is None else f"client-{name_part(entity.client_id)}")
    if entity.has_ip:
        parts.append("default-ip" if entity.ip is None else f"ip-{_ip_part(entity.ip)}")
    return ".".join(parts)


def quantity(n: int) -> int | str:
    """A byte rate as written in a manifest: a binary quantity when exact (``10Mi``), else the integer."""
    for suffix, shift in _BINARY:
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{suffix}"
    return n


def whole(value: float) -> int | None:
    """``value`` as an int when it is a whole number kquota's API can carry, else None."""
    value = float(value)
    if not math.isfinite(value) or not value.is_integer() or not 1 <= value <= MAX_EXACT_INTEGER:
        return None
    return int(value)


def _number(value: float) -> int | float:
    # 50.0 reads better as 50; the models accept an int where they expect a float.
    return int(value) if value.is_integer() and abs(value) <= MAX_EXACT_INTEGER else value


def _name_spec(name: str | None) -> dict[str, Any]:
    return {"default": True} if name is None else {"name": name}


def entity_spec(entity: Entity) -> dict[str, Any]:
    """The ``spec.entity`` of a resource for ``entity``."""
    out: dict[str, Any] = {}
    if entity.has_user:
        out["user"] = _name_spec(entity.user)
    if entity.has_client_id:
        out["clientId"] = _name_spec(entity.client_id)
    if entity.has_ip:
        out["ip"] = _name_spec(entity.ip)
    return out


def _metadata(name: str, entity: Entity, namespace: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    meta["annotations"] = {ENTITY_ANNOTATION: entity.path()}
    return meta


@dataclass(slots=True)
class ExportedEntity:
    """The manifests written for one entity (empty when every key was a problem)."""

    entity: Entity
    name: str
    manifests: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def entity_manifests(
    entity: Entity,
    values: Mapping[QuotaKey, float],
    namespace: str | None = None,
    cluster_ref: str | None = None,
) -> ExportedEntity:
    """The ClientQuota and/or ControllerMutationQuota that set exactly ``values`` on ``entity``."""
    name = object_name(entity)
    out = ExportedEntity(entity, name)
    quota: dict[str, Any] = {}
    for key in sorted(values, key=list(QuotaKey).index):
        value = values[key]
        if key not in entity.allowed_keys():
            out.problems.append(f"{entity.path()}: {key.value} is not a quota key of this entity type; not exported")
        elif key is QuotaKey.CONTROLLER_MUTATION_RATE:
            continue
        elif key in INTEGER_KEYS:
            n = whole(value)
            if n is None:
                out.problems.append(
                    f"{entity.path()}: {key.value}={value!r} is not a whole number from 1 to {MAX_EXACT_INTEGER}; "
                    "not exported"
                )
            else:
                quota[CLIENT_FIELDS[key]] = n if key is QuotaKey.CONNECTION_CREATION_RATE else quantity(n)
        else:
            quota[CLIENT_FIELDS[key]] = _number(value)
    docs: list[dict[str, Any]] = []
    if quota:
        spec: dict[str, Any] = {"entity": entity_spec(entity), "quota": quota}
        docs.append(_resource("ClientQuota", name, entity, namespace, cluster_ref, spec))
    rate = values.get(QuotaKey.CONTROLLER_MUTATION_RATE)
    if rate is not None and QuotaKey.CONTROLLER_MUTATION_RATE in entity.allowed_keys():
        spec = {"entity": entity_spec(entity), "rate": _number(rate)}
        docs.append(_resource("ControllerMutationQuota", name, entity, namespace, cluster_ref, spec))
    for doc in docs:
        try:
            parse_manifest(doc)
        except ManifestError as exc:
            out.problems.append(f"{entity.path()}: {exc}; not exported")
        else:
            out.manifests.append(doc)
    return out


def _resource(
    kind: str, name: str, entity: Entity, namespace: str | None, cluster_ref: str | None, spec: dict[str, Any]
) -> dict[str, Any]:
    if cluster_ref:
        spec = {"clusterRef": cluster_ref, **spec}
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": _metadata(name, entity, namespace), "spec": spec}


def export_manifests(
    live: Mapping[Entity, Mapping[QuotaKey, float]],
    namespace: str | None = None,
    cluster_ref: str | None = None,
) -> list[ExportedEntity]:
    """Manifests for every entity in ``live``, in a stable order, names checked for uniqueness."""
    out = [entity_manifests(e, live[e], namespace, cluster_ref) for e in sorted(live, key=Entity.sort_key)]
    by_name: dict[str, Entity] = {}
    for item in out:
        other = by_name.setdefault(item.name, item.entity)
        if other != item.entity:
            item.problems.append(
                f"{item.entity.path()}: its name {item.name!r} is already used by {other.path()} "
                "(a hash collision); not exported"
            )
            item.manifests.clear()
    return out
