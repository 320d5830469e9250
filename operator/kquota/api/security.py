"""How the operator authenticates to a KafkaCluster's brokers (spec.security): protocol, SASL, TLS."""

from __future__ import annotations

from typing import Annotated, ClassVar, Final, Literal

from pydantic import Field

from kquota.api.base import SpecModel
from kquota.api.cel import Rule
from kquota.api.fields import HTTP_URL_PATTERN, Namespace, ObjectName

SECRET_KEY_PATTERN: Final = r"^[-._a-zA-Z0-9]+$"  # noqa: S105 - a Secret key name pattern, not a secret

SASL_REQUIRED: Final = "protocol SASL_PLAINTEXT and SASL_SSL need sasl"
SASL_UNUSED: Final = "sasl is used only with protocol SASL_PLAINTEXT or SASL_SSL"
TLS_UNUSED: Final = "tls is used only with protocol SSL or SASL_SSL"

SecretKey = Annotated[str, Field(min_length=1, max_length=253, pattern=SECRET_KEY_PATTERN)]
Protocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]


class CredentialsSecretRef(SpecModel):
    """A Secret with the SASL username and password.

    A Strimzi KafkaUser's Secret works as it is: it has ``password`` and
    ``sasl.jaas.config`` but no ``username``, and a key the Secret lacks is read
    from its ``sasl.jaas.config`` line.
    """

    namespace: Namespace = Field(description="Namespace of the Secret (the operator needs read access).")
    name: ObjectName = Field(description="Name of the Secret.")
    username_key: SecretKey = Field(
        "username",
        description="Key of the username in the Secret. When the Secret has no such key, the username is read "
        "from its sasl.jaas.config key (username=... in the JAAS line), as in a Strimzi KafkaUser's Secret.",
    )
    password_key: SecretKey = Field(
        "password",
        description="Key of the password in the Secret. When the Secret has no such key, the password is read "
        "from its sasl.jaas.config key.",
    )


StoreType = Literal["PEM", "PKCS12"]
PKCS12_ONLY_CA: Final = "truststoreKey and passwordKey are used only with type: PKCS12"
PKCS12_ONLY_CLIENT: Final = "keystoreKey and passwordKey are used only with type: PKCS12"
#: The keys a PKCS#12 store and its password have when a ref does not name them (Strimzi's names).
DEFAULT_TRUSTSTORE_KEY: Final = "ca.p12"
DEFAULT_KEYSTORE_KEY: Final = "user.p12"
DEFAULT_CA_PASSWORD_KEY: Final = "ca.password"  # noqa: S105 - the name of a Secret key
DEFAULT_USER_PASSWORD_KEY: Final = "user.password"  # noqa: S105 - the name of a Secret key


class CaSecretRef(SpecModel):
    """A Secret with the certificates that signed the brokers' certificates: PEM, or a PKCS#12 truststore.

    Every certificate found is trusted, as every entry of a Java truststore is
    (Kafka's ssl.truststore.*): a CA, an intermediate, or a broker's own
    certificate. Only the keys named here are read; other keys of the Secret,
    binary ones included, are never decoded.
    """

    namespace: Namespace = Field(description="Namespace of the Secret.")
    name: ObjectName = Field(description="Name of the Secret.")
    type: StoreType = Field(
        "PEM",
        description="PEM (default): the key holds PEM certificates. PKCS12: truststoreKey holds a PKCS#12 "
        "truststore (as Kafka's ssl.truststore.type=PKCS12), opened with the password in passwordKey, as a "
        "Strimzi cluster CA Secret has them (ca.p12, ca.password).",
    )
    key: SecretKey = Field("ca.crt", description="Key of the PEM certificates in the Secret (type PEM).")
    truststore_key: SecretKey | None = Field(
        None, description="Key of the PKCS#12 truststore in the Secret (type PKCS12; default ca.p12)."
    )
    password_key: SecretKey | None = Field(
        None, description="Key of the truststore's password in the same Secret (type PKCS12; default ca.password)."
    )

    __rules__: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "self.type == 'PKCS12' || (!has(self.truststoreKey) && !has(self.passwordKey))",
            PKCS12_ONLY_CA,
            lambda s: s.type == "PKCS12" or (s.truststore_key is None and s.password_key is None),
        ),
    )


class ClientCertSecretRef(SpecModel):
    """A Secret with the operator's client certificate and key, for mutual TLS: PEM, or a PKCS#12 keystore."""

    namespace: Namespace = Field(description="Namespace of the Secret.")
    name: ObjectName = Field(description="Name of the Secret.")
    type: StoreType = Field(
        "PEM",
        description="PEM (default): certKey and keyKey hold the PEM certificate (chain) and private key. "
        "PKCS12: keystoreKey holds a PKCS#12 keystore with the key and its certificate (as Kafka's "
        "ssl.keystore.type=PKCS12), opened with the password in passwordKey, as a Strimzi TLS KafkaUser's "
        "Secret has them (user.p12, user.password).",
    )
    cert_key: SecretKey = Field("tls.crt", description="Key of the PEM certificate in the Secret (type PEM).")
    key_key: SecretKey = Field("tls.key", description="Key of the PEM private key in the Secret (type PEM).")
    keystore_key: SecretKey | None = Field(
        None, description="Key of the PKCS#12 keystore in the Secret (type PKCS12; default user.p12)."
    )
    password_key: SecretKey | None = Field(
        None, description="Key of the keystore's password in the same Secret (type PKCS12; default user.password)."
    )

    __rules__: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "self.type == 'PKCS12' || (!has(self.keystoreKey) && !has(self.passwordKey))",
            PKCS12_ONLY_CLIENT,
            lambda s: s.type == "PKCS12" or (s.keystore_key is None and s.password_key is None),
        ),
    )


class Tls(SpecModel):
    """TLS settings of the operator's admin client."""

    ca_secret_ref: CaSecretRef = Field(description="The CA that signed the brokers' certificates.")
    client_cert_secret_ref: ClientCertSecretRef | None = Field(
        None, description="A client certificate, when the brokers require mutual TLS."
    )


Mechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI", "AWS_MSK_IAM"]
#: The mechanisms whose credentials are a username and password (``credentialsSecretRef``).
PASSWORD_MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

CREDENTIALS_REQUIRED: Final = "mechanisms PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 need credentialsSecretRef"
CREDENTIALS_UNUSED: Final = "credentialsSecretRef is used only with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512"
OAUTH_REQUIRED: Final = "mechanism OAUTHBEARER needs oauth"
OAUTH_UNUSED: Final = "oauth is used only with mechanism OAUTHBEARER"
KERBEROS_REQUIRED: Final = "mechanism GSSAPI needs kerberos"
KERBEROS_UNUSED: Final = "kerberos is used only with mechanism GSSAPI"
MSK_REQUIRED: Final = "mechanism AWS_MSK_IAM needs awsMskIam"
MSK_UNUSED: Final = "awsMskIam is used only with mechanism AWS_MSK_IAM"
MSK_NEEDS_TLS: Final = "mechanism AWS_MSK_IAM needs protocol SASL_SSL (MSK's IAM listeners are TLS only)"
EXTENSION_NAMES_UNIQUE: Final = "oauth.extensions: each name once"
MSK_ROLE_OR_PROFILE: Final = "awsMskIam: set at most one of roleArn and profile"
MSK_SESSION_NAME_UNUSED: Final = "awsMskIam.roleSessionName is used only with roleArn"

#: An OAUTHBEARER extension's name and value, as Kafka checks them (RFC 7628; ``auth`` is the token's own key).
EXTENSION_NAME_PATTERN: Final = r"^[A-Za-z]+$"
EXTENSION_VALUE_PATTERN: Final = r"^[\x21-\x7E \t\r\n]+$"
#: A Kerberos principal: primary[/instance]@REALM (the realm may be left to krb5.conf's default_realm).
PRINCIPAL_PATTERN: Final = r"^[^\s@/]+(/[^\s@/]+)?(@[^\s@/]+)?$"
AWS_REGION_PATTERN: Final = r"^[a-z]{2}(-[a-z]+)+-[0-9]+$"
ROLE_ARN_PATTERN: Final = r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/\S+$"


class SecretKeyRef(SpecModel):
    """One key of a Secret."""

    namespace: Namespace = Field(description="Namespace of the Secret (the operator needs read access).")
    name: ObjectName = Field(description="Name of the Secret.")
    key: SecretKey = Field(description="Key in the Secret.")


class ClientSecretRef(SecretKeyRef):
    """The Secret key holding the OAuth client's secret."""

    key: SecretKey = Field("clientSecret", description="Key of the client secret in the Secret (default clientSecret).")


class KeytabSecretRef(SecretKeyRef):
    """The Secret key holding a Kerberos keytab (binary)."""

    key: SecretKey = Field("keytab", description="Key of the keytab in the Secret (default keytab).")


class Krb5ConfigMapRef(SpecModel):
    """A ConfigMap key holding a krb5.conf."""

    namespace: Namespace = Field(description="Namespace of the ConfigMap (the operator needs read access).")
    name: ObjectName = Field(description="Name of the ConfigMap.")
    key: SecretKey = Field("krb5.conf", description="Key of the krb5.conf text in the ConfigMap (default krb5.conf).")


class Extension(SpecModel):
    """One SASL extension sent with the OAUTHBEARER token (RFC 7628), e.g. Confluent Cloud's logicalCluster."""

    name: Annotated[str, Field(min_length=1, max_length=64, pattern=EXTENSION_NAME_PATTERN)] = Field(
        description="The extension's name: letters only, not auth (Kafka's rule)."
    )
    value: Annotated[str, Field(min_length=1, max_length=1024, pattern=EXTENSION_VALUE_PATTERN)] = Field(
        description="The extension's value: printable ASCII, spaces and tabs."
    )


def _unique_names(extensions: list[Extension] | None) -> bool:
    names = [e.name for e in extensions or []]
    return len(names) == len(set(names))


class OAuth(SpecModel):
    """An OAuth 2 client-credentials grant: a token from the provider's token endpoint, sent with OAUTHBEARER.

    Kafka's own client properties name the same things ``sasl.oauthbearer.token.endpoint.url``,
    ``sasl.oauthbearer.client.credentials.client.id`` and ``.client.secret``, ``sasl.oauthbearer.scope``,
    and ``extension_<name>`` options of the JAAS line. The token is fetched before the first connection
    and again when 80% of its lifetime has passed (Kafka's sasl.login.refresh.window.factor), in the
    background; the client re-authenticates on the brokers' schedule (connections.max.reauth.ms).
    """

    token_endpoint_url: Annotated[str, Field(min_length=1, max_length=2048, pattern=HTTP_URL_PATTERN)] = Field(
        description="The provider's token endpoint (sasl.oauthbearer.token.endpoint.url), http or https, e.g. "
        "https://keycloak.example/realms/kafka/protocol/openid-connect/token."
    )
    client_id: Annotated[str, Field(min_length=1, max_length=1024)] = Field(
        description="The OAuth client id (sasl.oauthbearer.client.credentials.client.id); the brokers usually "
        "see it, or a claim of the token, as kquota's principal."
    )
    client_secret_ref: ClientSecretRef = Field(
        description="Where the client secret is (sasl.oauthbearer.client.credentials.client.secret); sent to "
        "the token endpoint with HTTP Basic authentication, never to the brokers."
    )
    scope: Annotated[str, Field(min_length=1, max_length=1024)] | None = Field(
        None, description="The scope asked for (sasl.oauthbearer.scope), space-separated; none by default."
    )
    audience: Annotated[str, Field(min_length=1, max_length=1024)] | None = Field(
        None,
        description="The audience asked for, sent as the token request's audience parameter (as Strimzi's "
        "oauth.audience, Auth0 and Okta take it); none by default (the provider's default audience).",
    )
    extensions: Annotated[list[Extension], Field(max_length=16)] | None = Field(
        None, description="SASL extensions sent with the token (Kafka's extension_<name> JAAS options)."
    )
    ca_secret_ref: CaSecretRef | None = Field(
        None,
        description="The CA certificates the token endpoint's certificate is checked with (https); without it, "
        "the operator's system trusted CAs.",
    )

    __rules__: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "!has(self.extensions) || self.extensions.all(e, self.extensions.exists_one(f, f.name == e.name))",
            EXTENSION_NAMES_UNIQUE,
            lambda s: _unique_names(s.extensions),
        ),
        Rule(
            "!has(self.extensions) || self.extensions.all(e, e.name != 'auth')",
            "oauth.extensions: the name auth is reserved for the token",
            lambda s: all(e.name != "auth" for e in s.extensions or []),
        ),
    )


class Kerberos(SpecModel):
    """Kerberos (SASL/GSSAPI): the operator's principal, its keytab, the krb5.conf and the brokers' service name."""

    principal: Annotated[str, Field(min_length=1, max_length=1024, pattern=PRINCIPAL_PATTERN)] = Field(
        description="The operator's Kerberos principal (the JAAS line's principal=), e.g. kquota@EXAMPLE.COM; "
        "the brokers name it User:<primary> under the default sasl.kerberos.principal.to.local.rules."
    )
    keytab_secret_ref: KeytabSecretRef = Field(
        description="Where the principal's keytab is (the JAAS line's keyTab=): a binary key of a Secret."
    )
    krb5_config_map_ref: Krb5ConfigMapRef | None = Field(
        None,
        description="A ConfigMap key with the krb5.conf (realms, KDCs) to use; without it, the operator "
        "image's /etc/krb5.conf or KRB5_CONFIG.",
    )
    service_name: Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[^\s@/]+$")] = Field(
        "kafka",
        description="The primary of the brokers' Kerberos principal (sasl.kerberos.service.name); the service "
        "ticket asked for is <serviceName>/<broker host>.",
    )


class AwsMskIam(SpecModel):
    """AWS MSK IAM: an OAUTHBEARER token signed by AWS's own aws-msk-iam-sasl-signer-python.

    Credentials come from the AWS default chain (the pod's web identity with IRSA or EKS Pod Identity,
    environment variables, the instance role), a named profile, or a role assumed from them.
    """

    region: Annotated[str, Field(pattern=AWS_REGION_PATTERN, max_length=32)] = Field(
        description="The MSK cluster's AWS region, e.g. eu-west-1 (the token is signed for it)."
    )
    role_arn: Annotated[str, Field(pattern=ROLE_ARN_PATTERN, max_length=2048)] | None = Field(
        None,
        description="A role to assume (with the default chain's credentials) before signing, as "
        "aws-msk-iam-auth's awsRoleArn.",
    )
    role_session_name: Annotated[str, Field(min_length=2, max_length=64, pattern=r"^[A-Za-z0-9_+=,.@-]+$")] | None = (
        Field(None, description="The session name of the assumed role (default kquota).")
    )
    profile: Annotated[str, Field(min_length=1, max_length=128)] | None = Field(
        None, description="A named profile of the AWS config files to sign with, as aws-msk-iam-auth's awsProfileName."
    )

    __rules__: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "!(has(self.roleArn) && has(self.profile))",
            MSK_ROLE_OR_PROFILE,
            lambda s: s.role_arn is None or s.profile is None,
        ),
        Rule(
            "!has(self.roleSessionName) || has(self.roleArn)",
            MSK_SESSION_NAME_UNUSED,
            lambda s: s.role_session_name is None or s.role_arn is not None,
        ),
    )


class Sasl(SpecModel):
    """SASL authentication of the operator's admin client: one mechanism and the section it needs."""

    mechanism: Mechanism = Field(
        description="SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (credentialsSecretRef), OAUTHBEARER "
        "(oauth: a token from an OAuth 2 / OIDC provider), GSSAPI (kerberos) or AWS_MSK_IAM (awsMskIam: "
        "Amazon MSK's IAM access control, sent as OAUTHBEARER)."
    )
    credentials_secret_ref: CredentialsSecretRef | None = Field(
        None, description="Where the username and password are (PLAIN and SCRAM only)."
    )
    oauth: OAuth | None = Field(None, description="The OAuth client (OAUTHBEARER only).")
    kerberos: Kerberos | None = Field(None, description="The Kerberos principal and keytab (GSSAPI only).")
    aws_msk_iam: AwsMskIam | None = Field(None, description="How to sign MSK IAM tokens (AWS_MSK_IAM only).")

    __rules__: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "!(self.mechanism in ['PLAIN', 'SCRAM-SHA-256', 'SCRAM-SHA-512']) || has(self.credentialsSecretRef)",
            CREDENTIALS_REQUIRED,
            lambda s: s.mechanism not in PASSWORD_MECHANISMS or s.credentials_secret_ref is not None,
        ),
        Rule(
            "!has(self.credentialsSecretRef) || self.mechanism in ['PLAIN', 'SCRAM-SHA-256', 'SCRAM-SHA-512']",
            CREDENTIALS_UNUSED,
            lambda s: s.credentials_secret_ref is None or s.mechanism in PASSWORD_MECHANISMS,
        ),
        Rule(
            "self.mechanism != 'OAUTHBEARER' || has(self.oauth)",
            OAUTH_REQUIRED,
            lambda s: s.mechanism != "OAUTHBEARER" or s.oauth is not None,
        ),
        Rule(
            "!has(self.oauth) || self.mechanism == 'OAUTHBEARER'",
            OAUTH_UNUSED,
            lambda s: s.oauth is None or s.mechanism == "OAUTHBEARER",
        ),
        Rule(
            "self.mechanism != 'GSSAPI' || has(self.kerberos)",
            KERBEROS_REQUIRED,
            lambda s: s.mechanism != "GSSAPI" or s.kerberos is not None,
        ),
        Rule(
            "!has(self.kerberos) || self.mechanism == 'GSSAPI'",
            KERBEROS_UNUSED,
            lambda s: s.kerberos is None or s.mechanism == "GSSAPI",
        ),
        Rule(
            "self.mechanism != 'AWS_MSK_IAM' || has(self.awsMskIam)",
            MSK_REQUIRED,
            lambda s: s.mechanism != "AWS_MSK_IAM" or s.aws_msk_iam is not None,
        ),
        Rule(
            "!has(self.awsMskIam) || self.mechanism == 'AWS_MSK_IAM'",
            MSK_UNUSED,
            lambda s: s.aws_msk_iam is None or s.mechanism == "AWS_MSK_IAM",
        ),
    )


def _is_sasl(protocol: str) -> bool:
    return protocol.startswith("SASL_")


class Security(SpecModel):
    """How the operator authenticates to the brokers."""

    protocol: Protocol = Field(
        "PLAINTEXT",
        description="The listener's security.protocol: PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL.",
    )
    sasl: Sasl | None = Field(None, description="SASL settings; required with SASL_PLAINTEXT and SASL_SSL.")
    tls: Tls | None = Field(
        None,
        description="TLS settings; allowed only with SSL and SASL_SSL. Without it, those protocols check the "
        "brokers' certificates against the operator's system trusted CAs and send no client certificate.",
    )

    __rules__: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "!(has(self.protocol) && self.protocol.startsWith('SASL_')) || has(self.sasl)",
            SASL_REQUIRED,
            lambda s: not _is_sasl(s.protocol) or s.sasl is not None,
        ),
        Rule(
            "!has(self.sasl) || (has(self.protocol) && self.protocol.startsWith('SASL_'))",
            SASL_UNUSED,
            lambda s: s.sasl is None or _is_sasl(s.protocol),
        ),
        Rule(
            "!has(self.tls) || (has(self.protocol) && self.protocol.endsWith('SSL'))",
            TLS_UNUSED,
            lambda s: s.tls is None or s.protocol.endswith("SSL"),
        ),
        Rule(
            "!has(self.sasl) || self.sasl.mechanism != 'AWS_MSK_IAM' || "
            "(has(self.protocol) && self.protocol == 'SASL_SSL')",
            MSK_NEEDS_TLS,
            lambda s: s.sasl is None or s.sasl.mechanism != "AWS_MSK_IAM" or s.protocol == "SASL_SSL",
        ),
    )
