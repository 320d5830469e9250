"""What Strimzi owns on a Kafka cluster it runs, read from its ``Kafka`` and ``KafkaUser`` objects.

Strimzi (checked against its 0.42-1.2 sources) writes client quotas in two places:

* The **User Operator** (``spec.entityOperator.userOperator``) reconciles the
  ``users/<name>`` entity of every KafkaUser (``<name>`` for SCRAM users,
  ``CN=<name>`` for TLS users): it sets the KafkaUser's ``spec.quotas`` or,
  without them, clears producer_byte_rate, consumer_byte_rate,
  request_percentage and controller_mutation_rate. Every full reconciliation
  (120 s by default) it also clears those keys on the ``users/<name>`` of every
  user that has quotas but no KafkaUser, unless the name matches its
  ``STRIMZI_IGNORED_USERS_PATTERN`` (a Java regex matched against the whole
  name; Strimzi 0.48 and later; set through
  ``spec.entityOperator.template.userOperatorContainer.env``). It never touches
  ``{user, client-id}`` pairs, client-id entities, IPs or ``<default>``.
* The **Cluster Operator** (0.42 and later) owns ``users/<default>``: it sets it
  from ``spec.kafka.quotas`` with ``type: kafka`` and clears it otherwise.

A ClientQuota for an entity Strimzi owns would be changed back within
minutes, so kquota refuses it (``OwnedByStrimzi``) and never touches the
entity, Adopt included. Everything else stays kquota's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kquota.domain.entities import Entity

#: The User Operator setting that hands users to another quota manager.
IGNORED_USERS_ENV = "STRIMZI_IGNORED_USERS_PATTERN"
#: Where that setting goes in a Strimzi Kafka.
IGNORED_USERS_PATH = "spec.entityOperator.template.userOperatorContainer.env"
#: First Strimzi versions with the ignore pattern and with Cluster Operator-managed default quotas.
IGNORE_PATTERN_SINCE = (0, 48)
DEFAULT_QUOTAS_SINCE = (0, 42)


def parse_version(text: str | None) -> tuple[int, int] | None:
    """``0.45.0`` -> (0, 45); None when absent or unreadable."""
    m = re.match(r"^\s*(\d+)\.(\d+)", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


@dataclass(frozen=True)
class Listener:
    """One of a Strimzi Kafka's listeners, as kquota connects through it."""

    name: str
    bootstrap_servers: str
    tls: bool
    #: ``scram-sha-512``, ``tls``, ``custom``... or None (no authentication).
    authentication: str | None


class StrimziError(ValueError):
    """A Strimzi object is missing what kquota needs; the message says what."""


def listener(kafka: Mapping[str, Any], name: str) -> Listener:
    """The listener ``name`` of a Kafka object: address from its status, TLS and authentication from its spec."""
    meta = kafka.get("metadata") or {}
    where = f"Kafka {meta.get('namespace')}/{meta.get('name')}"
    spec_listeners = ((kafka.get("spec") or {}).get("kafka") or {}).get("listeners") or []
    spec = next((item for item in spec_listeners if isinstance(item, Mapping) and item.get("name") == name), None)
    if spec is None:
        names = ", ".join(str(item.get("name")) for item in spec_listeners if isinstance(item, Mapping)) or "none"
        raise StrimziError(f"{where} has no listener {name!r} in spec.kafka.listeners (it has: {names})")
    statuses = (kafka.get("status") or {}).get("listeners") or []
    status = next((item for item in statuses if isinstance(item, Mapping) and item.get("name") == name), None)
    bootstrap = str((status or {}).get("bootstrapServers") or "")
    if not bootstrap:
        raise StrimziError(f"{where} has no address for listener {name!r} in status.listeners yet (is it Ready?)")
    auth = spec.get("authentication") or {}
    return Listener(name, bootstrap, bool(spec.get("tls")), str(auth["type"]) if auth.get("type") else None)


def user_principal(kafka_user: Mapping[str, Any]) -> str:
    """The principal name the brokers see for a KafkaUser (``CN=<name>`` for TLS users)."""
    meta = kafka_user.get("metadata") or {}
    status_name = (kafka_user.get("status") or {}).get("username")
    if status_name:
        return str(status_name)
    auth = ((kafka_user.get("spec") or {}).get("authentication") or {}).get("type")
    name = str(meta.get("name") or "")
    return f"CN={name}" if auth in ("tls", "tls-external") else name


@dataclass(frozen=True)
class StrimziOwnership:
    """Which quota entities Strimzi manages on one Kafka cluster."""

    #: ``namespace/name`` of the Kafka.
    kafka: str
    #: Principal name -> ``namespace/name`` of its KafkaUser.
    kafka_users: Mapping[str, str] = field(default_factory=dict)
    #: A User Operator runs for this Kafka.
    user_operator: bool = False
    #: Its STRIMZI_IGNORED_USERS_PATTERN, when set.
    ignored_pattern: str | None = None
    #: The Strimzi version that last reconciled the Kafka (status.operatorLastSuccessfulVersion).
    version: tuple[int, int] | None = None

    @property
    def owns_default_user(self) -> bool:
        # Unknown version: assume a current Strimzi (the safe side: never fight it).
        return self.version is None or self.version >= DEFAULT_QUOTAS_SINCE

    def _ignored(self, user: str) -> bool:
        if self.ignored_pattern is None:
            return False
        try:
            return re.fullmatch(self.ignored_pattern, user) is not None
        except re.error:
            return False

    def owner(self, entity: Entity) -> str | None:
        """Why Strimzi owns ``entity``'s quotas (None: it does not)."""
        if not entity.has_user or entity.has_client_id or entity.has_ip:
            return None
        if entity.user is None:
            if not self.owns_default_user:
                return None
            return (
                f"Strimzi's Cluster Operator manages users/<default> for Kafka {self.kafka} (spec.kafka.quotas "
                "with type: kafka sets it, anything else clears it)"
            )
        ku = self.kafka_users.get(entity.user)
        if ku is not None and self.user_operator:
            return (
                f"KafkaUser {ku} is managed by Strimzi's User Operator, which sets or clears this user's quotas "
                "(set them in the KafkaUser's spec.quotas, or delete the KafkaUser to hand the user to kquota)"
            )
        if self.user_operator and not self._ignored(entity.user):
            return (
                f"Strimzi's User Operator for Kafka {self.kafka} clears the quotas of users without a KafkaUser "
                f"unless {IGNORED_USERS_ENV} matches them; {self.handover_hint()}"
            )
        return None

    def handover_hint(self) -> str:
        """How to hand users without a KafkaUser to kquota, for this Strimzi version."""
        if self.version is not None and self.version < IGNORE_PATTERN_SINCE:
            return (
                f"Strimzi {self.version[0]}.{self.version[1]} has no such setting ({IGNORED_USERS_ENV} needs 0.48 "
                "or later): upgrade Strimzi, or set these users' quotas on ClientQuotas with a client-id too"
            )
        current = f" (now {self.ignored_pattern!r})" if self.ignored_pattern else ""
        return (
            f"set {IGNORED_USERS_ENV}{current} in the Kafka's {IGNORED_USERS_PATH} to a regex matching the users "
            "kquota should own, e.g. '^kq-.*'"
        )

    def summary(self) -> str:
        """The KafkaCluster's StrimziUsers condition message."""
        parts = [f"Kafka {self.kafka}"]
        if self.user_operator:
            parts.append(
                f"User Operator manages the users/<name> quotas of {len(self.kafka_users)} KafkaUser(s)"
                + (
                    f" and leaves users matching {IGNORED_USERS_ENV}={self.ignored_pattern!r} to kquota"
                    if self.ignored_pattern
                    else f" and clears those of every other user: {self.handover_hint()}"
                )
            )
        else:
            parts.append("no User Operator: users/<name> quotas are kquota's")
        if self.owns_default_user:
            parts.append("users/<default> is the Cluster Operator's")
        return "; ".join(parts)


def ignored_pattern(kafka: Mapping[str, Any]) -> str | None:
    """The User Operator's STRIMZI_IGNORED_USERS_PATTERN from a Kafka object, if set."""
    eo = (kafka.get("spec") or {}).get("entityOperator") or {}
    container = ((eo.get("template") or {}).get("userOperatorContainer") or {}).get("env") or []
    for env in container:
        if isinstance(env, Mapping) and env.get("name") == IGNORED_USERS_ENV and env.get("value"):
            return str(env["value"])
    return None


def ownership(kafka: Mapping[str, Any], kafka_users: Sequence[Mapping[str, Any]]) -> StrimziOwnership:
    """What Strimzi owns for this Kafka, given the KafkaUsers labelled ``strimzi.io/cluster=<its name>``."""
    meta = kafka.get("metadata") or {}
    eo = (kafka.get("spec") or {}).get("entityOperator") or {}
    users = {}
    for ku in kafka_users:
        km = ku.get("metadata") or {}
        ref = f"{km.get('namespace')}/{km.get('name')}"
        # The User Operator reconciles both name forms of a user (it sets the one its
        # authentication gives and clears the other), so both are Strimzi's.
        users[user_principal(ku)] = ref
        users.setdefault(str(km.get("name") or ""), ref)
    return StrimziOwnership(
        kafka=f"{meta.get('namespace')}/{meta.get('name')}",
        kafka_users=users,
        user_operator="userOperator" in eo and eo.get("userOperator") is not None,
        ignored_pattern=ignored_pattern(kafka),
        version=parse_version((kafka.get("status") or {}).get("operatorLastSuccessfulVersion")),
    )
