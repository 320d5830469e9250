"""TopicQuota: a bandwidth budget for a whole topic, monitored or enforced through other quotas.

Kafka has no topic quota in any release (KIP-1010 is under discussion), so a
TopicQuota is a budget the operator watches (Monitor), turns into client
quotas for the clients that share the topic (ClientQuotas), or writes as the
proposed KIP-1010 topic configs where brokers support them (TopicConfig).
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Final, Literal

from pydantic import ConfigDict, Field

from kquota.api.base import SpecModel
from kquota.api.cel import Cel, Rule
from kquota.api.fields import (
    BYTE_RATE_DOC,
    CLUSTER_REF_DOC,
    MAX_TOPIC_LENGTH,
    NAME_XOR_DEFAULT,
    TOPIC_NAME_PATTERN,
    ByteRate,
    ClusterName,
    EntityName,
)
from kquota.api.resource import AGE_COLUMN, READY_COLUMN, CrdInfo, PrinterColumn, Resource
from kquota.api.status import TopicQuotaStatus

DEFAULT_MUST_BE_TRUE: Final = "default must be true when set: to budget one topic, omit default and set name"
TOPIC_DOT_NAMES: Final = "name cannot be '.' or '..': Kafka does not allow these topic names"
BUDGET_EMPTY: Final = "budget needs producerByteRate, consumerByteRate or both"
CLIENT_EMPTY: Final = "each client needs user, clientId or both"
CLIENTS_REQUIRED: Final = "enforcement ClientQuotas needs clients: the users and client-ids that share the budget"
SHARES_OVER_100: Final = "the shares of clients add up to more than 100 (percent of the budget)"
CLIENTS_DUPLICATE: Final = "clients lists the same user and clientId more than once"
DEFAULT_TOPIC_CLIENT_QUOTAS: Final = (
    "the default topic budget cannot use enforcement ClientQuotas: a client quota limits a client on "
    "all topics together, so a budget that applies to each topic separately cannot be divided into "
    "client quotas; use Monitor or TopicConfig"
)

MAX_CLIENTS: Final = 100

Enforcement = Literal["Monitor", "ClientQuotas", "TopicConfig"]


class TopicRef(SpecModel):
    """The topic: name for one topic, or default: true for every topic without its own TopicQuota."""

    name: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_TOPIC_LENGTH,
        pattern=TOPIC_NAME_PATTERN,
        description="The Kafka topic name (letters, digits, '.', '_', '-'; at most 249 characters).",
    )
    default: bool | None = Field(
        None,
        description="true declares the default budget (KIP-1010's default topic quota) for every topic "
        "without its own TopicQuota. Set either name or default: true. Today it is a declaration only: "
        "with Monitor no usage is reported for it, ClientQuotas is not allowed with it, and TopicConfig "
        "is not supported by the brokers (see enforcement).",
    )

    __rules__: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "has(self.name) != has(self.default)", NAME_XOR_DEFAULT, lambda s: (s.name is None) != (s.default is None)
        ),
        Rule("!has(self.default) || self.default", DEFAULT_MUST_BE_TRUE, lambda s: s.default is not False),
        Rule(
            "!has(self.name) || (self.name != '.' && self.name != '..')",
            TOPIC_DOT_NAMES,
            lambda s: s.name not in {".", ".."},
        ),
    )


class TopicBudget(SpecModel):
    """Bytes per second for the whole topic, summed over all brokers. Set at least one."""

    model_config = ConfigDict(json_schema_extra={"minProperties": 1})

    producer_byte_rate: ByteRate | None = Field(
        None, description="Produce bytes per second into the topic, all brokers together. " + BYTE_RATE_DOC
    )
    consumer_byte_rate: ByteRate | None = Field(
        None, description="Fetch bytes per second from the topic, all brokers together. " + BYTE_RATE_DOC
    )

    __rules__: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "has(self.producerByteRate) || has(self.consumerByteRate)",
            BUDGET_EMPTY,
            lambda s: s.producer_byte_rate is not None or s.consumer_byte_rate is not None,
        ),
    )


class TopicClient(SpecModel):
    """A client that uses the topic and its share of the budget."""

    user: EntityName | None = Field(None, description="The Kafka user principal: {name: ...} or {default: true}.")
    client_id: EntityName | None = Field(None, description="The client.id: {name: ...} or {default: true}.")
    share: int = Field(
        ge=1,
        le=100,
        description="Percent of the budget this client gets (1-100). Shares of all clients add up to at most "
        "100; the rest is headroom.",
    )

    __rules__: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "has(self.user) || has(self.clientId)",
            CLIENT_EMPTY,
            lambda s: s.user is not None or s.client_id is not None,
        ),
    )

    def key(self) -> tuple[EntityName | None, EntityName | None]:
        return (self.user, self.client_id)


def _clients_unique(clients: list[TopicClient]) -> bool:
    keys = [c.key() for c in clients]
    return all(keys.count(k) == 1 for k in keys)


# Two clients are the same entity when both have (or both lack) each part and the parts are equal.
_SAME_PART = "(has(a.{p}) ? has(b.{p}) && b.{p} == a.{p} : !has(b.{p}))"
_CLIENTS_UNIQUE_RULE: Final = (
    "self.all(a, self.filter(b, "
    + _SAME_PART.format(p="user")
    + " && "
    + _SAME_PART.format(p="clientId")
    + ").size() == 1)"
)


class TopicQuotaSpec(SpecModel):
    """The desired topic budget: which topic, how many bytes per second, and how to enforce it."""

    cluster_ref: ClusterName | None = Field(None, description=CLUSTER_REF_DOC)
    topic: TopicRef = Field(description="The topic: {name: ...} or {default: true}.")
    budget: TopicBudget = Field(
        description="Bytes per second for the whole topic across all brokers; set at least one rate."
    )
    enforcement: Enforcement = Field(
        "Monitor",
        description="How the budget is enforced. Monitor (default): change nothing on the brokers; status "
        "shows each broker's allowance from the topic's leader layout and, with metrics configured on the "
        "KafkaCluster, the topic's traffic against the budget (OverBudget). ClientQuotas: give each "
        "client in clients its share of the budget as a client quota, budget x share x (most leaders of "
        "the topic on one broker) / partitions per broker, recomputed when leadership moves; these go "
        "through the same ownership, conflict and tenancy rules as ClientQuotas, and a client quota "
        "limits the client on all topics together. TopicConfig: meant for KIP-1010's producer.byte.rate / "
        "consumer.byte.rate topic configs; no Kafka release has them and this kquota version does not "
        "write them, so nothing is changed and the TopicQuota reports Ready=False with reason "
        "UnsupportedByBroker.",
    )
    clients: Annotated[
        list[TopicClient] | None,
        Cel(Rule(_CLIENTS_UNIQUE_RULE, CLIENTS_DUPLICATE, lambda v: v is None or _clients_unique(v))),
    ] = Field(
        None,
        max_length=MAX_CLIENTS,
        description="The clients that share the topic and their shares. Required (non-empty) with "
        "enforcement ClientQuotas; not used by Monitor and TopicConfig.",
    )

    __rules__: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "self.enforcement != 'ClientQuotas' || (has(self.clients) && size(self.clients) > 0)",
            CLIENTS_REQUIRED,
            lambda s: s.enforcement != "ClientQuotas" or bool(s.clients),
        ),
        Rule(
            "!has(self.clients) || self.clients.map(c, c.share).sum() <= 100",
            SHARES_OVER_100,
            lambda s: s.clients is None or sum(c.share for c in s.clients) <= 100,
            field_path=".clients",
        ),
        Rule(
            "!has(self.topic) || !has(self.topic.default) || !self.topic.default || self.enforcement != 'ClientQuotas'",
            DEFAULT_TOPIC_CLIENT_QUOTAS,
            lambda s: not s.topic.default or s.enforcement != "ClientQuotas",
        ),
    )


class TopicQuota(Resource):
    """A bandwidth budget for one Kafka topic (or the default budget for every topic).

    Kafka enforces quotas per client, not per topic: the operator reports the topic's allowance
    per broker (and, with metrics, its usage) against the budget and, with enforcement
    ClientQuotas, turns the budget into client quotas.
    """

    crd: ClassVar[CrdInfo] = CrdInfo(
        kind="TopicQuota",
        plural="topicquotas",
        scope="Namespaced",
        short_names=("tq",),
        printer_columns=(
            PrinterColumn("Topic", ".spec.topic.name", description="The topic (empty for the default budget)."),
            PrinterColumn("Producer", ".spec.budget.producerByteRate", description="Produce budget, bytes/s."),
            PrinterColumn("Consumer", ".spec.budget.consumerByteRate", description="Fetch budget, bytes/s."),
            PrinterColumn("Enforcement", ".spec.enforcement"),
            PrinterColumn("Cluster", ".spec.clusterRef", description="The KafkaCluster.", priority=1),
            READY_COLUMN,
            AGE_COLUMN,
        ),
    )

    kind: Literal["TopicQuota"] = "TopicQuota"
    spec: TopicQuotaSpec
    status: TopicQuotaStatus | None = None
