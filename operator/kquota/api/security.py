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


class CaSecretRef(SpecModel):
    """A Secret with the CA certificate (PEM) that signed the brokers' certificates."""

    namespace: Namespace = Field(description="Namespace of the Secret.")
    name: ObjectName = Field(description="Name of the Secret.")
    key: SecretKey = Field("ca.crt", description="Key of the PEM CA certificate in the Secret.")


class ClientCertSecretRef(SpecModel):
    """A Secret with the operator's client certificate and key (PEM), for mutual TLS."""

    namespace: Namespace = Field(description="Namespace of the Secret.")
    name: ObjectName = Field(description="Name of the Secret.")
    cert_key: SecretKey = Field("tls.crt", description="Key of the PEM certificate in the Secret.")
    key_key: SecretKey = Field("tls.key", description="Key of the PEM private key in the Secret.")


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
