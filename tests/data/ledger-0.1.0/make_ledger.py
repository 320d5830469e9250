"""Writes configmaps.yaml: the ownership ledger kquota 0.1.0 keeps for cluster ``legacy``.

Run once, from the 0.1.0 code (``git archive`` of the commit in README.md, on
PYTHONPATH), never again: the file is a record of what that release wrote, and
later code must keep reading it as it is. The ConfigMaps are the bodies
``LedgerStore.save`` sends to the API server (``Kube.put_config_map``),
recorded by a stand-in for the API client; the API server adds only its own
metadata (uid, resourceVersion, timestamps) to them.

    python tests/data/ledger-0.1.0/make_ledger.py > tests/data/ledger-0.1.0/configmaps.yaml
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import yaml

from kquota import __version__
from kquota.domain import ledger as fmt
from kquota.domain.entities import Entity, QuotaKey
from kquota.k8s.ledger import LedgerStore

CLUSTER = "legacy"
NAMESPACE = "kquota-system"
P, C = QuotaKey.PRODUCER_BYTE_RATE, QuotaKey.CONSUMER_BYTE_RATE
R, M, N = QuotaKey.REQUEST_PERCENTAGE, QuotaKey.CONTROLLER_MUTATION_RATE, QuotaKey.CONNECTION_CREATION_RATE

#: Every entity form, default parts, a user literally named <default>, unicode, commas and `=`.
LEDGER: dict[Entity, dict[QuotaKey, float]] = {
    Entity.for_user("alice"): {P: 1048576.0, C: 2097152.0},
    Entity.for_user(None): {P: 104857600.0},
    Entity.for_user("<default>"): {R: 50.0},
    Entity.for_user("CN=app,OU=payments,O=Example"): {M: 5.5},
    Entity.for_user("ünïcødé-用户"): {C: 4096.0},
    Entity.for_client("reporting-job"): {C: 524288.0},
    Entity.for_client("a=b,c=d"): {P: 8192.0},
    Entity.for_client(None): {R: 200.0},
    Entity.for_pair("bob", "ingest"): {P: 65536.0, R: 75.0},
    Entity.for_pair(None, "batch-клиент"): {C: 32768.0},
    Entity.for_pair("carol", None): {P: 16384.0},
    Entity.for_ip("10.0.0.7"): {N: 20.0},
    Entity.for_ip(None): {N: 1000.0},
}


class Recorder:
    """Takes the API calls LedgerStore.save makes and keeps the ConfigMaps they carry."""

    def __init__(self) -> None:
        self.written: dict[str, dict[str, Any]] = {}

    async def put_config_map(self, namespace: str, name: str, labels: dict[str, str], data: dict[str, str]) -> None:
        self.written[name] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "data": data,
        }

    async def list_config_maps(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return list(self.written.values())


def main() -> int:
    if __version__ != "0.1.0" or fmt.FORMAT_VERSION != 1:
        print(f"this records kquota 0.1.0's ledger; this is kquota {__version__}", file=sys.stderr)
        return 1
    kube = Recorder()
    store = LedgerStore(kube, NAMESPACE, CLUSTER)  # type: ignore[arg-type]  # a stand-in for Kube
    asyncio.run(store.save(LEDGER, LEDGER.keys()))
    items = [kube.written[name] for name in sorted(kube.written)]
    header = (
        f"# The ownership ledger kquota {__version__} wrote for KafkaCluster {CLUSTER!r} (format version "
        f"{fmt.FORMAT_VERSION}).\n# Test data: made once by make_ledger.py (see README.md); never regenerate.\n"
    )
    sys.stdout.write(header + yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}, allow_unicode=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
