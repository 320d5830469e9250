"""Client properties files for OAUTHBEARER, GSSAPI and MSK IAM, as Kafka's Java clients (and Strimzi's) write them.

An existing client.properties must work unchanged with ``--command-config``:
each form below is copied from the client documentation it names.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import NameOID

from kquota.cli.properties import settings_from_properties
from kquota.cli.target import TargetError
from kquota.kafka.settings import KerberosSettings, MskIamSettings, OAuthSettings

pytestmark = pytest.mark.unit

SECRET = 'cl1ent-s3cret;"q"'
#: The secret as a JAAS quoted value writes it.
QUOTED = SECRET.replace('"', '\\"')
URL = "https://idp.example/realms/kafka/protocol/openid-connect/token"
KAFKA_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
STRIMZI_HANDLER = "io.strimzi.kafka.oauth.client.JaasClientOauthLoginCallbackHandler"
BARE = f"{KAFKA_MODULE} required;"
KRB5 = "com.sun.security.auth.module.Krb5LoginModule"


def oauth(**props: str) -> dict[str, str]:
    return {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"} | props


def test_kafkas_login_module_options() -> None:
    # Kafka 3.1+ (KIP-768): the endpoint as a property, the client in the JAAS line.
    conn = settings_from_properties(
        oauth(
            **{
                "sasl.oauthbearer.token.endpoint.url": URL,
                "sasl.login.callback.handler.class": "org.apache.kafka.common.security.oauthbearer."
                "OAuthBearerLoginCallbackHandler",
                "sasl.jaas.config": f'{KAFKA_MODULE} required clientId="kquota" clientSecret="{QUOTED}" '
                'scope="kafka admin" extension_logicalCluster="lkc-1" extension_identityPoolId="pool-2";',
            }
        ),
        "kafka:9093",
        5,
    )
    assert conn.sasl_mechanism == "OAUTHBEARER" and conn.wire_mechanism == "OAUTHBEARER"
    assert conn.oauth == OAuthSettings(
        URL,
        "kquota",
        SECRET,
        scope="kafka admin",
        extensions=(("logicalCluster", "lkc-1"), ("identityPoolId", "pool-2")),
    )
    assert SECRET not in repr(conn)


def test_kafka_4_1_client_credentials_properties() -> None:
    # KIP-1139: the client as properties, the JAAS line bare.
    conn = settings_from_properties(
        oauth(
            **{
                "sasl.oauthbearer.token.endpoint.url": URL,
                "sasl.oauthbearer.client.credentials.client.id": "kquota",
                "sasl.oauthbearer.client.credentials.client.secret": SECRET,
                "sasl.oauthbearer.scope": "kafka",
                "sasl.jaas.config": f"{KAFKA_MODULE} required;",
            }
        ),
        "kafka:9093",
        5,
    )
    assert conn.oauth == OAuthSettings(URL, "kquota", SECRET, scope="kafka")


def test_strimzis_oauth_client_options(tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    pem = ca_pem()
    ca.write_text(pem)
    conn = settings_from_properties(
        oauth(
            **{
                "sasl.login.callback.handler.class": STRIMZI_HANDLER,
                "sasl.jaas.config": f'{KAFKA_MODULE} required oauth.token.endpoint.uri="{URL}" '
                'oauth.client.id="kquota" oauth.client.secret="s3cret" oauth.scope="kafka" oauth.audience="kafka-prod" '
                f'oauth.ssl.truststore.location="{ca}" oauth.ssl.truststore.type="PEM";',
            }
        ),
        "kafka:9093",
        5,
    )
    assert conn.oauth is not None
    assert (conn.oauth.token_endpoint_url, conn.oauth.client_id, conn.oauth.scope, conn.oauth.audience) == (
        URL,
        "kquota",
        "kafka",
        "kafka-prod",
    )
    assert conn.oauth.ca_file is not None and Path(conn.oauth.ca_file).read_text().strip() == pem.strip()


@pytest.mark.parametrize(
    ("props", "message"),
    [
        pytest.param(
            oauth(**{"sasl.jaas.config": f'{KAFKA_MODULE} required clientId="a" clientSecret="{QUOTED}";'}),
            "OAUTHBEARER needs sasl.oauthbearer.token.endpoint.url",
            id="no token endpoint",
        ),
        pytest.param(
            oauth(**{"sasl.oauthbearer.token.endpoint.url": "file:///etc/token", "sasl.jaas.config": BARE}),
            "is not an http or https URL",
            id="a file URL",
        ),
        pytest.param(
            oauth(**{"sasl.oauthbearer.token.endpoint.url": URL,
                     "sasl.jaas.config": f'{KAFKA_MODULE} required clientId="a";'}),
            "needs the client id and secret",
            id="no client secret",
        ),
        pytest.param(
            {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI",
             "sasl.jaas.config": f'{KRB5} required useKeyTab=true principal="k@R";'},
            "needs keyTab",
            id="GSSAPI keytab without its path",
        ),
        pytest.param(
            {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "AWS_MSK_IAM",
             "sasl.jaas.config": "software.amazon.msk.auth.iam.IAMLoginModule required;"},
            "AWS MSK IAM needs security.protocol=SASL_SSL",
            id="MSK IAM without TLS",
        ),
    ],
)  # fmt: skip
def test_incomplete_files_are_refused_without_their_values(props: dict[str, str], message: str) -> None:
    with pytest.raises(TargetError) as info:
        settings_from_properties(props, "kafka:9093", 5)
    assert message in str(info.value)
    assert SECRET not in str(info.value)


def test_gssapi_with_a_keytab_as_krb5loginmodule_takes_it(tmp_path: Path) -> None:
    keytab = tmp_path / "kquota.keytab"
    keytab.write_bytes(b"\x05\x02")
    conn = settings_from_properties(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "GSSAPI",
            "sasl.kerberos.service.name": "kafka-prod",
            "sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true "
            f'keyTab="{keytab}" principal="kquota@EXAMPLE.COM";',
        },
        "kafka:9093",
        5,
    )
    assert conn.kerberos == KerberosSettings("kquota@EXAMPLE.COM", str(keytab), None, "kafka-prod")


def test_gssapi_with_the_ticket_cache_uses_what_kinit_left() -> None:
    props = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.kerberos.service.name": "kafka",
        "sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required useTicketCache=true;",
    }
    # sasl.mechanism defaults to GSSAPI, as in Kafka.
    assert settings_from_properties(props, "kafka:9093", 5).kerberos == KerberosSettings(None, None, None, "kafka")


MSK = "b-1.demo.abc123.c2.kafka.eu-west-1.amazonaws.com:9098,b-2.demo.abc123.c2.kafka.eu-west-1.amazonaws.com:9098"


def test_msk_iam_as_aws_msk_iam_auth_writes_it() -> None:
    conn = settings_from_properties(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "AWS_MSK_IAM",
            "sasl.jaas.config": "software.amazon.msk.auth.iam.IAMLoginModule required "
            'awsRoleArn="arn:aws:iam::123456789012:role/kquota" awsRoleSessionName="kquota-cli";',
            "sasl.client.callback.handler.class": "software.amazon.msk.auth.iam.IAMClientCallbackHandler",
        },
        MSK,
        5,
    )
    assert (conn.sasl_mechanism, conn.wire_mechanism) == ("AWS_MSK_IAM", "OAUTHBEARER")
    assert conn.msk_iam == MskIamSettings("eu-west-1", "arn:aws:iam::123456789012:role/kquota", "kquota-cli", None)


def test_msk_iam_through_oauthbearer_and_a_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_REGION", "us-east-2")
    conn = settings_from_properties(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.login.callback.handler.class": "software.amazon.msk.auth.iam.IAMOAuthBearerLoginCallbackHandler",
            "sasl.client.callback.handler.class": "software.amazon.msk.auth.iam.IAMOAuthBearerLoginCallbackHandler",
            "sasl.jaas.config": f'{KAFKA_MODULE} required awsProfileName="prod";',
        },
        "localhost:9098",  # a tunnel: no region in the name, so AWS_REGION
        5,
    )
    assert conn.msk_iam == MskIamSettings("us-east-2", None, None, "prod")


def ca_pem() -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "idp ca")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(Encoding.PEM).decode()
