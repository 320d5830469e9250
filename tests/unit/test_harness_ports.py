"""The suite's loopback ports (harness.procs.free_port): never the same port in two pytest-xdist workers."""

from __future__ import annotations

import itertools

import pytest
from harness import procs


def worker(monkeypatch: pytest.MonkeyPatch, name: str | None, count: str | None) -> None:
    for var, value in (("PYTEST_XDIST_WORKER", name), ("PYTEST_XDIST_WORKER_COUNT", count)):
        if value is None:
            monkeypatch.delenv(var, raising=False)
        else:
            monkeypatch.setenv(var, value)


def test_workers_hand_out_disjoint_slices_of_the_range_below_the_ephemeral_ports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    worker(monkeypatch, None, None)
    whole = procs.port_range()
    assert whole[1] == procs._ephemeral_low() and whole[0] >= 1024
    slices = []
    for index in range(3):
        worker(monkeypatch, f"gw{index}", "3")
        slices.append(procs.port_range())
    for (start, end), (next_start, _) in itertools.pairwise(slices):
        assert start < end <= next_start
    assert slices[0][0] == whole[0] and slices[-1][1] <= whole[1]
    # What each worker hands out stays in its slice.
    worker(monkeypatch, "gw1", "3")
    ports = {procs.free_port() for _ in range(20)}
    assert all(slices[1][0] <= p < slices[1][1] for p in ports), ports


@pytest.mark.parametrize(("name", "count"), [(None, None), ("gw0", "1"), ("master", "2"), ("gw5", "2"), ("gwx", "2")])
def test_outside_several_workers_the_whole_range_is_used(
    monkeypatch: pytest.MonkeyPatch, name: str | None, count: str | None
) -> None:
    worker(monkeypatch, None, None)
    whole = procs.port_range()
    worker(monkeypatch, name, count)
    assert procs.port_range() == whole
