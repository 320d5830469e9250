"""How the operator authenticates to a KafkaCluster's brokers (spec.security): protocol, SASL, TLS."""

from __future__ import annotations

from typing import Annotated, ClassVar, Final, Literal

from pydantic import Field

from kquota.api.base import SpecModel
from kquota.api.cel import Rule
from kquota.api.fields import Namespace, ObjectName

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


class Sasl(SpecModel):
    """SASL authentication of the operator's admin client."""

    mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = Field(
        description="SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512."
    )
    credentials_secret_ref: CredentialsSecretRef = Field(description="Where the username and password are.")


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
    )
