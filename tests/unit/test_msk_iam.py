"""AWS MSK IAM: the token AWS's own signer makes is the one the SASL exchange sends, and it is a valid SigV4 signature.

kquota cannot be run against Amazon MSK here. What is checked instead, with
made-up credentials and no network: ``aws-msk-iam-sasl-signer-python`` (the
real library, with botocore) signs a ``kafka-cluster:Connect`` URL for the
region; the signature is recomputed here from the AWS Signature Version 4
rules with the same secret key; the OAUTHBEARER initial response kquota's
mechanism sends carries exactly that token; and a failure to sign is a
``KafkaLoginFailed`` naming the cause and never the secret key.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

from kquota.kafka.connection import Connection
from kquota.kafka.errors import KafkaLoginFailed
from kquota.kafka.msk import provider_for, sign
from kquota.kafka.oauth import _Mechanism
from kquota.kafka.settings import ConnectionSettings, MskIamSettings

pytestmark = pytest.mark.unit

ACCESS_KEY = "AKIAIOSFODNN7EXAMPLE"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
PROFILE_ACCESS_KEY = "AKIAI44QH8DHBEXAMPLE"
PROFILE_SECRET_KEY = "je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY"


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Made-up credentials in the environment and a profile file; no instance metadata, no real config."""
    for name in (
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_SESSION_TOKEN",
        "AWS_ROLE_ARN",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    credentials = tmp_path / "credentials"
    credentials.write_text(
        f"[prod]\naws_access_key_id = {PROFILE_ACCESS_KEY}\naws_secret_access_key = {PROFILE_SECRET_KEY}\n"
    )
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    yield


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def verify_sigv4(url: str, secret_key: str) -> dict[str, str]:
    """The presigned URL's query, after checking its X-Amz-Signature as AWS SigV4 defines it (query string auth)."""
    parts = urllib.parse.urlsplit(url)
    query = dict(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
    signature = query.pop("X-Amz-Signature")
    query.pop("User-Agent", None)  # added by the signer after signing, not signed
    canonical_query = "&".join(
        f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}" for k, v in sorted(query.items())
    )
    canonical = "\n".join(
        ["GET", parts.path or "/", canonical_query, f"host:{parts.netloc}\n", "host", hashlib.sha256(b"").hexdigest()]
    )
    date, scope = query["X-Amz-Date"], query["X-Amz-Credential"].split("/", 1)[1]
    to_sign = "\n".join(["AWS4-HMAC-SHA256", date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + secret_key).encode()
    for part in scope.split("/"):
        key = _hmac(key, part)
    assert hmac.compare_digest(signature, hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest())
    return query


def decoded(token: str) -> str:
    return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()


def test_the_signer_makes_a_valid_sigv4_connect_token_for_the_region(aws: None) -> None:
    before = time.time()
    token = sign(MskIamSettings("eu-west-1"))
    url = decoded(token.value)
    assert url.startswith("https://kafka.eu-west-1.amazonaws.com/?")
    query = verify_sigv4(url, SECRET_KEY)
    assert query["Action"] == "kafka-cluster:Connect"
    assert query["X-Amz-Credential"].startswith(f"{ACCESS_KEY}/")
    assert query["X-Amz-Credential"].endswith("/eu-west-1/kafka-cluster/aws4_request")
    assert query["X-Amz-Expires"] == "900"
    signed_at = dt.datetime.strptime(query["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC).timestamp()
    # The lifetime kquota refreshes on is the one the signature carries: 15 minutes from signing.
    assert token.expires_at == signed_at + 900
    assert before - 1 <= signed_at <= time.time()


def test_a_profile_signs_with_its_own_keys(aws: None) -> None:
    url = decoded(sign(MskIamSettings("us-east-2", profile="prod")).value)
    assert f"X-Amz-Credential={PROFILE_ACCESS_KEY}%2F" in url
    verify_sigv4(url, PROFILE_SECRET_KEY)


def test_the_sasl_exchange_sends_exactly_the_signed_token(aws: None) -> None:
    settings = ConnectionSettings(
        bootstrap_servers="b-1.demo.abc123.c2.kafka.eu-west-1.amazonaws.com:9098",
        security_protocol="SASL_SSL",
        sasl_mechanism="AWS_MSK_IAM",
        msk_iam=MskIamSettings("eu-west-1"),
    )
    assert settings.wire_mechanism == "OAUTHBEARER"
    connection = Connection(settings)
    tokens = connection._token_provider()
    try:
        token = tokens.ensure()
        first = _Mechanism(sasl_oauth_token_provider=tokens).auth_bytes()
        assert first == f"n,,\x01auth=Bearer {token.value}\x01\x01".encode()
        verify_sigv4(decoded(token.value), SECRET_KEY)
    finally:
        connection.close()


def test_without_credentials_the_failure_names_the_cause_and_no_key(aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    with pytest.raises(KafkaLoginFailed) as info:
        sign(MskIamSettings("eu-west-1"))
    assert str(info.value).startswith("AWS_MSK_IAM: signing a token for eu-west-1 failed: no AWS credentials")
    with pytest.raises(KafkaLoginFailed, match=r"ProfileNotFound: The config profile \(nope\) could not be found"):
        sign(MskIamSettings("eu-west-1", profile="nope"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    assert SECRET_KEY not in str(info.value)


def test_the_provider_refreshes_msk_tokens_like_any_oauthbearer_token(aws: None) -> None:
    tokens = provider_for(MskIamSettings("eu-west-1"), "b-1:9098")
    tokens.close()
    token = tokens.ensure()
    assert tokens.token() == token.value and token.lifetime == pytest.approx(900, abs=2)
    assert "eu-west-1" in repr(tokens) and token.value not in repr(tokens)
