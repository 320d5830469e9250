"""Manifests from files, directories or stdin, validated and turned into quota claims.

Shared by ``kquota validate``, ``plan`` and ``explain``. A file may hold
several YAML (or JSON) documents and ``kind: List`` objects, as ``kubectl
apply -f`` accepts. Documents of other API groups (a Deployment next to the
quotas) are skipped, not errors; anything in the ``kquota.io`` group or of a
kquota kind goes through :func:`kquota.api.parse_manifest`, so a misspelt
apiVersion is reported with the API server's message rather than ignored.

Quota manifests become :class:`kquota.domain.claims.ResourceClaim` records,
the operator's own, without importing the Kubernetes client, so offline
commands start fast.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import yaml

from kquota.api.clientquota import ClientQuota
from kquota.api.controllermutationquota import ControllerMutationQuota
from kquota.api.manifest import KINDS, ManifestError, parse_manifest
from kquota.api.resource import GROUP, Resource
from kquota.api.topicquota import TopicQuota
from kquota.domain.claims import ResourceClaim, claim_of
from kquota.domain.plan import ResourceRef

SUFFIXES: Final = (".yaml", ".yml", ".json")

#: The cluster of a manifest without clusterRef while the operator's default cluster is not known yet
#: (it is read from the cluster, after the manifests): never a valid KafkaCluster name.
UNRESOLVED_DEFAULT: Final = "<the operator's default cluster>"


class SourceError(Exception):
    """A path that cannot be read or a document that is not YAML."""


@dataclass(frozen=True, slots=True)
class Document:
    """One YAML document and where it came from (``file.yaml``, ``file.yaml#2`` for the second)."""

    origin: str
    body: Any


def _files(path: Path, recursive: bool) -> list[Path]:
    if path.is_dir():
        found = path.rglob("*") if recursive else path.iterdir()
        return sorted(p for p in found if p.is_file() and p.suffix.lower() in SUFFIXES)
    if path.exists():
        return [path]
    raise SourceError(f"{path}: no such file or directory")


def _documents(text: str, origin: str) -> Iterator[Document]:
    try:
        bodies = [b for b in yaml.safe_load_all(text) if b is not None]
    except yaml.YAMLError as exc:
        raise SourceError(f"{origin}: not valid YAML: {exc}") from None
    many = len(bodies) > 1
    for i, body in enumerate(bodies, 1):
        where = f"{origin}#{i}" if many else origin
        if isinstance(body, Mapping) and body.get("kind") == "List" and isinstance(body.get("items"), list):
            for j, item in enumerate(body["items"], 1):
                yield Document(f"{where}[{j}]", item)
        else:
            yield Document(where, body)


def read_documents(paths: Iterable[str], recursive: bool = False) -> list[Document]:
    """Every document under ``paths`` (``-`` is stdin), in a stable order."""
    out: list[Document] = []
    for raw in paths:
        if raw == "-":
            out.extend(_documents(sys.stdin.read(), "<stdin>"))
            continue
        for file in _files(Path(raw), recursive):
            try:
                text = file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise SourceError(f"{file}: cannot read: {exc}") from None
            out.extend(_documents(text, str(file)))
    return out


def is_kquota(body: Any) -> bool:
    """Whether a document is meant as a kquota resource (and so must be valid)."""
    if not isinstance(body, Mapping):
        return True  # not a Kubernetes object at all: parse_manifest says so
    api_version = body.get("apiVersion")
    group = api_version.split("/", 1)[0] if isinstance(api_version, str) and "/" in api_version else ""
    return group == GROUP or body.get("kind") in KINDS or not isinstance(api_version, str)


@dataclass(frozen=True, slots=True)
class Checked:
    """A kquota document after validation: the resource, or the admission-style error."""

    doc: Document
    resource: Resource | None
    error: ManifestError | None


def key_of(resource: Resource, default_namespace: str) -> tuple[str, str, str]:
    scoped = resource.crd.scope == "Namespaced"
    return (
        resource.crd.kind,
        (resource.metadata.namespace or default_namespace) if scoped else "",
        resource.metadata.name or "",
    )


def validate_documents(docs: Iterable[Document], default_namespace: str = "default") -> tuple[list[Checked], int]:
    """Validate every kquota document; returns the results and how many documents were skipped.

    A second object with the same kind, namespace and name is an error: applying
    both would silently keep only the last.
    """
    checked: list[Checked] = []
    skipped = 0
    seen: dict[tuple[str, str, str], str] = {}
    for doc in docs:
        if not is_kquota(doc.body):
            skipped += 1
            continue
        try:
            resource = parse_manifest(doc.body)
        except ManifestError as exc:
            checked.append(Checked(doc, None, exc))
            continue
        key = key_of(resource, default_namespace)
        first = seen.setdefault(key, doc.origin)
        if first != doc.origin:
            name = resource.metadata.name or ""
            problem = f"metadata.name: Duplicate value: {name!r} is also defined in {first}"
            checked.append(Checked(doc, None, ManifestError(resource.crd.kind, name, [problem])))
            continue
        checked.append(Checked(doc, resource, None))
    return checked, skipped


def manifest_claim(
    resource: Resource, default_namespace: str, default_cluster: str, created: str
) -> ResourceClaim | None:
    """The claim of a parsed manifest; None for kinds that are not quotas (KafkaCluster)."""
    if not isinstance(resource, ClientQuota | ControllerMutationQuota | TopicQuota):
        return None
    ref = ResourceRef(resource.crd.kind, resource.metadata.namespace or default_namespace, resource.metadata.name or "")
    return claim_of(resource, ref, created, resource.spec.cluster_ref or default_cluster)


def load_claimants(
    paths: Iterable[str], recursive: bool, namespace: str, default_cluster: str, created: str
) -> tuple[list[ResourceClaim], list[Checked]]:
    """The claims of the manifests under ``paths``, and the invalid documents (raises SourceError)."""
    checked, _ = validate_documents(read_documents(paths, recursive), namespace)
    invalid = [c for c in checked if c.error is not None]
    claims = [
        found
        for c in checked
        if c.resource is not None
        and (found := manifest_claim(c.resource, namespace, default_cluster, created)) is not None
    ]
    return claims, invalid


def bind_default_cluster(claimants: Iterable[ResourceClaim], default_cluster: str | None) -> list[ResourceClaim]:
    """Manifests loaded before the default cluster was known, now targeting it (None: still unknown)."""
    if default_cluster is None:
        return list(claimants)
    return [replace(c, cluster=default_cluster) if c.cluster == UNRESOLVED_DEFAULT else c for c in claimants]
