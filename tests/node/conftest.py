"""The node fixture the tests/node modules share: one single-node cluster per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from harness.node import Node


@pytest.fixture(scope="module")
def node() -> Iterator[Node]:
    started = Node.start()
    try:
        yield started
    finally:
        started.cleanup()
