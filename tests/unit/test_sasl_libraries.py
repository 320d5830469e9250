"""A SASL mechanism whose library is missing (a pip install without gssapi or the AWS signer) says so.

The connection raises ``KafkaLoginFailed`` naming the package before any broker
is contacted; the pass turns it into ``KafkaUnavailable`` with that message.
"""

from __future__ import annotations

import sys

import pytest

from kquota.kafka.connection import Connection
from kquota.kafka.errors import KafkaLoginFailed
from kquota.kafka.settings import ConnectionSettings, KerberosSettings, MskIamSettings

pytestmark = pytest.mark.unit


def test_gssapi_without_the_gssapi_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gssapi", None)  # what `import gssapi` meets where it is not installed
    settings = ConnectionSettings(
        "kafka:9092",
        "SASL_PLAINTEXT",
        "GSSAPI",
        kerberos=KerberosSettings("kquota@EXAMPLE.COM", "/nonexistent.keytab"),
    )
    with pytest.raises(KafkaLoginFailed, match=r"GSSAPI needs the gssapi package \(pip install 'kquota\[kerberos\]'\)"):
        Connection(settings).connect()


def test_msk_iam_without_the_aws_signer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "aws_msk_iam_sasl_signer", None)
    settings = ConnectionSettings("b-1:9098", "SASL_SSL", "AWS_MSK_IAM", msk_iam=MskIamSettings("eu-west-1"))
    connection = Connection(settings)
    try:
        with pytest.raises(KafkaLoginFailed, match="AWS_MSK_IAM needs the aws-msk-iam-sasl-signer-python package"):
            connection.connect()
    finally:
        connection.close()
