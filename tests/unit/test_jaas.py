"""SASL credentials from a Secret: its keys, else a Strimzi KafkaUser's ``sasl.jaas.config``."""

from __future__ import annotations

import pytest

from kquota.k8s.api import SecretData, SecretNotFound
from kquota.kafka.jaas import JaasError, jaas_options
from kquota.reconcile.build import sasl_credentials

# What Strimzi's User Operator writes for a SCRAM-SHA-512 KafkaUser.
STRIMZI = {
    "password": "s3cr3t",
    "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="my-user" '
    'password="s3cr3t";',
}


@pytest.mark.parametrize(
    ("text", "options"),
    [
        (STRIMZI["sasl.jaas.config"], {"username": "my-user", "password": "s3cr3t"}),
        ('M required username="a b" password="q\\"uote\\\\";', {"username": "a b", "password": 'q"uote\\'}),
        ("M optional username=bare password=x;", {"username": "bare", "password": "x"}),
        ('M required\n  username="u"\n  password="p=;";', {"username": "u", "password": "p=;"}),
        ("M sufficient;", {}),
        ('M required username="";', {"username": ""}),
    ],
)
def test_jaas_options_are_read_as_kafka_reads_them(text: str, options: dict[str, str]) -> None:
    assert jaas_options(text) == options


@pytest.mark.parametrize(
    "text",
    [
        "",
        'M required username="u"',  # no terminating ;
        'M mandatory username="u";',  # not a JAAS flag
        'M required username "u";',  # no =
        'M required username="u" password;',
        'M required username="unterminated;',
        'M required "username"="u";',  # a quoted option name
        'M required username="u"; N required password="p";',  # two modules
    ],
)
def test_a_malformed_jaas_line_is_refused(text: str) -> None:
    with pytest.raises(JaasError):
        jaas_options(text)


def secret(data: dict[str, str], where: str = "Secret ns/u") -> SecretData:
    return SecretData(where, {k: v.encode() for k, v in data.items()})


def test_a_strimzi_kafkauser_secret_gives_the_username_from_its_jaas_line() -> None:
    assert sasl_credentials(secret(STRIMZI, "Secret ns/u"), "username", "password") == ("my-user", "s3cr3t")


def test_explicit_keys_win_over_the_jaas_line() -> None:
    data = {**STRIMZI, "username": "other", "password": "pw"}
    assert sasl_credentials(secret(data, "Secret ns/u"), "username", "password") == ("other", "pw")
    # Only the missing one comes from the JAAS line.
    assert sasl_credentials(secret({**STRIMZI, "password": "pw"}, "w"), "username", "password") == ("my-user", "pw")


def test_custom_keys_are_read() -> None:
    assert sasl_credentials(secret({"u": "a", "p": "b"}, "w"), "u", "p") == ("a", "b")


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"password": "p"}, "has no key 'username' (and no 'sasl.jaas.config'"),
        ({}, "has no key 'username' and 'password'"),
        ({"sasl.jaas.config": "garbage"}, "cannot read 'sasl.jaas.config'"),
        ({"sasl.jaas.config": 'M required password="p";'}, "its 'sasl.jaas.config' sets no username"),
    ],
)
def test_missing_credentials_name_what_is_missing(data: dict[str, str], says: str) -> None:
    with pytest.raises(SecretNotFound, match="Secret ns/u") as err:
        sasl_credentials(secret(data, "Secret ns/u"), "username", "password")
    assert says in str(err.value)
