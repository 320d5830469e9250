"""Offline admission: a manifest dict in, a typed resource or the API server's complaints out.

:func:`parse_manifest` is what ``kquota validate`` and the operator's own
parsing use. It raises :class:`ManifestError`, whose problems are phrased like
the API server's (``spec.quota.producerByteRate: Invalid value: "string":
must be a whole number ...``) and carry the same CEL messages, so one
fragment of text identifies a mistake both offline and at admission.
:func:`validate_update` adds the checks that need the stored object
(``oldSelf``), such as the immutable ``spec.entity``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from kquota.api.cel import RULE_ERROR, Cel
from kquota.api.clientquota import ClientQuota
from kquota.api.controllermutationquota import ControllerMutationQuota
from kquota.api.kafkacluster import KafkaCluster
from kquota.api.resource import API_VERSION, Resource
from kquota.api.topicquota import TopicQuota

#: Every kquota kind and its model: the one kind table (the CRDs, their plurals and the quota kinds derive from it).
KINDS: Final[dict[str, type[Resource]]] = {
    cls.crd.kind: cls for cls in (KafkaCluster, ClientQuota, TopicQuota, ControllerMutationQuota)
}
#: The quota kinds the operator reconciles (every kind but KafkaCluster) -> their plural, sorted by kind.
QUOTA_KINDS: Final[dict[str, str]] = {
    kind: cls.crd.plural for kind, cls in sorted(KINDS.items()) if cls is not KafkaCluster
}


class ManifestError(ValueError):
    """A manifest the API server would reject; ``problems`` lists each reason, field first."""

    def __init__(self, kind: str, name: str, problems: list[str]) -> None:
        self.kind = kind
        self.name = name
        self.problems = problems
        body = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
        super().__init__(f'{kind or "object"} "{name}" is invalid: {body}')


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if value is None:
        return "null"
    return "object"


def _go_value(value: Any) -> str:
    """A number as the API server prints it in messages: integral values without a fraction."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _shown(value: Any) -> str:
    """How the API server shows a rejected value next to a CEL message: scalars only."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False) + ": "
    if isinstance(value, bool):
        return f"{str(value).lower()}: "
    if isinstance(value, int | float):
        return f"{_go_value(value)}: "
    return ""


_TYPE_NAMES: Final = {
    "int_type": "integer",
    "float_type": "number",
    "string_type": "string",
    "bool_type": "boolean",
    "list_type": "array",
    "model_type": "object",
    "dict_type": "object",
    "model_attributes_type": "object",
    "kquota_type": "integer,string",
}


def _messages(err: ErrorDetails) -> list[str]:
    """One pydantic error as the API server's problems (a failed-rules error may hold several)."""
    if err["type"] != RULE_ERROR:
        return [_message(err)]
    path = _path(err["loc"])
    rules: list[tuple[str, str]] = (err.get("ctx") or {}).get("rules", [("", err["msg"])])
    out = []
    for field_path, message in rules:
        where = path + field_path if field_path else path
        shown = "" if field_path else _shown(err["input"])
        out.append(f"{where}: Invalid value: {shown}{message}")
    return out


def _message(err: ErrorDetails) -> str:
    """One pydantic error, phrased as the API server phrases the same mistake."""
    loc = err["loc"]
    path = _path(loc)
    kind = err["type"]
    ctx: dict[str, Any] = dict(err.get("ctx") or {})
    value = err["input"]
    body = f"{path} in body"
    if kind == "missing":
        return f"{path}: Required value"
    if kind == "extra_forbidden":
        return f'unknown field "{path}"'
    if kind in _TYPE_NAMES:
        got = _json_type(value)
        return f'{path}: Invalid value: "{got}": {body} must be of type {_TYPE_NAMES[kind]}: "{got}"'
    if kind == "literal_error":
        allowed = ", ".join(f'"{v}"' for v in re.findall(r"'([^']*)'", str(ctx.get("expected", ""))))
        return f'{path}: Unsupported value: "{value}": supported values: {allowed}'
    if kind == "greater_than":
        return f"{path}: Invalid value: {_go_value(value)}: {body} should be greater than {_go_value(ctx['gt'])}"
    if kind == "greater_than_equal":
        return (
            f"{path}: Invalid value: {_go_value(value)}: {body} should be greater than or equal to "
            f"{_go_value(ctx['ge'])}"
        )
    if kind == "less_than_equal":
        return (
            f"{path}: Invalid value: {_go_value(value)}: {body} should be less than or equal to {_go_value(ctx['le'])}"
        )
    if kind == "finite_number":
        return f"{path}: Invalid value: {value}: must be a finite number"
    if kind == "string_too_short":
        return f'{path}: Invalid value: "{value}": {body} should be at least {ctx["min_length"]} chars long'
    if kind == "string_too_long":
        return f"{path}: Too long: may not be more than {ctx['max_length']} bytes"
    if kind == "string_pattern_mismatch":
        return f"{path}: Invalid value: \"{value}\": {body} should match '{ctx['pattern']}'"
    if kind == "too_short":
        return (
            f"{path}: Invalid value: {ctx.get('actual_length')}: {body} should have at least {ctx['min_length']} items"
        )
    if kind == "too_long":
        return f"{path}: Too many: {ctx.get('actual_length')}: must have at most {ctx['max_length']} items"
    return f"{path}: Invalid value: {err['msg']}"


def problems_of(error: ValidationError) -> list[str]:
    return [m for e in error.errors(include_url=False) for m in _messages(e)]


def parse_manifest(manifest: Mapping[str, Any]) -> Resource:
    """The typed resource for a manifest, or :class:`ManifestError` with the admission-style reasons.

    Fields are matched by their camelCase names only, as the API server does;
    unknown fields are errors (server-side strict field validation).
    """
    if not isinstance(manifest, Mapping):
        raise ManifestError("", "", [f"a manifest must be a mapping, not {_json_type(manifest)}"])
    kind = manifest.get("kind")
    metadata = manifest.get("metadata")
    name = str(metadata.get("name", "")) if isinstance(metadata, Mapping) else ""
    api_version = manifest.get("apiVersion")
    if api_version != API_VERSION:
        raise ManifestError(
            str(kind or ""),
            name,
            [f'apiVersion: Unsupported value: "{api_version}": supported values: "{API_VERSION}"'],
        )
    if kind not in KINDS:
        allowed = ", ".join(f'"{k}"' for k in KINDS)
        raise ManifestError(str(kind or ""), name, [f'kind: Unsupported value: "{kind}": supported values: {allowed}'])
    model = KINDS[kind]
    problems: list[str] = []
    if not name and not (isinstance(metadata, Mapping) and metadata.get("generateName")):
        problems.append("metadata.name: Required value: name or generateName is required")
    try:
        resource = model.model_validate(dict(manifest), by_alias=True, by_name=False)
    except ValidationError as exc:
        problems += problems_of(exc)
        raise ManifestError(kind, name, problems) from None
    if problems:
        raise ManifestError(kind, name, problems)
    return resource


def _transition_problems(old: BaseModel, new: BaseModel, path: str) -> list[str]:
    problems: list[str] = []
    for field_name, info in type(new).model_fields.items():
        before, after = getattr(old, field_name, None), getattr(new, field_name, None)
        where = f"{path}.{info.alias or field_name}"
        if before is None or after is None:
            continue  # CEL transition rules only run when both versions have the field
        for meta in info.metadata:
            if isinstance(meta, Cel):
                problems += [
                    f"{where}: Invalid value: {rule.message}"
                    for rule in meta.transitions
                    if not rule.check(before, after)
                ]
        if isinstance(before, BaseModel) and type(before) is type(after):
            problems += _transition_problems(before, after, where)
    return problems


def validate_update(old: Resource, new: Resource) -> None:
    """Raise :class:`ManifestError` if replacing ``old`` with ``new`` breaks a transition rule."""
    if type(old) is not type(new):
        raise ManifestError(new.crd.kind, new.metadata.name or "", ["kind: Invalid value: the kind cannot change"])
    old_spec, new_spec = getattr(old, "spec"), getattr(new, "spec")  # noqa: B009 - spec is per subclass
    problems = _transition_problems(old_spec, new_spec, "spec")
    if problems:
        raise ManifestError(new.crd.kind, new.metadata.name or "", problems)
