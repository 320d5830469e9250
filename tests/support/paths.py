"""Where the repository is, for tests that read its files (examples, charts, CRDs, docs)."""

from __future__ import annotations

from pathlib import Path

#: The repository's root directory.
REPO = Path(__file__).resolve().parents[2]
