"""Which namespaces may manage which quota entities on a KafkaCluster (spec.tenancy)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Final

from pydantic import Field

from kquota.api.base import NO_CRD_DEFAULT, SpecModel
from kquota.api.cel import Cel, Rule
from kquota.api.fields import MAX_NAME_LENGTH, Namespace, is_cidr, is_ip

GRANT_EMPTY: Final = "a grant needs users, clientIds, ips or allowDefaults: true"
GRANT_IPS_INVALID: Final = "ips entries must be IP addresses or CIDR ranges such as 10.0.0.0/8"

Pattern = Annotated[str, Field(min_length=1, max_length=MAX_NAME_LENGTH)]
IpOrCidr = Annotated[str, Field(min_length=1, max_length=64)]


class TenancyGrant(SpecModel):
    """Namespaces and the entities their quota resources may manage."""

    namespaces: list[Namespace] = Field(min_length=1, max_length=1024, description="Namespaces this grant applies to.")
    users: list[Pattern] | None = Field(
        None,
        max_length=1024,
        description="User names these namespaces may manage, as case-sensitive glob patterns: '*' matches "
        "any run of characters (also none), '?' exactly one character, and every other character only "
        "itself, including '[', ']', '\\' and '.' (e.g. 'team-a-*', 'CN=*,OU=team-a', 'legacy[1]').",
    )
    client_ids: list[Pattern] | None = Field(
        None,
        max_length=1024,
        description="client.ids these namespaces may manage, as glob patterns like users ('*' and '?' "
        "are the only special characters). Needed for client-id entities and for (default user, "
        "client-id) pairs; a pair with a named user needs only users.",
    )
    ips: Annotated[
        list[IpOrCidr] | None,
        Cel(
            Rule(
                "self.all(x, isIP(x) || isCIDR(x))",
                GRANT_IPS_INVALID,
                lambda v: v is None or all(is_ip(x) or is_cidr(x) for x in v),
            )
        ),
    ] = Field(
        None,
        max_length=256,
        description="IP addresses or CIDR ranges (10.0.0.0/8) whose connection quotas these namespaces may "
        "manage: an ip entity is granted when its address lies in one of them.",
    )
    allow_defaults: bool = Field(
        False,
        description="Whether these namespaces may also manage entities with a default part (default user, "
        "client-id or ip, alone or in a pair); a named part of such an entity still needs its pattern. "
        "A default quota applies to every tenant's clients, so absent means false.",
        json_schema_extra=NO_CRD_DEFAULT,
    )

    __rules__: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "has(self.users) || has(self.clientIds) || has(self.ips)"
            " || (has(self.allowDefaults) && self.allowDefaults)",
            GRANT_EMPTY,
            lambda s: s.users is not None or s.client_ids is not None or s.ips is not None or s.allow_defaults,
        ),
    )


class Tenancy(SpecModel):
    """Which namespaces may manage which quota entities on this cluster."""

    grants: list[TenancyGrant] = Field(
        max_length=100,
        description="A quota resource is acted on only if, for every entity it sets quotas on, one grant "
        "lists the resource's namespace and covers the entity: a user by users, a client-id by clientIds, "
        "an ip by ips, and a default part only with allowDefaults: true. A (user, client-id) pair with a "
        "named user needs only the user granted: the client-id part only narrows that user's own traffic. "
        "Otherwise the resource reports Ready=False with reason NotPermitted and kquota sets nothing for it; "
        "keys it already applied are kept as they are on the brokers, and the status says so. An empty "
        "list denies everything.",
    )
