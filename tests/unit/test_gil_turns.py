"""The operator hands the GIL to the event loop within 1 ms (kquota.handlers.main._short_gil_turns).

A full pass's work left running on a worker thread (it gave way to a change) holds the GIL;
each step of the change's narrow pass on the event loop waits for it up to the switch interval.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from kquota.handlers import main as operator_main


@pytest.fixture
def restored() -> Iterator[None]:
    before = sys.getswitchinterval()
    yield
    sys.setswitchinterval(before)


@pytest.mark.usefixtures("restored")
def test_the_operator_start_sets_a_1_ms_switch_interval() -> None:
    sys.setswitchinterval(0.005)
    operator_main._short_gil_turns()
    assert sys.getswitchinterval() == pytest.approx(operator_main.GIL_SWITCH_SECONDS)
    assert operator_main.GIL_SWITCH_SECONDS <= 0.001
