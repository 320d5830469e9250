"""kquota export's manifests: safe names for any principal, exact values, and a lossless round trip."""

from __future__ import annotations

import re

import pytest
import yaml

from kquota.api import parse_manifest
from kquota.cli.export import to_yaml
from kquota.domain import manifests
from kquota.domain.desired import desired_entries
from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.manifests import entity_manifests, export_manifests, name_part, object_name, quantity
from tests.support.quotas import C, M, N, P, R

DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
HASHED = re.compile(r"^[a-z0-9-]+-[0-9a-f]{8}$")


@pytest.mark.parametrize(
    ("entity", "expected"),
    [
        pytest.param(Entity.for_user("alice"), "user-alice", id="a DNS-label user name is used as it is"),
        pytest.param(Entity.for_client("billing-app"), "client-billing-app", id="a DNS-label client-id as it is"),
        pytest.param(Entity.for_pair("alice", "app"), "user-alice.client-app", id="a pair joins its parts with a dot"),
        pytest.param(Entity.for_user(None), "default-user", id="the default user"),
        pytest.param(Entity.for_client(None), "default-client", id="the default client-id"),
        pytest.param(Entity.for_pair(None, None), "default-user.default-client", id="the default pair"),
        pytest.param(Entity.for_pair("alice", None), "user-alice.default-client", id="a user's default client-id"),
        pytest.param(Entity.for_pair(None, "app"), "default-user.client-app", id="a client-id of the default user"),
        pytest.param(Entity.for_ip("10.1.2.3"), "ip-10-1-2-3", id="an IPv4 address reads with dashes"),
        pytest.param(Entity.for_ip(None), "default-ip", id="the default ip"),
    ],
)
def test_object_names_are_readable(entity: Entity, expected: str) -> None:
    assert object_name(entity) == expected


HOSTILE = [
    "CN=app,OU=payments",
    "cn=app,ou=payments",
    "Ålice",
    "ålice",
    "<default>",
    "default",
    "user-default",
    "a.b",
    "UPPER",
    "with space",
    "x" * 41,
    "x" * 1024,
    "alice-0123abcd",
    "-leading",
    "trailing-",
    "日本語",
    "\x1b[31mred",
    "",
    "1e3",
]


@pytest.mark.parametrize("name", HOSTILE, ids=ascii)
def test_every_principal_gets_a_valid_name(name: str) -> None:
    part = name_part(name)
    assert DNS1123_SUBDOMAIN.match(part), part
    assert "." not in part
    assert len(part) <= 63
    for entity in (Entity.for_user(name or None), Entity.for_pair(name or None, name or None)):
        assert DNS1123_SUBDOMAIN.match(object_name(entity))


@pytest.mark.parametrize(
    ("name", "hashed"),
    [
        pytest.param("alice", False, id="a short lowercase name is verbatim"),
        pytest.param("Alice", True, id="upper case is hashed: alice and Alice are different principals"),
        pytest.param("alice-0123abcd", True, id="a name that looks like a hashed part is hashed itself"),
        pytest.param("x" * 40, False, id="40 characters are still verbatim"),
        pytest.param("x" * 41, True, id="41 characters are hashed"),
        pytest.param("a.b", True, id="a dot would be mistaken for the pair separator"),
    ],
)
def test_names_that_could_collide_are_hashed(name: str, hashed: bool) -> None:
    assert bool(HASHED.match(name_part(name))) == hashed
    if not hashed:
        assert name_part(name) == name


def test_distinct_entities_get_distinct_names() -> None:
    entities = {Entity.for_user(n) for n in HOSTILE if n} | {Entity.for_client(n) for n in HOSTILE if n}
    entities |= {Entity.for_pair(a, b) for a in ("alice", "Alice", None) for b in ("app", "App", None)}
    entities |= {Entity.for_user("user-alice.client-app"), Entity.for_user("alice.client-app")}
    names = [object_name(e) for e in entities]
    assert len(set(names)) == len(names)


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (1, 1),
        (1000, 1000),
        (1023, 1023),
        (1024, "1Ki"),
        (1536, 1536),
        (10485760, "10Mi"),
        (1572864, "1536Ki"),
        (2**30, "1Gi"),
        (3 * 2**40, "3Ti"),
        (2**53 - 1, 2**53 - 1),
        (2**52, "4Pi"),
        (1_000_000, 1_000_000),
    ],
)
def test_quantities_are_exact(n: int, expected: int | str) -> None:
    assert quantity(n) == expected


ROUND_TRIP = [
    pytest.param(Entity.for_user("alice"), {P: 10485760.0, C: 1536.0, R: 33.3}, id="user with three keys"),
    pytest.param(Entity.for_pair("alice", "app"), {P: 2048.0, M: 2.5}, id="a pair with a controller mutation rate"),
    pytest.param(Entity.for_pair(None, None), {M: 1000.0}, id="only a controller mutation rate"),
    pytest.param(Entity.for_client(None), {R: 0.001}, id="a tiny request percentage"),
    pytest.param(Entity.for_user("CN=app,OU=x=y"), {P: float(2**53 - 1)}, id="the largest byte rate"),
    pytest.param(Entity.for_ip("2001:db8::1"), {N: 17.0}, id="an IPv6 address"),
    pytest.param(Entity.for_ip(None), {N: 2147483647.0}, id="the largest connection rate on the default ip"),
    pytest.param(Entity.for_user("<default>"), {C: 1.0}, id="a user literally named <default>"),
    pytest.param(Entity.for_client("1e3"), {P: 1024.0}, id="a client-id YAML would read as a number"),
    pytest.param(Entity.for_user("\x1b[31m日本\n"), {P: 5.0}, id="control characters and wide letters"),
]


@pytest.mark.parametrize(("entity", "values"), ROUND_TRIP)
def test_manifests_set_exactly_the_live_values(entity: Entity, values: dict[QuotaKey, float]) -> None:
    exported = entity_manifests(entity, values, namespace="team-a", cluster_ref="prod")
    assert exported.problems == []
    # Through YAML text, as a user applies them.
    docs = list(yaml.safe_load_all(to_yaml(exported.manifests)))
    got: dict[QuotaKey, float] = {}
    for doc in docs:
        resource = parse_manifest(doc)
        assert resource.metadata.namespace == "team-a"
        assert resource.metadata.name == object_name(entity)
        assert getattr(resource, "spec").cluster_ref == "prod"  # noqa: B009 - spec is per subclass
        for e, v in desired_entries(resource):  # type: ignore[arg-type]
            assert e == entity
            assert not set(v) & set(got), "each key is set by one resource only"
            got.update(v)
    assert got == values
    assert {type(v) for v in got.values()} == {float}


@pytest.mark.parametrize(
    ("entity", "values", "problem"),
    [
        pytest.param(Entity.for_user("a"), {P: 1.5}, "is not a whole number", id="a fractional byte rate"),
        pytest.param(Entity.for_user("a"), {C: float(2**53)}, "is not a whole number", id="a byte rate above 2^53-1"),
        pytest.param(Entity.for_user("a"), {R: 2e6}, "less than or equal to 1000000", id="request percentage too big"),
        pytest.param(Entity.for_user("a"), {N: 5.0}, "not a quota key of this entity", id="connection rate on a user"),
        pytest.param(Entity.for_ip("10.0.0.1"), {M: 5.0}, "not a quota key of this entity", id="mutation rate on ip"),
        pytest.param(Entity.for_user("x" * 1025), {P: 1.0}, "Too long", id="a name longer than the API allows"),
        pytest.param(Entity.for_ip("fe80::1%eth0"), {N: 1.0}, "must be an IPv4 or IPv6", id="an ip with a zone"),
    ],
)
def test_what_the_api_cannot_express_is_reported_not_written(
    entity: Entity, values: dict[QuotaKey, float], problem: str
) -> None:
    exported = entity_manifests(entity, values)
    assert exported.manifests == [], "a key with a problem must not be written"
    assert any(problem in p for p in exported.problems), exported.problems


def test_good_keys_of_an_entity_survive_a_bad_one() -> None:
    exported = entity_manifests(Entity.for_user("a"), {P: 1.5, C: 2048.0, M: 3.0})
    assert [d["kind"] for d in exported.manifests] == ["ClientQuota", "ControllerMutationQuota"]
    assert exported.manifests[0]["spec"]["quota"] == {"consumerByteRate": "2Ki"}
    assert len(exported.problems) == 1


def test_a_hash_collision_is_reported_instead_of_overwriting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manifests, "_digest", lambda text: "00000000")
    live = {Entity.for_user("Bob"): {P: 1.0}, Entity.for_user("BOB"): {P: 2.0}}
    out = export_manifests(live)
    assert [len(item.manifests) for item in out] == [1, 0]
    assert "hash collision" in out[1].problems[0]


def test_export_is_sorted_and_stable() -> None:
    live = {Entity.for_user("b"): {P: 1.0}, Entity.for_user(None): {P: 2.0}, Entity.for_client("a"): {P: 3.0}}
    first = [item.name for item in export_manifests(live)]
    again = [item.name for item in export_manifests(dict(reversed(live.items())))]
    assert first == again == ["default-user", "client-a", "user-b"]


@pytest.mark.parametrize("text", ["1e3", "0x10", "123", "1_000", ".inf", "12:30", "yes", "off", "~", "null", "-1.5"])
def test_yaml_quotes_strings_other_parsers_would_read_as_numbers(text: str) -> None:
    out = to_yaml([{"name": text, "other": "plain"}])
    assert f'name: "{text}"' in out
    assert "other: plain" in out
    assert yaml.safe_load(out)["name"] == text
