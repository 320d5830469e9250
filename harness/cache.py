"""Where downloads and builds are kept between runs, and a lock around filling it.

The cache lives outside the clone (``$KQUOTA_CACHE``, default ``~/.cache/kquota``)
and every entry is keyed by version, so CI's fresh clones reuse it. Correctness
never depends on it: a missing entry is rebuilt, a half-written one is never
visible because entries are built in a temporary directory and renamed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Iterator
from pathlib import Path


def root() -> Path:
    path = Path(os.environ.get("KQUOTA_CACHE", Path.home() / ".cache" / "kquota"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def locked(name: str) -> Iterator[None]:
    """Serialise builders of one cache entry across processes (xdist, demo + tests)."""
    lock_path = root() / f".{name}.lock"
    with lock_path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def publish_dir(tmp: Path, final: Path) -> None:
    """Atomically move a fully built directory into place."""
    if final.exists():
        shutil.rmtree(tmp, ignore_errors=True)
        return
    tmp.rename(final)
