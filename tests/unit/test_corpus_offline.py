"""Every manifest of the admission corpus is rejected offline too, for the same reason.

The corpus (tests/corpus/, see its README) is checked against the real API
server by tests/e2e/test_admission.py; here the pydantic models must reject
each file with a message holding the same fragment, so ``kquota validate``
agrees with admission.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from kquota.api import ManifestError, parse_manifest, validate_update

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
ADMISSION = sorted((CORPUS / "admission").glob("*.yaml"))
TRANSITIONS = sorted((CORPUS / "transitions").glob("*.yaml"))


def expectation(path: Path, offline: bool = True) -> str:
    text = path.read_text(encoding="utf-8")
    first = text.splitlines()[0]
    match = re.fullmatch(r"# expect: (.+)", first)
    assert match, f"{path.name} must start with '# expect: <fragment>'"
    if offline:
        override = re.search(r"^# offline-expect: (.+)$", text, re.M)
        if override:
            return override.group(1)
    return match.group(1)


def test_corpus_is_large_enough() -> None:
    assert len(ADMISSION) >= 45
    kinds = {yaml.safe_load(p.read_text())["kind"] for p in ADMISSION}
    assert kinds == {"ClientQuota", "TopicQuota", "ControllerMutationQuota", "KafkaCluster"}
    assert TRANSITIONS


@pytest.mark.parametrize("path", ADMISSION, ids=lambda p: p.stem)
def test_rejected_offline_with_the_admission_reason(path: Path) -> None:
    fragment = expectation(path)
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    with pytest.raises(ManifestError) as info:
        parse_manifest(doc)
    assert fragment in str(info.value), f"{path.name}: {info.value}"


@pytest.mark.parametrize("path", TRANSITIONS, ids=lambda p: p.stem)
def test_transition_rejected_offline(path: Path) -> None:
    fragment = expectation(path)
    before, after = (parse_manifest(d) for d in yaml.safe_load_all(path.read_text(encoding="utf-8")))
    validate_update(before, before)
    with pytest.raises(ManifestError) as info:
        validate_update(before, after)
    assert fragment in str(info.value)
