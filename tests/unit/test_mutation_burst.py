"""Controller mutation bursts: effective burst from broker windows, and advice when it is too small."""

from __future__ import annotations

from kquota.domain.mutation import ControllerWindow, check_burst, window_from_configs

DEFAULT = ControllerWindow(11, 1)


def test_defaults_give_eleven_seconds_of_rate() -> None:
    check = check_burst(10.0, None, {1: DEFAULT})
    assert check.status == {"windowNum": 11, "windowSizeSeconds": 1, "effective": 110.0}
    assert check.condition is None


def test_expected_burst_within_effective_is_sufficient() -> None:
    check = check_burst(10.0, 110, {1: DEFAULT})
    assert check.condition is not None and (check.condition.status, check.condition.reason) == ("True", "WithinBurst")


def test_too_small_burst_names_the_window_that_would_meet_it() -> None:
    check = check_burst(10.0, 500, {1: DEFAULT})
    assert check.condition is not None
    status, reason, message = check.condition.status, check.condition.reason, check.condition.message
    assert (status, reason) == ("False", "BurstTooSmall")
    assert "controller.quota.window.num=50" in message, message
    assert "raise the rate to 46/s" in message, message


def test_the_smallest_broker_window_is_what_a_client_can_count_on() -> None:
    check = check_burst(2.0, 30, {1: ControllerWindow(20, 1), 2: ControllerWindow(5, 2), 3: DEFAULT})
    assert check.status["effective"] == 20.0
    assert "broker 2" in check.status["note"]
    assert check.condition is not None and check.condition.status == "False"


def test_configs_missing_fall_back_to_kafka_defaults() -> None:
    assert window_from_configs({}) == DEFAULT
    assert window_from_configs({"controller.quota.window.num": "30"}) == ControllerWindow(30, 1)
