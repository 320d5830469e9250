"""Unique names, so tests sharing a broker or API server never collide (and need no clean-up between them)."""

from __future__ import annotations

import uuid


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
