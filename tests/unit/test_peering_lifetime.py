"""The peering lifetime setting reaches Kopf (tests/e2e/test_failover.py measures what it bounds)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kquota.handlers.main import kopf_settings
from kquota.reconcile.settings import OperatorSettings

pytestmark = pytest.mark.unit


def test_the_default_lifetime_is_15_s_not_kopfs_60(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KQUOTA_PEERING_LIFETIME", raising=False)
    assert kopf_settings(OperatorSettings()).peering.lifetime == 15


def test_the_lifetime_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KQUOTA_PEERING_LIFETIME", "42")
    assert kopf_settings(OperatorSettings()).peering.lifetime == 42


@pytest.mark.parametrize("seconds", [0, 9])
def test_a_lifetime_shorter_than_kopfs_keepalive_margin_is_refused(seconds: int) -> None:
    # Kopf sends its keep-alive 5 to 10 s before the lifetime ends but at most once a second:
    # below 10 s that margin shrinks, and a live replica slowed for a moment would look dead.
    with pytest.raises(ValidationError):
        OperatorSettings(peering_lifetime=seconds)
