"""What every kquota resource has besides its spec: type meta, object meta, CRD metadata.

:class:`CrdInfo` holds what ``kquota.crdgen`` needs beyond the schema (names,
scope, printer columns); each top-level model carries one as ``crd``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

GROUP: Final = "kquota.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
CATEGORY: Final = "kquota"

READY_COLUMN_PATH: Final = '.status.conditions[?(@.type=="Ready")].status'


@dataclass(frozen=True, slots=True)
class PrinterColumn:
    name: str
    json_path: str
    type: str = "string"
    description: str = ""
    priority: int = 0
    format: str | None = None

    def to_crd(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.type, "jsonPath": self.json_path}
        if self.format:
            out["format"] = self.format
        if self.description:
            out["description"] = self.description
        if self.priority:
            out["priority"] = self.priority
        return out


READY_COLUMN: Final = PrinterColumn("Ready", READY_COLUMN_PATH, description="The Ready condition's status.")
AGE_COLUMN: Final = PrinterColumn("Age", ".metadata.creationTimestamp", type="date")


@dataclass(frozen=True, slots=True)
class CrdInfo:
    kind: str
    plural: str
    scope: Literal["Namespaced", "Cluster"]
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = (CATEGORY,)
    printer_columns: tuple[PrinterColumn, ...] = field(default_factory=tuple)

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def name(self) -> str:
        return f"{self.plural}.{GROUP}"


class ObjectMeta(BaseModel):
    """The parts of metadata kquota reads; everything else is kept as is."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, serialize_by_alias=True)

    name: str | None = None
    generate_name: str | None = Field(None, alias="generateName")
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    generation: int | None = None
    uid: str | None = None
    resource_version: str | None = Field(None, alias="resourceVersion")


class Resource(BaseModel):
    """A kquota custom resource: apiVersion, kind, metadata, spec, status."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True)

    crd: ClassVar[CrdInfo]

    api_version: Literal["kquota.io/v1alpha1"] = Field("kquota.io/v1alpha1", alias="apiVersion")
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)

    def to_manifest(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
