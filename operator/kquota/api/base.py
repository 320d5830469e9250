"""Base classes of kquota's API models: strict specs that run their CEL twins, lenient status.

Spec models mirror what the API server enforces:

* ``extra="forbid"``: an unknown field is an error offline, as with server-side
  strict field validation (``kubectl create --validate=strict``,
  ``kubectl apply --server-side``);
* ``strict=True``: ``"5"`` is not an integer and ``1.5`` is not a string, as
  in the OpenAPI schema;
* camelCase aliases; manifests are validated by alias only (see
  :func:`kquota.api.manifest.parse_manifest`), Python code may use names;
* ``__rules__``: the object's CEL rules, run after field validation and
  written into the CRD by ``kquota.crdgen``.

Status models are written by the operator and read back from the API server,
so they ignore unknown fields (a newer operator may have added some) and
parse timestamps from strings.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final, Self

from pydantic import BaseModel, ConfigDict, GetJsonSchemaHandler, model_validator
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from kquota.api.cel import Rule, add_validations, run_rules


def _drop_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


#: ``json_schema_extra`` for a field of a list item: the model keeps its Python
#: default (absent means that value), the CRD gets none. A default inside a list
#: item makes the stored list differ from the applied one, so every
#: ``kubectl apply`` of an unchanged object reports it ``configured``;
#: ``kquota.crdgen`` refuses such a default.
NO_CRD_DEFAULT: Final = _drop_default


class SpecModel(BaseModel):
    """A part of a resource's ``spec``: strict, closed, with CEL-equivalent rules."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        alias_generator=to_camel,
        populate_by_name=True,
        serialize_by_alias=True,
        use_attribute_docstrings=False,
    )

    #: Object-level rules; ``self`` in CEL is this object.
    __rules__: ClassVar[tuple[Rule, ...]] = ()

    @model_validator(mode="after")
    def _kquota_rules(self) -> Self:
        run_rules(type(self).__rules__, self)
        return self

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        schema = handler(core_schema)
        add_validations(handler.resolve_ref_schema(schema), cls.__rules__)
        return schema

    def to_manifest(self) -> dict[str, Any]:
        """The JSON form as a manifest spells it (aliases, no unset optional fields)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class StatusModel(BaseModel):
    """A part of a resource's ``status``: written by the operator, lenient when read back."""

    model_config = ConfigDict(
        extra="ignore",
        alias_generator=to_camel,
        populate_by_name=True,
        serialize_by_alias=True,
    )

    def to_manifest(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
