"""Validation rules written once, checked twice: CEL in the API server, Python offline.

Every cross-field or format rule of kquota's API is a :class:`Rule`: the CEL
expression that ``kquota.crdgen`` writes into the CRD's
``x-kubernetes-validations`` and a Python predicate with the same meaning,
run by the pydantic models. Keeping both halves side by side, with one
message, is what lets ``kquota validate`` (and the unit tests) reject exactly
what admission rejects, with the same words.

Rules attach in two ways:

* on a model class, as ``__rules__`` (see :class:`kquota.api.base.SpecModel`):
  ``self`` is the object;
* on a field, with ``Annotated[T, Cel(rule, ...)]``: ``self`` is the field's
  value. :class:`TransitionRule` (``oldSelf``) only works this way and is
  checked by :func:`kquota.api.manifest.validate_update`, since a single
  manifest has no old version.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

#: The pydantic error type that carries a CEL rule's message (see manifest.py's formatter).
RULE_ERROR = "kquota_rule"


@dataclass(frozen=True, slots=True)
class Rule:
    """One validation rule in both languages.

    ``check`` receives what CEL's ``self`` denotes (a model instance for an
    object rule, the raw value for a field rule) and returns whether the
    rule holds. It must agree with ``rule`` on every input; the admission
    corpus test (tests/e2e/test_admission.py) and the offline corpus test
    check that they do on the cases that matter.
    """

    rule: str
    message: str
    check: Callable[[Any], bool]
    #: JSONPath relative to ``self`` so the API server reports the offending field.
    field_path: str | None = None

    def to_crd(self) -> dict[str, str]:
        out = {"rule": self.rule, "message": self.message}
        if self.field_path:
            out["fieldPath"] = self.field_path
        return out


@dataclass(frozen=True, slots=True)
class TransitionRule:
    """A rule comparing a field with its stored value (``oldSelf``); checked on updates only."""

    rule: str
    message: str
    check: Callable[[Any, Any], bool]

    def to_crd(self) -> dict[str, str]:
        return {"rule": self.rule, "message": self.message}


def rule_error(failed: list[Rule]) -> PydanticCustomError:
    """The error failed rules raise: one pydantic error, the rules listed in ``ctx["rules"]``.

    The manifest formatter expands it into one problem per rule, at the rule's
    ``fieldPath`` when it has one, as the API server reports them.
    """
    return PydanticCustomError(
        RULE_ERROR,
        "{message}",
        {"message": "; ".join(r.message for r in failed), "rules": [(r.field_path or "", r.message) for r in failed]},
    )


def run_rules(rules: tuple[Rule, ...], value: Any) -> None:
    failed = [r for r in rules if not r.check(value)]
    if failed:
        raise rule_error(failed)


def add_validations(schema: JsonSchemaValue, rules: tuple[Rule | TransitionRule, ...]) -> None:
    if rules:
        schema.setdefault("x-kubernetes-validations", []).extend(r.to_crd() for r in rules)


class Cel:
    """``Annotated`` marker: CEL rules on a field, enforced by pydantic too (except transitions)."""

    __slots__ = ("rules",)

    def __init__(self, *rules: Rule | TransitionRule) -> None:
        self.rules = rules

    @property
    def checks(self) -> tuple[Rule, ...]:
        return tuple(r for r in self.rules if isinstance(r, Rule))

    @property
    def transitions(self) -> tuple[TransitionRule, ...]:
        return tuple(r for r in self.rules if isinstance(r, TransitionRule))

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        schema = handler(source)
        checks = self.checks
        if not checks:
            return schema

        def validate(value: Any) -> Any:
            run_rules(checks, value)
            return value

        return core_schema.no_info_after_validator_function(validate, schema)

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        json_schema = handler(schema)
        add_validations(json_schema, self.rules)
        return json_schema
