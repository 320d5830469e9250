"""Observed metrics per resource: attribution of quota buckets to entities, throttle evidence, aggregation,
conditions, quantization and the write policy."""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass

import pytest

from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.observed import (
    EVIDENCE_SHARE,
    OVER_BUDGET,
    MetricsReading,
    Observed,
    Point,
    QuotaResource,
    QuotaSeries,
    TopicSample,
    attribute,
    current_usage,
    equivalent,
    needs_observed_write,
    needs_topic_observed_write,
    observe,
    observe_topic,
    owner,
    previous_near_limit,
    quantize,
    summarize,
)
from kquota.domain.status import Condition
from kquota.metrics.exposition import parse_text
from kquota.metrics.names import MetricNames
from kquota.metrics.series import RawSeries, quota_series
from tests.support.quotas import ALICE, C, M, N, P, R

DEFAULT_USER = Entity.for_user(None)
NAN = math.nan
NOW = 1000.0


# -- attribution ---------------------------------------------------------------------------------------------------


@dataclass
class Owns:
    live: dict[Entity, dict[QuotaKey, float]]
    key: QuotaKey
    user: str | None
    client: str | None
    expect: Entity | None


OWNER_CASES = [
    pytest.param(
        Owns({ALICE: {P: 1}}, P, "alice", None, ALICE), id="a user tag belongs to users/<user> when it has the key"
    ),
    pytest.param(
        Owns({DEFAULT_USER: {P: 1}}, P, "alice", None, DEFAULT_USER),
        id="a user tag falls back to users/<default> when users/<user> is not set",
    ),
    pytest.param(
        Owns({ALICE: {C: 1}, DEFAULT_USER: {P: 1}}, P, "alice", None, DEFAULT_USER),
        id="per key: users/alice sets only consumer_byte_rate, so produce belongs to users/<default>",
    ),
    pytest.param(
        Owns({ALICE: {P: 1}, DEFAULT_USER: {P: 1}}, P, "alice", None, ALICE),
        id="users/<user> beats users/<default>",
    ),
    pytest.param(
        Owns({DEFAULT_USER: {P: 1}}, P, "<default>", None, DEFAULT_USER),
        id="a user literally named <default> is governed by the default entity like any user",
    ),
    pytest.param(
        Owns(
            {Entity.for_user("<default>"): {P: 1}, DEFAULT_USER: {P: 2}},
            P,
            "<default>",
            None,
            Entity.for_user("<default>"),
        ),
        id="a user literally named <default> with its own quota is not the default entity",
    ),
    pytest.param(
        Owns({Entity.for_user("CN=app,OU=x"): {P: 1}}, P, "CN=app,OU=x", None, Entity.for_user("CN=app,OU=x")),
        id="a TLS distinguished name",
    ),
    pytest.param(
        Owns({Entity.for_client("c,1=x"): {P: 1}}, P, None, "c,1=x", Entity.for_client("c,1=x")),
        id="a client-id tag belongs to clients/<client-id>",
    ),
    pytest.param(
        Owns({Entity.for_client(None): {P: 1}}, P, None, "app", Entity.for_client(None)),
        id="a client-id tag falls back to clients/<default>",
    ),
    pytest.param(
        Owns(
            {Entity.for_pair("alice", "app"): {P: 1}, Entity.for_pair(None, None): {P: 2}},
            P,
            "alice",
            "app",
            Entity.for_pair("alice", "app"),
        ),
        id="both tags: users/<user>/clients/<client-id> first",
    ),
    pytest.param(
        Owns(
            {Entity.for_pair("alice", None): {P: 1}, Entity.for_pair(None, "app"): {P: 2}},
            P,
            "alice",
            "app",
            Entity.for_pair("alice", None),
        ),
        id="both tags: users/<user>/clients/<default> beats users/<default>/clients/<client-id>",
    ),
    pytest.param(
        Owns(
            {Entity.for_pair(None, "app"): {P: 1}, Entity.for_pair(None, None): {P: 2}},
            P,
            "bob",
            "app",
            Entity.for_pair(None, "app"),
        ),
        id="both tags: users/<default>/clients/<client-id>",
    ),
    pytest.param(
        Owns({Entity.for_pair(None, None): {P: 1}}, P, "bob", "app", Entity.for_pair(None, None)),
        id="both tags: users/<default>/clients/<default>",
    ),
    pytest.param(
        Owns({ALICE: {P: 1}, Entity.for_client("app"): {P: 2}}, P, "alice", "app", None),
        id="both tags never belong to a user-only or client-only entity (an unlimited client)",
    ),
    pytest.param(
        Owns({Entity.for_client(None): {P: 1}}, P, "alice", None, None),
        id="a user tag never belongs to a client-id entity",
    ),
    pytest.param(
        Owns({DEFAULT_USER: {P: 1}}, P, None, "app", None),
        id="a client-id tag never belongs to a user entity",
    ),
    pytest.param(Owns({ALICE: {P: 1}}, P, None, None, None), id="no tags, no owner"),
    pytest.param(
        Owns({ALICE: {P: 1}, DEFAULT_USER: {R: 50}}, R, "alice", None, DEFAULT_USER),
        id="request metrics follow request_percentage",
    ),
    pytest.param(
        Owns({ALICE: {P: 1}}, M, "alice", None, None),
        id="a key no entity sets has no owner",
    ),
]


@pytest.mark.parametrize("case", OWNER_CASES)
def test_owner(case: Owns) -> None:
    assert owner(case.live, case.key, case.user, case.client) == case.expect


EXPORTER_PAGE = """\
kafka_server_quota_byte_rate{resource="Produce",user="CN%3Dapp%2COU%3Dx",} 50.0
kafka_server_quota_byte_rate{resource="Produce",user="%3Cdefault%3E",} 60.0
kafka_server_quota_byte_rate{resource="Produce",user="bob",} 70.0
kafka_server_quota_byte_rate{clientId="\\"c,1=x\\"",resource="Fetch",} 80.0
kafka_server_quota_byte_rate{resource="Fetch",user="bob",clientId="plain",} 90.0
"""


def test_exporter_labels_decode_and_attribute_end_to_end() -> None:
    """From the text the JMX exporter serves to entities, through decoding and the resolver."""
    raw = [RawSeries("b:1", s.name, s.labels, [(NOW, s.value)]) for s in parse_text(EXPORTER_PAGE)]
    reading = MetricsReading("Scrape", NOW, 60, True, tuple(quota_series(raw, MetricNames())))
    dn = Entity.for_user("CN=app,OU=x")
    live = {
        dn: {P: 100},
        DEFAULT_USER: {P: 100},
        Entity.for_client("c,1=x"): {C: 100},
        Entity.for_pair(None, None): {C: 100},
    }
    att = attribute(reading, live)
    assert [s.byte_rate for s in att.samples_for(dn, P)] == [50.0]
    assert sorted((s.user, s.byte_rate) for s in att.samples_for(DEFAULT_USER, P)) == [
        ("<default>", 60.0),
        ("bob", 70.0),
    ]
    assert [s.byte_rate for s in att.samples_for(Entity.for_client("c,1=x"), C)] == [80.0]
    assert [(s.user, s.client_id) for s in att.samples_for(Entity.for_pair(None, None), C)] == [("bob", "plain")]
    assert att.unattributed == 0


# -- throttle evidence ---------------------------------------------------------------------------------------------


def _series(
    *points: tuple[float, float | None, float | None],
    resource: QuotaResource = QuotaResource.PRODUCE,
    user: str | None = "alice",
    client: str | None = None,
    broker: str = "b1",
) -> QuotaSeries:
    return QuotaSeries(broker, resource, user, client, tuple(Point(t, th, act) for t, th, act in points))


@dataclass
class Evidence:
    points: list[tuple[float, float | None, float | None]]
    quota: float | None
    throttle_ms: float


START = NOW - 60
EVIDENCE_CASES = [
    pytest.param(Evidence([(950, NAN, 100), (990, NAN, 100)], 100, 0), id="NaN throughout: never throttled"),
    pytest.param(
        Evidence([(930, NAN, 50), (950, 300, 120), (990, 310, 110)], 100, 310),
        id="new throttle values while active: throttled, highest value reported",
    ),
    pytest.param(
        Evidence([(930, 300, 50), (950, 300, 50), (990, 300, 50)], 100, 0),
        id="a stale average while the client runs under quota is not a throttle",
    ),
    pytest.param(
        Evidence([(930, 1000, 120), (950, 1000, 120), (990, 1000, 95)], 100, 1000),
        id="an unchanged average at the request cap with usage at the quota is a throttle",
    ),
    pytest.param(
        Evidence([(930, 1000, 50), (995, 1000, 100 * EVIDENCE_SHARE - 1)], 100, 0),
        id="an unchanged average with usage just under the evidence share is not",
    ),
    pytest.param(
        Evidence([(930, 800, 0), (950, 400, 0), (990, 400, 0)], 100, 0),
        id="the average changing while the client is idle is a sample rolling over, not a throttle",
    ),
    pytest.param(Evidence([(990, 250, 100)], 100, 250), id="first reading ever, positive and active: throttled"),
    pytest.param(Evidence([(990, 250, 0)], 100, 0), id="first reading ever, positive but idle: not throttled"),
    pytest.param(
        Evidence([(900, NAN, 100), (930, 300, 100), (990, 300, 10)], 100, 0),
        id="a throttle before the window does not count",
    ),
    pytest.param(Evidence([(950, NAN, None), (990, 70, None)], None, 70), id="no rate series: benefit of the doubt"),
    pytest.param(
        Evidence([(950, 300, 100), (960, None, 100), (990, 300, 100)], 50, 300),
        id="a reading without the throttle series keeps the previous value",
    ),
    pytest.param(Evidence([(950, math.inf, 100)], 100, 0), id="+Inf is not a throttle time"),
]


@pytest.mark.parametrize("case", EVIDENCE_CASES)
def test_throttle_evidence(case: Evidence) -> None:
    sample = summarize(_series(*case.points), START, case.quota)
    assert sample.throttle_time_ms == case.throttle_ms
    assert sample.throttled is (case.throttle_ms > 0)


def test_summary_takes_the_latest_finite_rate_inside_the_window() -> None:
    s = summarize(_series((930, NAN, 1000), (950, NAN, 100), (970, NAN, NAN), (990, NAN, 300)), START, 400)
    assert s.byte_rate == 300 and s.share == 0.75
    # A quiet window before a burst does not water the burst down (issue 19, finding 12): a client
    # saturating a 4 MiB quota now reads as saturated, as the broker's own metric does.
    quota = 4 * 1024 * 1024
    burst = summarize(_series((950, NAN, 0.0), (960, NAN, 0.0), (970, NAN, 0.0), (990, NAN, 4583055.0)), START, quota)
    assert burst.byte_rate == 4583055.0 and burst.share is not None and burst.share > 1
    req = summarize(_series((990, NAN, 2.5), resource=QuotaResource.REQUEST), START, 5)
    assert (req.byte_rate, req.request_time, req.share) == (None, 2.5, 0.5)


@pytest.mark.parametrize(
    ("readings", "usage"),
    [
        pytest.param(
            [(980, 1_000_000.0), (985, 970_000.0), (990, 97_000.0)],
            1_000_000.0,
            id="a tenth for a second (Kafka's Rate padding a burst's first fetch): the window's highest",
        ),
        pytest.param([(950, 1_000_000.0), (965, 0.0), (970, 0.0), (975, 0.0)], 0.0, id="stopped: zero a window later"),
        pytest.param([(960, 1_000_000.0), (975, 97_000.0)], 1_000_000.0, id="readings further apart: the latest two"),
        pytest.param([(990, 5.0)], 5.0, id="one reading"),
        pytest.param([], None, id="none"),
    ],
)
def test_current_usage_is_the_highest_reading_of_the_broker_s_latest_quota_window(
    readings: list[tuple[float, float]], usage: float | None
) -> None:
    assert current_usage(readings) == usage


def test_a_steady_consumer_s_dip_is_not_its_usage() -> None:
    """Finding 10 of issue #33: one status write said 97,000 B/s (9%), the next 970,000 (92%)."""
    series = _series((980, NAN, 1_000_000.0), (985, NAN, 970_000.0), (990, NAN, 97_000.0))
    s = summarize(series, START, 1_048_576)
    assert s.byte_rate == 1_000_000.0 and s.share is not None and s.share > 0.9


@pytest.mark.parametrize(
    ("points", "throttle_ms"),
    [
        pytest.param(
            [(950, NAN, 0.5, 3.0), (990, NAN, 1.5, -4.0)],
            2000.0,
            id="a token bucket in debt while mutating is a throttle of -tokens/rate (KRaft leaves throttle-time NaN)",
        ),
        pytest.param([(990, NAN, 0.0, -4.0)], 0.0, id="a bucket in debt with no mutations in the window is not"),
        pytest.param([(990, NAN, 1.0, 0.5)], 0.0, id="tokens left: not throttled"),
        pytest.param([(990, 700.0, 1.0, -4.0)], 2000.0, id="with a throttle-time and a debt the higher one counts"),
        pytest.param(
            [(900, 700.0, 1.0, 1.0), (990, 700.0, 1.0, -1.0)], 500.0, id="a stale throttle-time does not hide a debt"
        ),
    ],
)
def test_controller_mutation_token_debt(points: list[tuple[float, float, float, float]], throttle_ms: float) -> None:
    series = QuotaSeries(
        "b1", QuotaResource.CONTROLLER_MUTATION, "ops", None, tuple(Point(t, th, a, tok) for t, th, a, tok in points)
    )
    assert summarize(series, START, 2.0).throttle_time_ms == throttle_ms


def test_token_debt_means_nothing_for_other_resources() -> None:
    series = QuotaSeries("b1", QuotaResource.PRODUCE, "u", None, (Point(990, NAN, 100.0, -4.0),))
    assert summarize(series, START, 50.0).throttle_time_ms == 0


def test_controller_mutation_summary_has_rate_tokens_and_throttle() -> None:
    series = QuotaSeries(
        "b1",
        QuotaResource.CONTROLLER_MUTATION,
        "alice",
        None,
        (Point(950, NAN, 0.0, 11.0), Point(990, 900.0, 4.0, -0.5)),
    )
    s = summarize(series, START, 2.0)
    assert (s.mutation_rate, s.tokens, s.throttle_time_ms, s.share) == (4.0, -0.5, 900.0, 2.0)


# -- per resource --------------------------------------------------------------------------------------------------


def _reading(*series: QuotaSeries, available: bool = True, unreachable: tuple[str, ...] = ()) -> MetricsReading:
    return MetricsReading("Scrape", NOW, 60, available, tuple(series), unreachable=unreachable)


def _bucket(
    user: str | None,
    rate: float,
    throttle: float = NAN,
    broker: str = "b1",
    client: str | None = None,
    resource: QuotaResource = QuotaResource.PRODUCE,
) -> QuotaSeries:
    return _series((950, NAN, rate), (990, throttle, rate), user=user, client=client, broker=broker, resource=resource)


def test_default_user_resource_collects_every_user_it_applies_to() -> None:
    live = {DEFAULT_USER: {P: 100.0}, ALICE: {P: 1000.0}}
    reading = _reading(
        _bucket("bob", 90, 200),
        _bucket("carol", 30),
        _bucket("carol", 40, broker="b2"),
        _bucket("alice", 500),  # users/alice has its own quota: not the default's
        _bucket("<default>", 10),
    )
    obs = observe(attribute(reading, live), DEFAULT_USER, [P])
    assert obs is not None and obs.throttled
    status = obs.to_status()
    assert status["total"] == {"produceByteRate": 170, "produceThrottleTimeMs": 200, "usedPercent": 90}
    assert status["clients"]["active"] == 3
    assert [c["user"] for c in status["clients"]["top"]] == ["bob", "carol", "<default>"]
    assert status["clients"]["top"][1] == {
        "user": "carol",
        "produceByteRate": 70,
        "produceThrottleTimeMs": 0,
        "usedPercent": 40,
    }
    assert [b["broker"] for b in status["brokers"]] == ["b1", "b2"]
    alice = observe(attribute(reading, live), ALICE, [P])
    assert alice is not None and alice.to_status()["total"]["produceByteRate"] == 500
    assert "clients" not in alice.to_status()


def test_top_clients_are_bounded() -> None:
    reading = _reading(*[_bucket(f"u{i:02d}", i + 1) for i in range(20)])
    obs = observe(attribute(reading, {DEFAULT_USER: {P: 100.0}}), DEFAULT_USER, [P], top=5)
    assert obs is not None
    clients = obs.to_status()["clients"]
    assert clients["active"] == 20
    assert [c["user"] for c in clients["top"]] == ["u19", "u18", "u17", "u16", "u15"]


def test_share_is_the_worst_broker_because_quotas_apply_per_broker() -> None:
    reading = _reading(_bucket("alice", 90, broker="b1"), _bucket("alice", 10, broker="b2"))
    obs = observe(attribute(reading, {ALICE: {P: 100.0}}), ALICE, [P])
    assert obs is not None
    status = obs.to_status()
    assert status["usedPercent"] == 90 and status["total"]["produceByteRate"] == 100
    assert [(b["broker"], b["usedPercent"]) for b in status["brokers"]] == [("b1", 90), ("b2", 10)]


@pytest.mark.parametrize(
    ("rate", "percent", "was_near", "near"),
    [
        pytest.param(79, 80, None, False, id="79% of the quota is below an 80% threshold"),
        pytest.param(80, 80, None, True, id="exactly the threshold is near the limit"),
        pytest.param(120, 80, None, True, id="over the quota is near the limit"),
        pytest.param(50, 50, None, True, id="a custom threshold of 50%"),
        pytest.param(76, 80, True, True, id="once near, it stays near within the hysteresis"),
        pytest.param(74, 80, True, False, id="once near, it clears below the hysteresis"),
        pytest.param(76, 80, False, False, id="not near before, no hysteresis"),
    ],
)
def test_near_limit_threshold(rate: float, percent: int, was_near: bool | None, near: bool) -> None:
    att = attribute(_reading(_bucket("alice", rate)), {ALICE: {P: 100.0}})
    obs = observe(att, ALICE, [P], near_limit_percent=percent, was_near_limit=was_near)
    assert obs is not None and obs.near_limit is near
    assert obs.conditions()[1].status == ("True" if near else "False")


def test_each_key_reports_its_own_figures() -> None:
    live = {ALICE: {P: 100.0, C: 200.0, R: 10.0}}
    reading = _reading(
        _bucket("alice", 50, 20),
        _bucket("alice", 100, resource=QuotaResource.FETCH),
        _bucket("alice", 9.5, 1000, resource=QuotaResource.REQUEST),
    )
    obs = observe(attribute(reading, live), ALICE, [P, C, R, N])
    assert obs is not None
    assert obs.to_status()["total"] == {
        "produceByteRate": 50,
        "produceThrottleTimeMs": 20,
        "fetchByteRate": 100,
        "fetchThrottleTimeMs": 0,
        "requestTimePercent": 9.5,
        "requestThrottleTimeMs": 1000,
        "usedPercent": 95,
    }
    assert obs.throttled_keys == [P, R]
    assert obs.to_status()["limits"] == {"consumer_byte_rate": 200, "producer_byte_rate": 100, "request_percentage": 10}
    throttled, near = obs.conditions()
    assert (throttled.status, throttled.reason) == ("True", "ThrottleObserved")
    assert "producer_byte_rate, request_percentage" in throttled.message
    assert near.status == "True" and "request_percentage" in near.message and "producer_byte_rate" not in near.message


def test_controller_mutation_quota_observed() -> None:
    entity = Entity.for_user("ops")
    series = QuotaSeries(
        "b1", QuotaResource.CONTROLLER_MUTATION, "ops", None, (Point(950, NAN, 1.0, 5.0), Point(990, 450.0, 3.0, -0.5))
    )
    obs = observe(attribute(_reading(series), {entity: {M: 2.0}}), entity, [M])
    assert obs is not None and obs.throttled
    assert obs.to_status()["total"] == {
        "mutationRate": 3,
        "mutationThrottleTimeMs": 450,
        "mutationTokens": -0.5,
        "usedPercent": 150,
    }


def test_no_traffic_reports_zero_and_not_throttled() -> None:
    obs = observe(attribute(_reading(), {ALICE: {P: 102400.0, R: 0.0125}}), ALICE, [P, R])
    assert obs is not None and not obs.throttled and not obs.near_limit
    assert obs.to_status()["total"] == {
        "produceByteRate": 0,
        "produceThrottleTimeMs": 0,
        "requestTimePercent": 0,
        "requestThrottleTimeMs": 0,
    }
    # Limits are configuration: never quantized.
    assert obs.to_status()["limits"] == {"producer_byte_rate": 102400, "request_percentage": 0.0125}
    assert [c.status for c in obs.conditions()] == ["False", "False"]


def test_unavailable_metrics_make_conditions_unknown() -> None:
    reading = MetricsReading("Prometheus", NOW, 60, False, error="Prometheus: connection refused")
    obs = observe(attribute(reading, {}), ALICE, [P])
    assert obs is not None
    assert obs.to_status() == {
        "source": "Prometheus",
        "windowSeconds": 60,
        "available": False,
        "message": "Prometheus: connection refused",
    }
    assert [(c.type, c.status, c.reason) for c in obs.conditions()] == [
        ("Throttled", "Unknown", "MetricsUnavailable"),
        ("NearLimit", "Unknown", "MetricsUnavailable"),
    ]


def test_unreachable_brokers_are_listed_and_mentioned() -> None:
    obs = observe(attribute(_reading(unreachable=("b3", "b2")), {ALICE: {P: 1.0}}), ALICE, [P])
    assert obs is not None
    assert obs.to_status()["unreachableBrokers"] == ["b2", "b3"]
    assert "some brokers did not answer" in obs.conditions()[0].message


@pytest.mark.parametrize(
    ("entity", "keys"),
    [
        pytest.param(Entity.for_ip("10.0.0.1"), [N], id="an ip entity has no quota metrics"),
        pytest.param(ALICE, [N], id="connection_creation_rate alone has no quota metrics"),
        pytest.param(ALICE, [], id="no keys"),
    ],
)
def test_nothing_measurable_gives_none(entity: Entity, keys: list[QuotaKey]) -> None:
    assert observe(attribute(_reading(), {}), entity, keys) is None


def test_status_is_deterministic_json_whatever_the_series_order() -> None:
    series = [_bucket(f"u{i}", 10 * i + 1, 100 + i, broker=f"b{i % 3}") for i in range(12)]
    live = {DEFAULT_USER: {P: 100.0}}
    first = observe(attribute(_reading(*series), live), DEFAULT_USER, [P])
    random.Random(7).shuffle(series)
    second = observe(attribute(_reading(*series), live), DEFAULT_USER, [P])
    assert first is not None and second is not None
    assert json.dumps(first.to_status()) == json.dumps(second.to_status())
    assert equivalent(first, second)


def test_condition_messages_carry_no_numbers_that_move() -> None:
    live = {ALICE: {P: 100.0}}
    a = observe(attribute(_reading(_bucket("alice", 95, 300)), live), ALICE, [P])
    b = observe(attribute(_reading(_bucket("alice", 99, 700)), live), ALICE, [P])
    assert a is not None and b is not None
    assert a.conditions() == b.conditions()


def test_one_attribution_serves_many_resources() -> None:
    live = {ALICE: {P: 100.0}, DEFAULT_USER: {P: 50.0}, Entity.for_ip(None): {N: 5.0}}
    attribution = attribute(_reading(_bucket("alice", 10), _bucket("bob", 45, 100)), live)
    alice = observe(attribution, ALICE, [P])
    default = observe(attribution, DEFAULT_USER, [P], was_near_limit=True)
    assert observe(attribution, Entity.for_ip(None), [N]) is None
    assert alice is not None and default is not None
    assert not alice.throttled and default.throttled and default.near_limit


def test_previous_near_limit_reads_the_written_status() -> None:
    assert previous_near_limit({"observed": {"nearLimit": True}}) is True
    assert previous_near_limit({"observed": {"available": False}}) is None
    assert previous_near_limit(None) is None


# -- quantization and writes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(0.0, 0, id="zero"),
        pytest.param(102400.0, 100000, id="a byte rate to two significant digits, as an int"),
        pytest.param(104857.6, 100000, id="jitter below the second digit disappears"),
        pytest.param(115000.0, 120000, id="half rounds to even the way round() does"),
        pytest.param(1323.2068965517242, 1300, id="throttle milliseconds"),
        pytest.param(8.34, 8.3, id="a small share keeps one decimal"),
        pytest.param(0.01234, 0.012, id="a tiny request percentage"),
        pytest.param(-3.14, -3.1, id="negative tokens"),
        pytest.param(NAN, 0, id="NaN never reaches the status"),
        pytest.param(math.inf, 0, id="neither does infinity"),
    ],
)
def test_quantize(value: float, expected: float) -> None:
    got = quantize(value)
    assert got == expected and type(got) is type(expected)


def _obs(rate: float, throttle: float = NAN) -> Observed:
    obs = observe(attribute(_reading(_bucket("alice", rate, throttle)), {ALICE: {P: 1000.0}}), ALICE, [P])
    assert obs is not None
    return obs


def test_equivalent_ignores_jitter_and_sees_flips() -> None:
    assert equivalent(_obs(101_000), _obs(102_000))
    assert equivalent(_obs(101_000).to_status(), _obs(102_000))
    assert not equivalent(_obs(101_000), _obs(131_000))
    assert not equivalent(_obs(500), _obs(500, 300))


@pytest.mark.parametrize(
    ("prev", "new", "age", "write"),
    [
        pytest.param(None, _obs(500), 0.0, True, id="nothing written yet: write"),
        pytest.param(_obs(500).to_status(), _obs(501), 0.0, False, id="an equivalent reading: never write"),
        pytest.param(
            _obs(500).to_status(), _obs(700), 5.0, False, id="values moved but the last write is recent: wait"
        ),
        pytest.param(_obs(500).to_status(), _obs(700), 60.0, True, id="values moved and the interval passed: write"),
        pytest.param(_obs(500).to_status(), _obs(700), None, True, id="values moved and the age is unknown: write"),
        pytest.param(_obs(500).to_status(), _obs(500, 300), 1.0, True, id="throttling started: write at once"),
        pytest.param(_obs(500, 300).to_status(), _obs(500), 1.0, True, id="throttling ended: write at once"),
        pytest.param(_obs(500).to_status(), _obs(900), 1.0, True, id="near limit started: write at once"),
    ],
)
def test_needs_observed_write(prev: dict[str, object] | None, new: Observed, age: float | None, write: bool) -> None:
    assert needs_observed_write(prev, new, age, min_interval=30.0) is write


_WITHIN = Condition(OVER_BUDGET, "False", "WithinBudget", "the topic's traffic is within its budget")
_OVER = Condition(OVER_BUDGET, "True", "BudgetExceeded", "the topic's traffic exceeds its budget: producer_byte_rate")
_WRITTEN = {"source": "Scrape", "available": True, "bytesInPerSec": 100}


@pytest.mark.parametrize(
    ("prev", "prev_condition", "new", "age", "write"),
    [
        pytest.param(None, None, _WITHIN, 0.0, True, id="nothing written yet: write"),
        pytest.param(_WRITTEN, None, _WITHIN, 0.0, True, id="no OverBudget stored: write"),
        pytest.param(_WRITTEN, {"status": "False"}, _WITHIN, 5.0, False, id="no flip, the last write is recent: wait"),
        pytest.param(_WRITTEN, {"status": "False"}, _WITHIN, 30.0, True, id="no flip, the interval passed: write"),
        pytest.param(_WRITTEN, {"status": "False"}, _WITHIN, None, True, id="no flip, the age is unknown: write"),
        pytest.param(_WRITTEN, {"status": "False"}, _OVER, 1.0, True, id="the budget was exceeded: write at once"),
        pytest.param(_WRITTEN, {"status": "True"}, _WITHIN, 1.0, True, id="back within budget: write at once"),
    ],
)
def test_needs_topic_observed_write(
    prev: dict[str, object] | None,
    prev_condition: dict[str, object] | None,
    new: Condition,
    age: float | None,
    write: bool,
) -> None:
    assert needs_topic_observed_write(prev, prev_condition, new, age, min_interval=30.0) is write


# -- topics --------------------------------------------------------------------------------------------------------


def test_topic_observed_per_broker_total_and_budget_share() -> None:
    reading = MetricsReading(
        "Scrape",
        NOW,
        60,
        True,
        topics=(
            TopicSample("b1", "orders", 600.0, 100.0),
            TopicSample("b2", "orders", 300.0, None),
            TopicSample("b1", "other", 5000.0, 5000.0),
        ),
    )
    obs = observe_topic(reading, "orders", {P: 1000.0, C: 1000.0}, near_limit_percent=80)
    assert obs.near_limit
    assert obs.to_status() == {
        "source": "Scrape",
        "windowSeconds": 60,
        "available": True,
        "bytesInPerSec": 900,
        "bytesOutPerSec": 100,
        "usedPercent": {"consumer_byte_rate": 10, "producer_byte_rate": 90},
        "nearLimit": True,
        "brokers": [
            {"broker": "b1", "bytesInPerSec": 600, "bytesOutPerSec": 100},
            {"broker": "b2", "bytesInPerSec": 300, "bytesOutPerSec": 0},
        ],
    }
    assert not observe_topic(reading, "orders", {P: 2000.0}).near_limit
