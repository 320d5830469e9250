"""A stand-in for Strimzi's User Operator: what it does to client quotas, nothing else.

Written from Strimzi's user-operator sources (QuotasOperator, KafkaUserOperator,
0.48-1.2): every cycle it reads every quota entity, then

* for each KafkaUser labelled ``strimzi.io/cluster=<kafka>``: sets its
  ``spec.quotas`` on ``users/<principal>`` (``CN=<name>`` for TLS users), or
  clears the four keys it manages when there are none, and clears them on the
  user's other name form;
* for each other user with a ``users/<name>`` quota: clears the four keys,
  unless the name matches ``STRIMZI_IGNORED_USERS_PATTERN`` (Java ``matches``:
  the whole name), read from the Kafka each cycle;
* never touches ``{user, client-id}`` pairs, client-ids, IPs or ``<default>``.

Strimzi's period is 120 s; tests run it every couple of seconds so one test
sees dozens of its cycles meet kquota's drift passes.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

from harness.kube_apiserver import KubeAPIServer

from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.plan import EntityChange, QuotaOp
from kquota.domain.strimzi import ignored_pattern, user_principal
from kquota.kafka.admin import QuotaAdmin
from kquota.kafka.settings import ConnectionSettings

#: The keys the User Operator manages (KafkaUser spec.quotas -> Kafka quota key).
MANAGED = {
    "producerByteRate": QuotaKey.PRODUCER_BYTE_RATE,
    "consumerByteRate": QuotaKey.CONSUMER_BYTE_RATE,
    "requestPercentage": QuotaKey.REQUEST_PERCENTAGE,
    "controllerMutationRate": QuotaKey.CONTROLLER_MUTATION_RATE,
}


class FakeUserOperator:
    """Runs the User Operator's quota cycle in a thread until stopped; counts cycles and changes."""

    def __init__(self, kube: KubeAPIServer, bootstrap: str, namespace: str, kafka: str, period: float = 2.0) -> None:
        self.kube, self.namespace, self.kafka, self.period = kube, namespace, kafka, period
        self.admin = QuotaAdmin(ConnectionSettings(bootstrap_servers=bootstrap))
        self.cycles = 0
        #: Every (entity, key, value) it wrote: None clears.
        self.writes: list[tuple[Entity, QuotaKey, float | None]] = []
        #: Cycles that failed, and why (a test that expects cycles checks this too).
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fake-user-operator", daemon=True)

    def __enter__(self) -> FakeUserOperator:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        self.admin.close()

    def _get(self, *args: str) -> Any:
        return json.loads(self.kube.kubectl("get", *args, "-n", self.namespace, "-o", "json").stdout)

    def cycle(self) -> None:
        kafka = self._get("kafkas.kafka.strimzi.io", self.kafka)
        pattern = ignored_pattern(kafka)
        users = self._get("kafkausers.kafka.strimzi.io", "-l", f"strimzi.io/cluster={self.kafka}")["items"]
        live = self.admin.describe_all()
        wanted: dict[Entity, dict[QuotaKey, float | None]] = {}
        handled: set[str] = set()
        for ku in users:
            principal = user_principal(ku)
            name = ku["metadata"]["name"]
            quotas = (ku.get("spec") or {}).get("quotas") or {}
            wanted[Entity.for_user(principal)] = {
                k: (float(quotas[c]) if c in quotas else None) for c, k in MANAGED.items()
            }
            other = name if principal != name else f"CN={name}"
            wanted[Entity.for_user(other)] = dict.fromkeys(MANAGED.values())
            handled |= {principal, name}
        for entity in live:
            if not entity.has_user or entity.has_client_id or entity.has_ip or entity.user is None:
                continue
            user = entity.user
            if user in handled or (pattern is not None and re.fullmatch(pattern, user)):
                continue
            wanted.setdefault(entity, dict.fromkeys(MANAGED.values()))
        alterations = []
        for entity, values in wanted.items():
            have = live.get(entity, {})
            ops = [QuotaOp(k, v) for k, v in values.items() if have.get(k) != v and not (v is None and k not in have)]
            if ops:
                alterations.append(EntityChange(entity, tuple(ops)))
                self.writes.extend((entity, op.key, op.value) for op in ops)
        if alterations:
            self.admin.alter(alterations)
        self.cycles += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.cycle()
            except Exception as exc:  # noqa: BLE001 - a stand-in keeps cycling, as the real one does
                self.errors.append(repr(exc))
            self._stop.wait(self.period)
