"""The suite's progress-judged wait (harness.operator_proc.wait_until_none_left)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from harness.operator_proc import wait_until_none_left


def counts(*values: int | None) -> Iterator[int | None]:
    yield from values
    while True:
        yield values[-1]


def test_a_drain_that_keeps_moving_is_waited_for_to_zero() -> None:
    seen = counts(5, None, 4, 4, 1, 0)
    wait_until_none_left(lambda: next(seen), stall=1.0, cap=10.0, what="drain", interval=0.01)
    assert next(seen) == 0


def test_a_drain_that_stops_fails_with_what_is_left_and_the_logs() -> None:
    seen = counts(7, 3)
    with pytest.raises(AssertionError) as failed:
        wait_until_none_left(
            lambda: next(seen), stall=0.2, cap=10.0, what="every resource gone", interval=0.02, on_timeout=lambda: "LOG"
        )
    message = str(failed.value)
    assert message.startswith("LOG\n") and "every resource gone: none gone for" in message and "3 left" in message


def test_no_drain_may_take_longer_than_the_cap_even_while_it_moves() -> None:
    going = iter(range(10_000, 0, -1))
    with pytest.raises(AssertionError, match="over 0s in all"):
        wait_until_none_left(lambda: next(going), stall=5.0, cap=0.2, what="drain", interval=0.01)


def test_a_look_that_fails_is_not_progress() -> None:
    seen = counts(4, None)
    with pytest.raises(AssertionError, match=r"4 left \(last look: None\)"):
        wait_until_none_left(lambda: next(seen), stall=0.2, cap=10.0, what="drain", interval=0.02)
