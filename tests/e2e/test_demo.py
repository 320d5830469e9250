"""`make demo`, the README's first command, as a new user runs it.

The demo starts its own Kafka broker and kube-apiserver, runs the operator, applies
``examples/`` and shows the resources' status beside what Kafka's own
``kafka-configs`` reports. This runs it once (``--once``: show, then stop) and
checks what the user is shown: every example resource Ready, every user quota of
the examples on the broker with the example's values, and nothing left behind.
"""

from __future__ import annotations

import re
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from kquota.api.quantity import parse_quantity

pytestmark = [pytest.mark.e2e]

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
#: The spec.quota fields of a ClientQuota and the Kafka keys they set.
KEYS = {
    "producerByteRate": "producer_byte_rate",
    "consumerByteRate": "consumer_byte_rate",
    "requestPercentage": "request_percentage",
}


def _examples() -> list[dict[str, Any]]:
    return [d for f in sorted(EXAMPLES.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]


def _section(out: str, title: str) -> str:
    """The text the demo printed under the banner starting with ``title`` (up to the next banner)."""
    match = re.search(rf"^== {re.escape(title)}[^\n]*==\n(.*?)(?=^== |\Z)", out, re.S | re.M)
    assert match, f"the demo printed no {title!r} section:\n{out[-3000:]}"
    return match.group(1)


def _ready_column(table: str) -> dict[str, str]:
    """Each resource row's READY cell, by its NAME cell, over the tables `kubectl get kquota -A` prints."""
    cells: dict[str, str] = {}
    header: list[str] = []
    for line in table.splitlines():
        if not line.strip():
            continue
        if line.startswith("NAMESPACE"):
            header = line.split()
            continue
        row = line.split()
        # A row's optional cells (e.g. no producer rate) are blank, so READY is found
        # from the right: it is followed by AGE only.
        assert header[-2:] == ["READY", "AGE"], header
        name = next(c for c in row if ".kquota.io/" in c)
        cells[name] = row[-2]
    return cells


@pytest.fixture(scope="module")
def demo_output() -> str:
    run = subprocess.run(
        [sys.executable, "-m", "harness", "demo", "--once"],
        cwd=REPO,
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, f"make demo failed ({run.returncode}):\n{run.stdout[-4000:]}\n{run.stderr[-4000:]}"
    return run.stdout


def test_every_example_resource_is_shown_ready(demo_output: str) -> None:
    docs = [d for d in _examples() if d["kind"] != "Namespace"]
    assert re.search(rf"all {len(docs)} example resources Ready after", demo_output), demo_output[-3000:]
    ready = _ready_column(_section(demo_output, "kubectl get kquota -A"))
    expected = {f"{d['kind'].lower()}.kquota.io/{d['metadata']['name']}" for d in docs}
    assert set(ready) == expected
    assert {name: cell for name, cell in ready.items() if cell != "True"} == {}


def test_kafka_holds_each_user_quota_of_the_examples(demo_output: str) -> None:
    said = _section(demo_output, "what Kafka says")
    users = [
        d
        for d in _examples()
        if d["kind"] == "ClientQuota" and set(d["spec"]["entity"]) == {"user"} and "name" in d["spec"]["entity"]["user"]
    ]
    assert users, "the examples have no ClientQuota of a named user"
    for doc in users:
        user = doc["spec"]["entity"]["user"]["name"]
        line = re.search(rf"^Quota configs for user-principal '{re.escape(user)}' are (.*)$", said, re.M)
        assert line, f"kafka-configs shows no quota for user {user!r}:\n{said}"
        live = {k: Decimal(v) for k, v in (pair.split("=") for pair in line.group(1).split(", "))}
        for field, key in KEYS.items():
            if field in doc["spec"]["quota"]:
                assert live.get(key) == parse_quantity(str(doc["spec"]["quota"][field])), (user, key, live)


def test_the_demo_leaves_nothing_behind(demo_output: str) -> None:
    kubeconfig = re.search(r"^export KUBECONFIG=(\S+)$", demo_output, re.M)
    assert kubeconfig, demo_output[:2000]
    workdir = Path(kubeconfig.group(1)).parents[1]
    assert workdir.name.startswith("kquota-demo-"), workdir
    assert not workdir.exists()


def test_the_demo_runs_the_shipped_defaults_and_says_what_it_changes(demo_output: str) -> None:
    """Issue #33, finding 7: the demo ran the suites' settings (shared KafkaClusters allowed, a 1 s
    removal settle, a 10 s drift check) without saying so; a user trying the README's DuplicateCluster
    there saw Contested. It runs the shipped defaults but one, and prints that one and why."""
    said = _section(demo_output, "starting the operator")
    (line,) = [s for s in said.splitlines() if s.startswith("operator settings:")]
    assert "the shipped defaults" in line and "KQUOTA_DRIFT_INTERVAL=10 (60 by default)" in line, line
    changed = set(re.findall(r"KQUOTA_[A-Z_]+", line))
    assert changed == {"KQUOTA_DRIFT_INTERVAL"}, changed
