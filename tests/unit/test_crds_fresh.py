"""The committed CRDs (crds/ and the Helm chart's copy) and docs/reference.md are what the models generate."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kquota import crdgen
from kquota.api.base import SpecModel
from kquota.api.tenancy import TenancyGrant
from tests.support.paths import REPO


def test_committed_crds_are_fresh() -> None:
    stale = crdgen.stale_files(REPO)
    assert not stale, f"stale CRDs, run `make crds`: {[str(p.relative_to(REPO)) for p in stale]}"


def test_both_copies_hold_every_kind() -> None:
    for directory in crdgen.OUTPUT_DIRS:
        names = sorted(p.name for p in (REPO / directory).glob("*.yaml"))
        assert names == sorted(crdgen.rendered()), directory


@pytest.mark.parametrize("seed", ["0", "1", "12345"])
def test_generation_does_not_depend_on_hash_seeds(seed: str) -> None:
    env = dict(os.environ, PYTHONHASHSEED=seed)
    result = subprocess.run(
        [sys.executable, "-m", "kquota.crdgen", "--check", "--root", str(REPO)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_check_fails_on_a_stale_file(tmp_path: Path) -> None:
    for directory in crdgen.OUTPUT_DIRS:
        shutil.copytree(REPO / directory, tmp_path / directory)
    (tmp_path / crdgen.REFERENCE).parent.mkdir(parents=True)
    shutil.copy(REPO / crdgen.REFERENCE, tmp_path / crdgen.REFERENCE)
    assert crdgen.main(["--check", "--root", str(tmp_path)]) == 0
    victim = tmp_path / "helm/kquota/crds/clientquotas.kquota.io.yaml"
    victim.write_text(victim.read_text().replace("shortNames:\n    - cq", "shortNames:\n    - cqq"))
    assert crdgen.main(["--check", "--root", str(tmp_path)]) == 1
    assert crdgen.main(["--root", str(tmp_path)]) == 0
    assert crdgen.main(["--check", "--root", str(tmp_path)]) == 0


def test_committed_reference_is_fresh() -> None:
    committed = (REPO / crdgen.REFERENCE).read_text(encoding="utf-8")
    assert committed == crdgen.reference(), "docs/reference.md is stale, run `make crds`"


def test_check_fails_on_a_stale_reference(tmp_path: Path) -> None:
    for relative in crdgen.generated():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / relative, tmp_path / relative)
    assert crdgen.main(["--check", "--root", str(tmp_path)]) == 0
    reference = tmp_path / crdgen.REFERENCE
    reference.write_text(reference.read_text().replace("reports Ready=False with reason NotPermitted", "is Forbidden"))
    assert crdgen.main(["--check", "--root", str(tmp_path)]) == 1


def _item_defaults(schema: dict[str, Any], path: str, in_item: bool) -> Iterator[str]:
    """Paths of the schemas under an ``items`` that carry a ``default``."""
    if in_item and "default" in schema:
        yield path
    for name, sub in (schema.get("properties") or {}).items():
        yield from _item_defaults(sub, f"{path}.{name}", in_item)
    if isinstance(schema.get("items"), dict):
        yield from _item_defaults(schema["items"], f"{path}[]", True)
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _item_defaults(schema["additionalProperties"], f"{path}.*", in_item)
    for sub in schema.get("anyOf") or []:
        yield from _item_defaults(sub, path, in_item)


@pytest.mark.parametrize("name", sorted(crdgen.rendered()))
def test_no_default_inside_a_list_item(name: str) -> None:
    # The API server stores the defaulted item, so the applied list never equals the
    # stored one and every `kubectl apply` of an unchanged object says "configured".
    doc = yaml.safe_load((REPO / "crds" / name).read_text(encoding="utf-8"))
    schema = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert not list(_item_defaults(schema, "", False))


class _Item(SpecModel):
    flag: bool = False


class _WithList(SpecModel):
    items: list[_Item]


def test_generator_refuses_a_default_inside_a_list_item() -> None:
    with pytest.raises(crdgen.SchemaError, match="list item"):
        crdgen.model_schema(_WithList)


def test_a_list_item_field_without_a_crd_default_reads_absent_as_the_default() -> None:
    grant = TenancyGrant.model_validate({"namespaces": ["team-a"], "users": ["a-*"]})
    assert grant.allow_defaults is False
    assert "default" not in crdgen.model_schema(TenancyGrant)["properties"]["allowDefaults"]


def _field_paths(schema: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    if isinstance(schema.get("items"), dict) and schema["items"].get("type") == "object":
        schema, path = schema["items"], f"{path}[]"
    for name, sub in (schema.get("properties") or {}).items():
        yield from _field_paths(sub, f"{path}.{name}")


@pytest.mark.parametrize("name", sorted(crdgen.rendered()))
def test_reference_has_every_field_with_its_rules(name: str) -> None:
    reference = crdgen.reference()
    doc = yaml.safe_load((REPO / "crds" / name).read_text(encoding="utf-8"))
    kind = doc["spec"]["names"]["kind"]
    section = reference.split(f"\n## {kind}\n", 1)[1].split("\n## ", 1)[0]
    schema = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for part in ("spec", "status"):
        for path, node in _field_paths(schema["properties"][part], part):
            assert f"#### `{path}`" in section, f"{kind} {path} missing from docs/reference.md"
            entry = section.split(f"#### `{path}`\n", 1)[1].split("\n#### ", 1)[0]
            for rule in node.get("x-kubernetes-validations", []):
                assert rule["message"] in entry, f"{kind} {path}: rule message missing"
            if "default" in node:
                assert "default `" in entry, f"{kind} {path}: default missing"


def test_every_chart_crd_file_is_a_document_of_its_own() -> None:
    """`helm show crds` prints the chart's CRD files one after another as they are (subcharts' too):
    each must start with `---`, or the output is one YAML document and `kubectl apply` of it upgrades
    only the last CRD (tests/e2e/test_crd_upgrade.py runs the documented command)."""
    chart = REPO / "helm" / "kquota"
    files = sorted([*chart.glob("crds/*.yaml"), *chart.glob("charts/*/crds/*.yaml")])
    assert len(files) == 5
    for path in files:
        assert path.read_text(encoding="utf-8").startswith("---\n"), path
    joined = "".join(path.read_text(encoding="utf-8") for path in files)
    docs = [d for d in yaml.safe_load_all(joined) if d]
    assert sorted(d["metadata"]["name"] for d in docs) == sorted(p.stem for p in files)
