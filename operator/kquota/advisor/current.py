"""What the advice changes against the quotas applied now (``kquota advise --current``).

The applied quotas come as ClientQuota manifests: the ones in Git, or
``kquota export`` of a live cluster. Each (entity, key) of either side gets one
row: ``add`` (recommended, not set now), ``raise``, ``lower``, ``keep`` (the
same value) or ``drop`` (set now, not recommended: applying the advice with
pruning removes it, and the entity falls back to a default). Pure Python, no
Spark: the comparison is over a few thousand rows at most.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from kquota.api.clientquota import ClientQuota
from kquota.api.manifest import ManifestError, parse_manifest
from kquota.api.quantity import byte_rate

#: (kind, user, client_id, is_default) as the recommendations name an entity.
EntityKey = tuple[str, str | None, str | None, bool]

#: The advisor's resources and the ClientQuota fields holding them.
_FIELDS: Final = {"produce": "producer_byte_rate", "fetch": "consumer_byte_rate", "request": "request_percentage"}
ACTIONS: Final = ("add", "raise", "lower", "drop", "keep")


@dataclass
class Current:
    """The applied quotas: entity -> {resource: value}, and what was read to get them."""

    source: str
    quotas: dict[EntityKey, dict[str, float]] = field(default_factory=dict)
    manifests: int = 0
    #: Documents left out and why (another kind, an ip entity, a mixed default entity).
    skipped: list[str] = field(default_factory=list)


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml", ".json") and p.is_file())
    if path.is_file():
        return [path]
    raise FileNotFoundError(f"--current {path}: no such file or directory")


def _documents(path: Path) -> Iterator[tuple[str, Any]]:
    for file in _files(path):
        try:
            docs = list(yaml.safe_load_all(file.read_text()))
        except yaml.YAMLError as exc:
            raise ValueError(f"--current {file}: not YAML: {exc}") from exc
        for i, doc in enumerate(docs):
            where = f"{file}" if len(docs) == 1 else f"{file} (document {i + 1})"
            if isinstance(doc, Mapping) and doc.get("kind") == "List" and isinstance(doc.get("items"), list):
                # `kubectl get -o yaml` output.
                for j, item in enumerate(doc["items"]):
                    yield f"{where} item {j + 1}", item
            elif doc is not None:
                yield where, doc


def _key(quota: ClientQuota) -> EntityKey | str:
    """The entity as the recommendations name it, or why the advisor has nothing to compare it with."""
    entity = quota.spec.entity
    if entity.ip is not None:
        return "an ip entity (the advisor recommends no connection rates)"
    user, client = entity.user, entity.client_id
    if user is not None and client is not None:
        if user.default and client.default:
            return ("user+client-id", None, None, True)
        if user.default or client.default:
            return "a (user, client-id) entity with one default part (the advisor never recommends one)"
        return ("user+client-id", user.name, client.name, False)
    if user is not None:
        return ("user", None, None, True) if user.default else ("user", user.name, None, False)
    assert client is not None  # the model requires a part
    return ("client-id", None, None, True) if client.default else ("client-id", None, client.name, False)


def read_current(path: str) -> Current:
    """The ClientQuotas under ``path`` (a file or a directory of YAML/JSON manifests).

    Raises ``ValueError`` naming the file and document for a ClientQuota that is
    not valid, or two that set the same key of the same entity differently.
    """
    out = Current(source=path)
    origin: dict[tuple[EntityKey, str], str] = {}
    for where, doc in _documents(Path(path)):
        if not isinstance(doc, Mapping) or doc.get("kind") != "ClientQuota":
            kind = doc.get("kind") if isinstance(doc, Mapping) else type(doc).__name__
            out.skipped.append(f"{where}: a {kind}, not a ClientQuota")
            continue
        try:
            resource = parse_manifest(doc)
        except ManifestError as exc:
            raise ValueError(f"--current {where}: not a valid ClientQuota: {'; '.join(exc.problems)}") from exc
        assert isinstance(resource, ClientQuota)
        key = _key(resource)
        if isinstance(key, str):
            out.skipped.append(f"{where}: {key}")
            continue
        out.manifests += 1
        limits = resource.spec.quota
        for name, attr in _FIELDS.items():
            raw = getattr(limits, attr)
            if raw is None:
                continue
            value = float(raw) if name == "request" else float(byte_rate(raw))
            values = out.quotas.setdefault(key, {})
            if name in values and values[name] != value:
                raise ValueError(
                    f"--current {where}: sets {name} of {_display(key)} to {value:g}, "
                    f"but {origin[(key, name)]} sets it to {values[name]:g}"
                )
            values[name] = value
            origin[(key, name)] = where
    return out


def entity_display(kind: str, user: str | None, client_id: str | None, is_default: bool) -> str:
    """The entity as kafka-configs shows it: users/alice, clients/<default>, users/alice/clients/app."""
    u = "<default>" if is_default else user
    c = "<default>" if is_default else client_id
    if kind == "user":
        return f"users/{u}"
    if kind == "client-id":
        return f"clients/{c}"
    return f"users/{u}/clients/{c}"


def _display(key: EntityKey) -> str:
    return entity_display(*key)


def changes(recommendations: Sequence[Mapping[str, Any]], current: Current) -> dict[str, Any]:
    """One row per (entity, resource) on either side, the counts per action, and the source."""
    recommended: dict[tuple[EntityKey, str], float] = {}
    for r in recommendations:
        key: EntityKey = (r["kind"], r["user"], r["client_id"], bool(r["is_default"]))
        if r["quota"] is not None:
            recommended[(key, r["resource"])] = float(r["quota"])
    applied = {(k, res): v for k, values in current.quotas.items() for res, v in values.items()}
    rows = []
    for key, resource in sorted(set(recommended) | set(applied), key=lambda kr: (not kr[0][3], kr[1], _display(kr[0]))):
        now, new = applied.get((key, resource)), recommended.get((key, resource))
        if now is None:
            action = "add"
        elif new is None:
            action = "drop"
        elif new > now:
            action = "raise"
        elif new < now:
            action = "lower"
        else:
            action = "keep"
        rows.append(
            {
                "entity": _display(key),
                "is_default": key[3],
                "resource": resource,
                "current": now,
                "recommended": new,
                "action": action,
                "change_percent": None if now is None or new is None else round((new - now) / now * 100, 1),
            }
        )
    counts = {a: sum(1 for r in rows if r["action"] == a) for a in ACTIONS}
    return {
        "source": current.source,
        "manifests": current.manifests,
        "skipped": current.skipped,
        "counts": counts,
        "rows": rows,
    }


def summary_line(report_changes: Mapping[str, Any]) -> str:
    """``Against the quotas applied now (PATH): 2 added, 1 raised, ...`` (actions with no row left out)."""
    counts = report_changes["counts"]
    words = {"add": "added", "raise": "raised", "lower": "lowered", "drop": "dropped", "keep": "unchanged"}
    parts = [f"{counts[a]} {words[a]}" for a in ACTIONS if counts.get(a)]
    text = ", ".join(parts) if parts else "nothing to compare"
    source, manifests = report_changes["source"], report_changes["manifests"]
    return f"Against the quotas applied now ({source}, {manifests} ClientQuotas): {text}."
