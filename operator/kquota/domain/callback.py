"""Brokers that run a client quota callback: what kquota can and cannot promise about enforcement.

A broker with ``client.quota.callback.class`` set (KIP-257; Strimzi's quota
plugin is one) asks that class for every produce, fetch, request and controller
mutation quota instead of looking up the ``users``/``clients`` entity configs.
kquota still writes the keys, and the brokers store them, but whether they
throttle anyone is the callback's decision. So a quota resource on such a
cluster is not reported ``Applied`` as if enforced: it says the callback
decides, unless the KafkaCluster states that its callback enforces the entity
quotas (``spec.quotaCallback.honoursEntityQuotas``). Connection rate quotas of
IP entities are not the callback's and are unaffected.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from kquota.domain.entities import Entity
from kquota.domain.status import Condition, Outcome, Reason

#: The broker config that names the callback class (empty or absent: Kafka's own quota logic).
CALLBACK_CONFIG = "client.quota.callback.class"
#: The condition a quota resource and its KafkaCluster carry while a callback is configured.
CONDITION = "QuotaCallback"


def callbacks_from_configs(configs: Mapping[int, Mapping[str, str]]) -> dict[int, str]:
    """Each broker's callback class, for the brokers that have one."""
    out = {}
    for broker, values in configs.items():
        cls = (values.get(CALLBACK_CONFIG) or "").strip()
        if cls and cls.lower() != "null":
            out[broker] = cls
    return out


def callback_summary(callbacks: Mapping[int, str]) -> str:
    """``broker(s) 1, 2 run client.quota.callback.class=X``, one clause per class."""
    by_class: dict[str, list[int]] = {}
    for broker, cls in sorted(callbacks.items()):
        by_class.setdefault(cls, []).append(broker)
    return "; ".join(
        f"broker{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))} run{'' if len(ids) > 1 else 's'} "
        f"{CALLBACK_CONFIG}={cls}"
        for cls, ids in sorted(by_class.items())
    )


def cluster_condition(callbacks: Mapping[int, str] | None, honoured: bool) -> Condition:
    """The KafkaCluster's ``QuotaCallback`` condition (``callbacks`` None: the brokers would not say)."""
    if callbacks is None:
        return Condition(
            CONDITION, "Unknown", "NotAuthorized", f"cannot read {CALLBACK_CONFIG}: the brokers refused DescribeConfigs"
        )
    if not callbacks:
        return Condition(
            CONDITION,
            "False",
            "NotConfigured",
            f"no broker sets {CALLBACK_CONFIG}: Kafka's own quota logic enforces quotas",
        )
    summary = callback_summary(callbacks)
    if honoured:
        return Condition(
            CONDITION,
            "True",
            "Honoured",
            f"{summary}; spec.quotaCallback.honoursEntityQuotas says it enforces entity quotas",
        )
    return Condition(
        CONDITION,
        "True",
        "Detected",
        f"{summary}: that class decides client quotas, and the quota resources on this cluster say so instead of "
        "Applied; if it enforces the users/clients entity quotas, set spec.quotaCallback.honoursEntityQuotas: true",
    )


def with_callback(
    outcome: Outcome, entities: Iterable[Entity], callbacks: Mapping[int, str], honoured: bool
) -> Outcome:
    """``outcome`` as it must read when the brokers run a quota callback.

    Only an ``Applied`` outcome changes (anything else already says why it is
    not live), and only for a resource with a user or client-id entity.
    """
    if not callbacks or outcome.reason is not Reason.APPLIED or all(e.has_ip for e in entities):
        return outcome
    summary = callback_summary(callbacks)
    if honoured:
        cond = Condition(CONDITION, "True", "Honoured", f"{summary}; the KafkaCluster says it enforces entity quotas")
        return dataclasses.replace(outcome, conditions=(*outcome.conditions, cond))
    message = (
        f"set on the brokers, but {summary}, which decides client quotas itself and may ignore this quota; "
        "kquota cannot tell whether it is enforced (if the callback enforces entity quotas, set "
        "spec.quotaCallback.honoursEntityQuotas: true on the KafkaCluster)"
    )
    cond = Condition(CONDITION, "True", "Detected", summary)
    return dataclasses.replace(
        outcome, reason=Reason.QUOTA_CALLBACK, message=message, conditions=(*outcome.conditions, cond)
    )
