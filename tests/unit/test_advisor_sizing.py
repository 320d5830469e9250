"""The advisor sizes a local-mode driver from the machine instead of Spark's 1g default."""

from __future__ import annotations

import pytest

from kquota.advisor.params import local_driver_memory

GIB = 1 << 30


@pytest.mark.parametrize(
    ("total", "expected"),
    [
        (24 * GIB, "12288m"),  # this machine: half
        (GIB, "1024m"),  # never below Spark's own default
        (512 << 20, "1024m"),
        (256 * GIB, "32768m"),  # at most 32 GiB
        (3 * GIB + 123, "1536m"),
    ],
)
def test_half_the_machine_within_bounds(total: int, expected: str) -> None:
    assert local_driver_memory(total) == expected
