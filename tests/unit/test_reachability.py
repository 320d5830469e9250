"""Issue #33, finding 8: the brokers checked while idle, and refused logins Stalled after a few in a row.

The loop runs on the in-memory stand-ins with a short reachability interval; the
real broker and API server paths are tests/e2e/test_lifecycle.py's. What is
checked here is the loop's bookkeeping: an idle check that is answered writes and
reads nothing else; one that is not says KafkaUnavailable on every resource and
the KafkaCluster without waiting for a pass, and the first answer afterwards
brings a full pass; refused logins become AuthenticationFailed (Stalled) after
``auth_failures_to_stall`` in a row and recover by themselves.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from kquota.domain import outcomes
from kquota.domain.status import STALLED, Reason
from kquota.kafka.errors import KafkaAuthenticationFailed, KafkaRefusalUnconfirmed, KafkaUnavailable
from kquota.kafka.settings import ConnectionSettings
from kquota.reconcile import engine as engine_module
from kquota.reconcile.engine import ClusterReconciler
from kquota.reconcile.failures import Refusals
from tests.support.engine import Broker, Kube, engine, quota

pytestmark = pytest.mark.unit

REFUSED = "cannot connect to Kafka: authentication as 'kquota' (SCRAM-SHA-512) refused by k:9092: Authentication failed"
UNCONFIRMED = "cannot connect to Kafka: k:9092 (SASL_PLAINTEXT): KafkaTimeoutError: Unable to bootstrap; ..."
MINE = ConnectionSettings("k:9092", sasl_username="kquota", sasl_password="one")
FIXED = ConnectionSettings("k:9092", sasl_username="kquota", sasl_password="two")


# -- the count -------------------------------------------------------------------------------


def test_the_same_refusal_three_times_in_a_row_is_authentication_failed() -> None:
    refusals = Refusals(3)
    said = [refusals.failed(KafkaAuthenticationFailed(REFUSED), MINE) for _ in range(4)]
    assert [r for r, _ in said] == [Reason.KAFKA_UNAVAILABLE] * 2 + [Reason.AUTHENTICATION_FAILED] * 2
    assert said[0][1] == REFUSED
    assert said[2][1].startswith(REFUSED) and "3 times in a row" in said[2][1] and "spec.security" in said[2][1]
    # The same words on every retry: a status is not rewritten for a count.
    assert said[3][1] == said[2][1]
    assert Reason.AUTHENTICATION_FAILED in STALLED


def test_a_login_failing_without_a_word_neither_counts_nor_ends_the_run() -> None:
    """kafka-python sometimes reads the brokers closing a refused connection before the refusal."""
    refusals = Refusals(3)
    refusals.failed(KafkaAuthenticationFailed(REFUSED), MINE)
    assert refusals.failed(KafkaRefusalUnconfirmed(UNCONFIRMED), MINE) == (Reason.KAFKA_UNAVAILABLE, UNCONFIRMED)
    refusals.failed(KafkaAuthenticationFailed(REFUSED), MINE)
    assert refusals.count == 2
    assert refusals.failed(KafkaAuthenticationFailed(REFUSED), MINE)[0] is Reason.AUTHENTICATION_FAILED
    # Once Stalled, such a failure keeps saying the refusal it cannot rule out.
    reason, message = refusals.failed(KafkaRefusalUnconfirmed(UNCONFIRMED), MINE)
    assert reason is Reason.AUTHENTICATION_FAILED and message.startswith(REFUSED)


@pytest.mark.parametrize(
    ("between", "tried"),
    [
        (KafkaUnavailable("cannot connect to Kafka: k:9092 (PLAINTEXT): connection refused"), MINE),
        (KafkaRefusalUnconfirmed(UNCONFIRMED), FIXED),  # new credentials: nothing known of them yet
        (KafkaAuthenticationFailed(REFUSED + " (another way)"), MINE),
    ],
    ids=["another failure", "other credentials", "another refusal"],
)
def test_anything_else_starts_the_count_again(between: Exception, tried: ConnectionSettings) -> None:
    refusals = Refusals(3)
    for _ in range(2):
        refusals.failed(KafkaAuthenticationFailed(REFUSED), MINE)
    refusals.failed(between, tried)
    assert refusals.failed(KafkaAuthenticationFailed(REFUSED), MINE)[0] is Reason.KAFKA_UNAVAILABLE


def test_the_same_refusal_of_other_credentials_starts_again() -> None:
    refusals = Refusals(2)
    refusals.failed(KafkaAuthenticationFailed(REFUSED), MINE)
    assert refusals.failed(KafkaAuthenticationFailed(REFUSED), FIXED)[0] is Reason.KAFKA_UNAVAILABLE
    assert refusals.failed(KafkaAuthenticationFailed(REFUSED), FIXED)[0] is Reason.AUTHENTICATION_FAILED
    refusals.reset()
    assert refusals.failed(KafkaAuthenticationFailed(REFUSED), FIXED)[0] is Reason.KAFKA_UNAVAILABLE


# -- the loop ----------------------------------------------------------------------------------


class Brokers(Broker):
    """Answers until ``down``; while ``refusing`` every connection is refused with REFUSED. Counts requests."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.refusing = False
        self.checks = 0
        self.infos = 0

    def _answer(self) -> tuple[str, list[int]]:
        if self.refusing:
            raise KafkaAuthenticationFailed(REFUSED)
        if self.down:
            raise KafkaUnavailable("DescribeCluster failed: k:9092 (PLAINTEXT): NodeNotReadyError")
        return "fake-cluster-id", [1]

    def cluster_info(self) -> tuple[str, list[int]]:
        self.infos += 1
        return self._answer()

    def reachable(self, timeout: float) -> tuple[str, list[int]]:
        self.checks += 1
        return self._answer()


def ready(kube: Kube, name: str) -> dict[str, Any]:
    found = [c for c in kube.statuses.get(name, {}).get("conditions", []) if c["type"] == "Ready"]
    return dict(found[0]) if found else {}


class Writes(Kube):
    """Counts status writes."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    async def patch_status(self, ref: Any, status: Any) -> bool:
        self.writes += 1
        return await super().patch_status(ref, status)


async def until(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def running(
    brokers: Brokers, kube: Kube, body: Callable[[ClusterReconciler], Awaitable[None]], **settings: Any
) -> None:
    async def run() -> None:
        eng = engine([quota("q", "alice", 1000)], brokers, kube)
        eng.settings = eng.settings.model_copy(update={"reachability_interval": 0.05, **settings})
        eng._refusals.stall_after = eng.settings.auth_failures_to_stall

        async def short(seconds: float) -> None:
            await asyncio.sleep(0.02)

        eng._back_off = short  # type: ignore[method-assign]  # retries without the backoff's seconds
        stopped = asyncio.Event()
        task = asyncio.create_task(eng.run(stopped))
        try:
            await body(eng)
        finally:
            stopped.set()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            eng.close()

    asyncio.run(run())


def test_an_answered_check_reads_and_writes_nothing_else() -> None:
    brokers, kube = Brokers(), Writes()

    async def body(eng: ClusterReconciler) -> None:
        await until(lambda: ready(kube, "q").get("reason") == "Applied", "the first pass")
        await until(lambda: ready(kube, "c").get("reason") == "Connected", "the KafkaCluster Connected")
        writes, passes = kube.writes, brokers.described_all
        await until(lambda: brokers.checks >= 10, "ten checks")
        assert kube.writes == writes, "an answered check wrote a status"
        assert brokers.described_all == passes, "an answered check ran a pass"

    running(brokers, kube, body)


def test_brokers_gone_while_idle_are_said_at_the_next_check_and_their_return_at_the_first_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Finding 8: the KafkaCluster stayed Ready=True Connected for about 31 s after its only broker stopped
    (nothing looked until the next pass, whose request then waited out its timeout)."""
    brokers, kube = Brokers(), Writes()
    looked: list[int] = []
    real_unavailable = outcomes.unavailable

    def unavailable(records: Any, reason: Reason, message: str) -> Any:
        looked.append(len(records))
        return real_unavailable(records, reason, message)

    monkeypatch.setattr(engine_module, "unavailable", unavailable)

    async def body(eng: ClusterReconciler) -> None:
        await until(lambda: ready(kube, "c").get("reason") == "Connected", "the KafkaCluster Connected")
        passes = brokers.described_all
        brokers.down = True
        await until(lambda: ready(kube, "q").get("reason") == "KafkaUnavailable", "the resource KafkaUnavailable")
        assert ready(kube, "c")["reason"] == "KafkaUnavailable" and "NodeNotReadyError" in ready(kube, "c")["message"]
        assert brokers.described_all == passes, "it took a pass to notice"
        # While they do not answer, the retries are checks, not passes, and say nothing new.
        writes, checks = kube.writes, brokers.checks
        await until(lambda: brokers.checks >= checks + 10, "ten more checks")
        assert brokers.described_all == passes and kube.writes == writes
        assert len([e for e in kube.events if e[0] == "c" and e[2] == "KafkaUnavailable"]) == 1
        # The same failure again with nothing changed does not look at every status again (0.1 s of CPU
        # at 10,000 resources, every few seconds)...
        assert len(looked) == 1, looked
        # ... but a resource created meanwhile gets its status.
        eng._indexes[0]["c"].append(quota("late", "bob", 2000))  # type: ignore[attr-defined]
        eng.trigger("late")
        await until(lambda: ready(kube, "late").get("reason") == "KafkaUnavailable", "the new resource's status")
        brokers.down = False
        await until(lambda: ready(kube, "q").get("reason") == "Applied", "Applied again")
        await until(lambda: ready(kube, "c").get("reason") == "Connected", "Connected again")
        assert brokers.described_all == passes + 1

    running(brokers, kube, body)


def test_the_same_refusal_in_a_row_is_stalled_and_a_fixed_secret_recovers() -> None:
    """Finding 8: a wrong SCRAM password stayed KafkaUnavailable (Reconciling) for ever."""
    brokers, kube = Brokers(), Writes()

    async def body(eng: ClusterReconciler) -> None:
        await until(lambda: ready(kube, "q").get("reason") == "Applied", "the first pass")
        brokers.refusing = True
        await until(lambda: ready(kube, "q").get("reason") == "AuthenticationFailed", "AuthenticationFailed")
        # One check found it, then passes (not checks: each one is a refused login) with backoff.
        assert brokers.infos >= 3
        for name in ("q", "c"):
            stalled = [c for c in kube.statuses[name]["conditions"] if c["type"] == "Stalled"]
            assert stalled and stalled[0]["status"] == "True" and stalled[0]["message"].startswith(REFUSED)
        # The Warning event follows the statuses (report_failure writes them first): wait for it, then count.
        await until(lambda: any(e[0] == "c" and e[2] == "AuthenticationFailed" for e in kube.events), "the event")
        reasons = [e[2] for e in kube.events if e[0] == "c"]
        assert reasons.count("KafkaUnavailable") == 1 and reasons.count("AuthenticationFailed") == 1
        brokers.refusing = False
        await until(lambda: ready(kube, "q").get("reason") == "Applied", "Applied once the brokers accept it")
        await until(lambda: ready(kube, "c").get("reason") == "Connected", "Connected again")
        assert not [c for c in kube.statuses["c"]["conditions"] if c["type"] == "Stalled"]

    running(brokers, kube, body, auth_failures_to_stall=3)
