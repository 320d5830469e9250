"""Field types shared by kquota's resources: entity names, byte rates, IPs, references.

Names are exactly as Kafka sees them (a TLS principal ``CN=app,OU=x``, a SASL
username with spaces or non-ASCII letters, any client.id). The *default*
entity is never spelled as a magic name: it is ``default: true``, so a user
literally named ``<default>`` or an empty-looking name can never be mistaken
for it (Kafka itself sends the default as ``null`` on the wire).
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any, ClassVar, Final

from pydantic import Field, PlainValidator, WithJsonSchema
from pydantic_core import PydanticCustomError

from kquota.api.base import SpecModel
from kquota.api.cel import Rule, run_rules
from kquota.api.quantity import BYTE_RATE_RULES

MAX_NAME_LENGTH: Final = 1024
#: Kafka topic names: legal characters and length (``Topic.validate``).
TOPIC_NAME_PATTERN: Final = r"^[a-zA-Z0-9._-]+$"
MAX_TOPIC_LENGTH: Final = 249
#: A Kubernetes object name (DNS-1123 subdomain), e.g. a KafkaCluster's name.
DNS1123_SUBDOMAIN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS1123_LABEL: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
#: An http(s) URL without whitespace; same regex in Go (RE2) and Python.
HTTP_URL_PATTERN: Final = r"^https?://[^\s/?#]+([/?#]\S*)?$"
#: A Go duration made of positive parts (``60s``, ``1m30s``, ``1.5h``).
DURATION_PATTERN: Final = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
#: Upper bound of requestPercentage; see RequestPercentage.
MAX_REQUEST_PERCENTAGE: Final = 1_000_000
MAX_INT32: Final = 2**31 - 1


# --- IP addresses as the Kubernetes CEL IP/CIDR libraries parse them ---------


def is_ip(value: object) -> bool:
    """CEL's ``isIP()``: Go ``netip.ParseAddr`` minus zones and IPv4-mapped IPv6."""
    if not isinstance(value, str) or not value.isascii() or "%" in value:
        return False
    try:
        addr = ipaddress.ip_address(value)
    except ValueError:
        return False
    return not (isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None)


def is_canonical_ip(value: str) -> bool:
    """CEL's ``ip.isCanonical()`` for a valid address: Go's ``netip.Addr.String()`` form (RFC 5952)."""
    return str(ipaddress.ip_address(value)) == value


def is_cidr(value: object) -> bool:
    """CEL's ``isCIDR()``: Go ``netip.ParsePrefix`` (host bits allowed) minus IPv4-mapped IPv6."""
    if not isinstance(value, str) or "/" not in value:
        return False
    address, bits = value.rsplit("/", 1)
    if not is_ip(address) or not bits.isascii() or not bits.isdigit():
        return False
    if len(bits) > 1 and bits[0] == "0":
        return False
    limit = 32 if isinstance(ipaddress.ip_address(address), ipaddress.IPv4Address) else 128
    return int(bits) <= limit


# --- entity names --------------------------------------------------------------

NAME_XOR_DEFAULT: Final = "set exactly one of name or default: true"
DEFAULT_MUST_BE_TRUE: Final = "default must be true when set: to quota one named entity, omit default and set name"
IP_NAME_INVALID: Final = (
    "name must be an IPv4 or IPv6 address such as 192.0.2.10 or 2001:db8::10 (no CIDR range, zone or IPv4-mapped IPv6)"
)
IP_NAME_NOT_CANONICAL: Final = (
    "name must be the address in canonical form (lower case, no leading zeros, the longest run of zero groups "
    "as ::, e.g. 2001:db8::10): Kafka keeps each spelling as its own quota entity"
)


class EntityName(SpecModel):
    """One part of a quota entity: either a concrete ``name`` or ``default: true``.

    ``default: true`` means Kafka's default entity of this type (``<default>``
    in kafka-configs, ``null`` on the wire): the quota every user or client-id
    without a more specific quota gets, each in its own bucket.
    """

    name: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_NAME_LENGTH,
        description=(
            "The name exactly as Kafka sees it: a SASL username, a TLS principal such as "
            "'CN=app,OU=payments', or a client.id. Any characters are allowed, including spaces, "
            "commas and non-ASCII letters; it is never interpreted as a pattern. A user literally "
            "named '<default>' is that user, not the default entity."
        ),
    )
    default: bool | None = Field(
        None,
        description=(
            "true selects Kafka's default entity of this type (shown as <default> by kafka-configs). "
            "Set either name or default: true, never both; false is not allowed."
        ),
    )

    __rules__: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "has(self.name) != has(self.default)", NAME_XOR_DEFAULT, lambda s: (s.name is None) != (s.default is None)
        ),
        Rule("!has(self.default) || self.default", DEFAULT_MUST_BE_TRUE, lambda s: s.default is not False),
    )

    @property
    def is_default(self) -> bool:
        return self.default is True

    def kafka_name(self) -> str | None:
        """The wire form: the name, or ``None`` for the default entity."""
        return None if self.default else self.name


class IpEntityName(EntityName):
    """An IP address as a quota entity: ``name`` is one IPv4 or IPv6 address, or ``default: true``.

    ``default: true`` is the limit every IP without its own quota gets.
    """

    name: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_NAME_LENGTH,
        description=(
            "One IPv4 or IPv6 address in canonical form, e.g. 192.0.2.10 or 2001:db8::10 (lower case, "
            "no leading zeros, the longest run of zero groups as ::): Kafka keeps each spelling of an "
            "address as its own entity. No CIDR range, zone (%eth0) or IPv4-mapped IPv6 address."
        ),
    )

    __rules__: ClassVar[tuple[Rule, ...]] = (
        *EntityName.__rules__,
        Rule("!has(self.name) || isIP(self.name)", IP_NAME_INVALID, lambda s: s.name is None or is_ip(s.name)),
        Rule(
            "!has(self.name) || !isIP(self.name) || ip.isCanonical(self.name)",
            IP_NAME_NOT_CANONICAL,
            lambda s: s.name is None or not is_ip(s.name) or is_canonical_ip(s.name),
        ),
    )


# --- byte rates ----------------------------------------------------------------

BYTE_RATE_TYPE: Final = "must be of type integer,string"


def _validate_byte_rate(value: Any) -> int | str:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise PydanticCustomError("kquota_type", BYTE_RATE_TYPE)
    run_rules(BYTE_RATE_RULES, value)
    return value


BYTE_RATE_DOC: Final = (
    "An integer, or a Kubernetes quantity string such as '10Mi' (10485760), '1M' (1000000) or "
    "'1.5Mi' (1572864). It must come to a whole number of bytes per second between 1 and "
    "9007199254740991 (2^53-1, the largest integer AlterClientQuotas' float64 carries exactly)."
)

#: A byte rate: the raw int or quantity string as written, checked by BYTE_RATE_RULES.
#: :func:`kquota.api.quantity.byte_rate` gives the number of bytes.
ByteRate = Annotated[
    int | str,
    PlainValidator(_validate_byte_rate, json_schema_input_type=int | str),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "x-kubernetes-int-or-string": True,
            "x-kubernetes-validations": [r.to_crd() for r in BYTE_RATE_RULES],
        }
    ),
]


#: A share of a request handler thread, in percent (Kafka's request_percentage).
RequestPercentage = Annotated[float, Field(gt=0, le=MAX_REQUEST_PERCENTAGE, allow_inf_nan=False)]
#: New connections per second from one IP (Kafka's connection_creation_rate, an INT).
ConnectionRate = Annotated[int, Field(ge=1, le=MAX_INT32)]
#: The name of a KafkaCluster.
ClusterName = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN)]

CLUSTER_REF_DOC: Final = (
    "The name of the KafkaCluster (cluster-scoped) whose brokers get this quota. Omit it to use "
    "the operator's default cluster, the operator setting KQUOTA_DEFAULT_CLUSTER: with the Helm "
    "chart, Helm value operator.defaultCluster, else the first entry of kafka.clusters, else "
    "'default'. The KafkaCluster's tenancy decides whether this namespace may manage the entity."
)

#: A namespace, and the name of a namespaced object, as references to Secrets and Strimzi objects spell them.
Namespace = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS1123_LABEL)]
ObjectName = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN)]
