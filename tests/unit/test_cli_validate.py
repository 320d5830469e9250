"""kquota validate: offline, with the API server's messages, for every file of the admission corpus."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml

from kquota.cli.main import main
from tests.unit.test_corpus_offline import ADMISSION, expectation

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

VALID = """\
apiVersion: kquota.io/v1alpha1
kind: ClientQuota
metadata: {name: alice, namespace: team-a}
spec:
  entity: {user: {name: alice}}
  quota: {producerByteRate: 10Mi}
"""


@pytest.mark.parametrize("path", ADMISSION, ids=lambda p: p.stem)
def test_every_corpus_manifest_is_rejected_with_its_message(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "-f", str(path)]) == 1
    out = capsys.readouterr().out
    assert expectation(path) in out, out
    assert out.rstrip().endswith("0 valid, 1 invalid.")


def test_the_whole_corpus_in_one_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "-f", str(ADMISSION[0].parent), "-o", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["documents"]) == len(ADMISSION)
    by_file = {Path(d["origin"]).name: d for d in doc["documents"]}
    for path in ADMISSION:
        entry = by_file[path.name]
        assert entry["valid"] is False
        assert expectation(path) in entry["message"]
        assert entry["problems"]


def test_the_examples_are_valid(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "-f", str(EXAMPLES)]) == 0
    out = capsys.readouterr().out
    assert "0 invalid" in out
    assert "skipped (not kquota resources)" in out  # the Namespace


def test_multi_document_files_lists_and_other_kinds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n"
    as_list = json.dumps({"apiVersion": "v1", "kind": "List", "items": [json_of(VALID, "b"), json_of(VALID, "c")]})
    (tmp_path / "a.yaml").write_text(VALID + "---\n" + deployment + "---\n")
    (tmp_path / "list.json").write_text(as_list)
    (tmp_path / "notes.txt").write_text("not a manifest")
    assert main(["validate", "-f", str(tmp_path), "--quiet"]) == 0
    assert capsys.readouterr().out == "3 valid, 0 invalid, 1 skipped (not kquota resources).\n"


def json_of(text: str, name: str) -> dict[str, object]:
    doc = yaml.safe_load(text.replace("name: alice, namespace", f"name: {name}, namespace"))
    assert isinstance(doc, dict)
    return doc


@pytest.mark.parametrize(
    ("files", "message"),
    [
        pytest.param(
            {"a.yaml": VALID, "b.yaml": VALID}, "Duplicate value: 'alice' is also defined in", id="duplicates"
        ),
        pytest.param({"a.yaml": "a: [b"}, "not valid YAML", id="broken YAML"),
        pytest.param(
            {"a.yaml": VALID.replace("kquota.io/v1alpha1", "kquota.io/v1")},
            'apiVersion: Unsupported value: "kquota.io/v1"',
            id="a misspelt kquota apiVersion is an error, not skipped",
        ),
        pytest.param(
            {"a.yaml": VALID.replace("apiVersion: kquota.io/v1alpha1\n", "")},
            'apiVersion: Unsupported value: "None"',
            id="a kquota kind without apiVersion is an error",
        ),
    ],
)
def test_problems(tmp_path: Path, files: dict[str, str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert main(["validate", "-f", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert message in captured.out + captured.err


def test_stdin_and_a_missing_path(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(VALID))
    assert main(["validate", "-f", "-"]) == 0
    assert "valid   ClientQuota team-a/alice  (<stdin>)" in capsys.readouterr().out
    assert main(["validate", "-f", "/nonexistent/quotas"]) == 1
    assert "no such file or directory" in capsys.readouterr().err


def test_recursive_only_when_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.yaml").write_text(VALID.replace("10Mi", "0"))
    assert main(["validate", "-f", str(tmp_path)]) == 0
    capsys.readouterr()
    assert main(["validate", "-f", str(tmp_path), "-R"]) == 1
