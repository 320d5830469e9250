"""Controller mutation quota bursts (KIP-599): what a ControllerMutationQuota's rate allows at once.

Kafka enforces the controller mutation rate with a token bucket whose size is a
*broker* setting: burst = controller.quota.window.num x
controller.quota.window.size.seconds x rate. No per-entity burst key exists,
so kquota reports the effective burst and, when a resource expects more, the
window settings that would allow it. Each broker enforces its own bucket, so the
smallest window across brokers is what a client can count on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from kquota.domain.status import Condition, Outcome

WINDOW_NUM = "controller.quota.window.num"
WINDOW_SIZE = "controller.quota.window.size.seconds"
#: The condition that says whether spec.expectedBurst fits the brokers' window.
BURST_SUFFICIENT = "BurstSufficient"


@dataclass(frozen=True, slots=True)
class ControllerWindow:
    num: int
    size_seconds: int

    @property
    def seconds(self) -> int:
        return self.num * self.size_seconds


@dataclass(frozen=True, slots=True)
class BurstCheck:
    status: dict[str, Any]
    #: The BurstSufficient condition; None when no burst is expected.
    condition: Condition | None


def window_from_configs(configs: Mapping[str, str]) -> ControllerWindow:
    return ControllerWindow(int(configs.get(WINDOW_NUM, "11")), int(configs.get(WINDOW_SIZE, "1")))


def check_burst(rate: float, expected: int | None, windows: Mapping[int, ControllerWindow]) -> BurstCheck:
    if not windows:
        return BurstCheck({"expected": expected} if expected else {}, None)
    broker, window = min(windows.items(), key=lambda item: item[1].seconds)
    effective = window.seconds * rate
    status: dict[str, Any] = {
        "windowNum": window.num,
        "windowSizeSeconds": window.size_seconds,
        "effective": round(effective, 3),
    }
    if len({w for w in windows.values()}) > 1:
        status["note"] = f"brokers differ; broker {broker} has the smallest window"
    if expected is None:
        return BurstCheck(status, None)
    status["expected"] = expected
    if expected <= effective:
        return BurstCheck(
            status,
            Condition(
                BURST_SUFFICIENT,
                "True",
                "WithinBurst",
                f"expected burst {expected} fits the effective burst {effective:g} "
                f"({WINDOW_NUM}={window.num} x {WINDOW_SIZE}={window.size_seconds} x rate {rate:g})",
            ),
        )
    needed = math.ceil(expected / (rate * window.size_seconds))
    return BurstCheck(
        status,
        Condition(
            BURST_SUFFICIENT,
            "False",
            "BurstTooSmall",
            f"expected burst {expected} exceeds the effective burst {effective:g} "
            f"({WINDOW_NUM}={window.num} x {WINDOW_SIZE}={window.size_seconds} x rate {rate:g}); "
            f"set {WINDOW_NUM}={needed} on every broker (with {WINDOW_SIZE}="
            f"{window.size_seconds}), or raise the rate to {math.ceil(expected / window.seconds)}/s",
        ),
    )


def with_burst(outcome: Outcome, rate: float, expected: int | None, windows: Mapping[int, ControllerWindow]) -> Outcome:
    """A ControllerMutationQuota's outcome with ``status.burst`` and its BurstSufficient condition."""
    check = check_burst(rate, expected, windows)
    return replace(outcome, burst=check.status, conditions=(check.condition,) if check.condition else ())
