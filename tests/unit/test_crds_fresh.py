"""The committed CRDs (crds/ and the Helm chart's copy) are what the models generate."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kquota import crdgen

REPO = Path(__file__).resolve().parents[2]


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
    assert crdgen.main(["--check", "--root", str(tmp_path)]) == 0
    victim = tmp_path / "helm/kquota/crds/clientquotas.kquota.io.yaml"
    victim.write_text(victim.read_text().replace("shortNames:\n    - cq", "shortNames:\n    - cqq"))
    assert crdgen.main(["--check", "--root", str(tmp_path)]) == 1
    assert crdgen.main(["--root", str(tmp_path)]) == 0
    assert crdgen.main(["--check", "--root", str(tmp_path)]) == 0
