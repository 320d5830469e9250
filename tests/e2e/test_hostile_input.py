"""Hostile input fed through the operator: the names, values and stored specs that try to break it.

A corpus of ClientQuotas is applied in one go to the real API server and the
operator, against the real broker. Every row must come out with

1. a clear status: Ready=True/Applied with ``status.entity`` naming exactly the
   entity (visible and decodable: ``unquote`` of each segment is the name), or
   Ready=False with a specific reason, message and Stalled=True;
2. no crash: the operator process is the one started for this module, alive
   throughout, answering /healthz, with no failed pass and no traceback;
3. no hot retry loop: in a quiet window after everything settled, no alter
   request and no status write is sent although passes keep running;
4. nothing half-applied: the brokers hold exactly the accepted rows' values, no
   key of a refused row, and entries seeded by hand with kafka-configs are
   untouched; after deleting the corpus none of its keys is left.

Hostile names are used as user, client-id and (user, client-id) pair: unicode
(CJK, emoji and a ZWJ sequence, NFD vs NFC, right-to-left letters and the
RLO override), the longest names the CRD admits (1024 characters, ASCII and
four-byte emoji), URL-encoding edge cases that must stay distinct (``%``,
``%25``, ``%2F``, ``a/b``, ``a+b``, ``a b``, ``a%20b``, ``%3Cdefault%3E``),
TLS DNs with escaped and bare commas and ``=`` in values, quotes and
backslashes, padding spaces, and the control and invisible characters the CRD
admits (newline, tab, ESC, NUL, DEL, C1, no-break space, BOM, U+FFFD). A user
literally named ``<default>`` is checked against the default user on the
broker (kafka-configs tells ``user-principal '<default>'`` from ``the default
user-principal``) and in status.

Broker-refused values: on Kafka 4.3.1 and 3.9.2, every single value the CRD
admits is accepted by AlterClientQuotas (tried: byte rates up to 2^53-1,
requestPercentage from 5e-324 to 1e6, connectionCreationRate up to 2^31-1,
IPs ``::``, ``0.0.0.0``, IPv4-compatible IPv6, names
with NUL, control characters and 4096 UTF-8 bytes); the broker's own checks
(value <= 0, fractions, INT overflow, keys per entity type, empty names,
unresolvable hosts, ip combined with user) are all made by the CRD and again
by the operator. The one refusal of admitted input found is in aggregate: a
pass whose records exceed the KRaft controller's 8 MiB batch cap (hundreds of
entities with maximal names) failed whole with UNKNOWN_SERVER_ERROR and made
the controller renounce leadership; every resource then said Rejected. The
adapter now cuts requests by bytes as well as ops; the bulk test below keeps
it so. With that fixed, the Rejected path is not reachable with admitted
input on a healthy cluster, so the refusals are covered the other way round:
specs the broker would refuse, stored while the CRD was looser (an older
chart, a server without CEL) and still there after it was tightened. The
operator must catch them itself (InvalidSpec, naming the field) and never
send them.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import pytest
import yaml
from harness.kube_apiserver import REPO
from harness.operator_proc import client_quota, condition
from harness.stack import Stack

from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.plan import EntityChange, QuotaOp
from kquota.kafka.admin import QuotaAdmin
from kquota.kafka.batching import record_bytes
from kquota.kafka.settings import ConnectionSettings
from tests.integration.test_quota_adapter import configs_wording, kafka_configs_quotas
from tests.plugins.resilience import Resilience
from tests.support.chart import chart_liveness_probe
from tests.support.quotas import C, N, P, R

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

Live = dict[Entity, dict[QuotaKey, float]]

#: Generous: two shared cores, other suites running.
SETTLE_TIMEOUT = 300.0
#: The quiet window in which nothing may be sent (several drift passes long).
QUIET_SECONDS = 20.0
#: Alter requests and status writes allowed in the quiet window: none, the state has converged.
QUIET_BOUND = 0
#: KRaft's cap on one metadata record batch (KafkaRaftClient.MAX_BATCH_SIZE_BYTES).
KRAFT_MAX_BATCH_BYTES = 8 * 1024 * 1024

# -- the corpus -------------------------------------------------------------------

#: (id, name): each is used as a user, a client-id and a (user, client-id) pair.
NAMES: list[tuple[str, str]] = [
    ("CJK", "数据管道-用户"),
    ("emoji", "🚀team🔥"),
    ("emoji ZWJ sequence", "👩\u200d💻"),
    ("combining mark (NFD cafe+U+0301)", "cafe\u0301"),
    ("precomposed (NFC café)", "caf\u00e9"),
    ("right-to-left letters", "שלום-مرحبا"),
    ("right-to-left override", "invoice\u202egpj.exe"),
    ("longest ASCII (1024)", "x" * 1024),
    ("longest astral (1024 emoji, 4096 bytes)", "\U0001f642" * 1024),
    ("%", "%"),
    ("%25", "%25"),
    ("%2F", "%2F"),
    ("a/b", "a/b"),
    ("a+b", "a+b"),
    ("a b", "a b"),
    ("a%20b", "a%20b"),
    ("%3Cdefault%3E", "%3Cdefault%3E"),
    ("literally <default>", "<default>"),
    ("TLS DN, escaped comma", "CN=app,OU=x=y,O=Acme\\, Inc."),
    ("TLS DN, bare comma", "CN=app,OU=x=y,O=Acme, Inc."),
    ("quotes and backslashes", 'it\'s "q" \\ \\\\'),
    ("equals and commas", "a=b,c=d=,"),
    ("leading and trailing spaces", " padded "),
    ("newline", "line1\nline2"),
    ("tab and ANSI escape", "tab\there\x1b[31mred"),
    ("NUL", "nul\x00byte"),
    ("DEL and C1 next-line", "del\x7f\x85"),
    ("no-break space", "no\u00a0break"),
    ("byte-order mark", "\ufeffbom"),
    ("replacement character", "\ufffd"),
]

#: Default entities next to names that look like them.
DEFAULT_FORMS: list[tuple[str, dict[str, Any], Entity]] = [
    ("default user", {"user": {"default": True}}, Entity.for_user(None)),
    ("default client-id", {"clientId": {"default": True}}, Entity.for_client(None)),
    (
        "user literally <default> + default client-id",
        {"user": {"name": "<default>"}, "clientId": {"default": True}},
        Entity.for_pair("<default>", None),
    ),
    (
        "default user + client-id literally <default>",
        {"user": {"default": True}, "clientId": {"name": "<default>"}},
        Entity.for_pair(None, "<default>"),
    ),
    (
        "default user + default client-id",
        {"user": {"default": True}, "clientId": {"default": True}},
        Entity.for_pair(None, None),
    ),
]

#: IP forms the CRD admits: canonical spellings only (tests/corpus/admission has
#: the upper-case, zero-padded and IPv4-compatible spellings it rejects, since
#: Kafka would keep each spelling of one address as its own entity).
IPS: list[tuple[str, str | None]] = [
    ("ip ::", "::"),
    ("ip 0.0.0.0", "0.0.0.0"),  # noqa: S104 - a quota entity, not a bind address
    ("ip IPv4-compatible, canonical ::102:304", "::102:304"),
    ("ip ::2", "::2"),
    ("default ip", None),
    ("ip 2001:db8::1", "2001:db8::1"),
    ("ip a single zero group stays 2001:db8:0:1:1:1:1:1", "2001:db8:0:1:1:1:1:1"),
]


@dataclass(frozen=True)
class Row:
    id: str
    entity: dict[str, Any]
    quota: dict[str, Any]
    #: The broker entity the row names (None when it names none Kafka could hold).
    target: Entity | None
    #: What the brokers must hold for it (nothing for a refused row).
    values: Mapping[QuotaKey, float]
    reason: str = "Applied"
    #: Part of the Ready message of a refused row.
    message: str = ""
    #: Stored while the CRD was looser (today's admission would refuse it).
    stale: bool = False

    @property
    def accepted(self) -> bool:
        return self.reason == "Applied"


def named(name: str | None) -> dict[str, Any]:
    return {"default": True} if name is None else {"name": name}


def hostile_rows() -> list[Row]:
    rows: list[Row] = []
    for label, name in NAMES:
        for form, entity, target in (
            ("user", {"user": named(name)}, Entity.for_user(name)),
            ("client-id", {"clientId": named(name)}, Entity.for_client(name)),
            ("user+client-id", {"user": named(name), "clientId": named(name)}, Entity.for_pair(name, name)),
        ):
            i = len(rows)
            # Distinct values per row: two rows collapsing into one entity cannot both match.
            quota = {"producerByteRate": 1_000_000 + i, "requestPercentage": 100 + i / 4}
            rows.append(Row(f"{form}: {label}", entity, quota, target, {P: 1_000_000.0 + i, R: 100 + i / 4}))
    for label, entity, target in DEFAULT_FORMS:
        # Default entities apply to everyone on the shared broker: limits nobody reaches.
        value = 2**50 + len(rows)
        rows.append(Row(label, entity, {"producerByteRate": value}, target, {P: float(value)}))
    for label, ip in IPS:
        value = 2**31 - 1 if ip is None else 1000 + len(rows)
        rows.append(Row(label, {"ip": named(ip)}, {"connectionCreationRate": value}, Entity.for_ip(ip), {N: value}))
    return rows


def stale_rows(tag: str) -> list[Row]:
    """Specs the broker would refuse (or that today's CRD refuses), stored under a looser CRD."""
    u = f"stale-{tag}"

    def refused(id_: str, entity: dict[str, Any], quota: dict[str, Any], target: Entity | None, message: str) -> Row:
        return Row(id_, entity, quota, target, {}, reason="InvalidSpec", message=message, stale=True)

    return [
        refused(
            "stored: ip hostname that does not resolve (broker: not a valid IP or resolvable host)",
            {"ip": {"name": "no-such-host.invalid"}},
            {"connectionCreationRate": 5},
            Entity.for_ip("no-such-host.invalid"),
            "spec.entity.ip: name must be an IPv4 or IPv6 address",
        ),
        refused(
            "stored: ip hostname that resolves (broker: accepted as localhost's address)",
            {"ip": {"name": "localhost"}},
            {"connectionCreationRate": 5},
            Entity.for_ip("localhost"),
            "spec.entity.ip: name must be an IPv4 or IPv6 address",
        ),
        refused(
            "stored: producerByteRate 0 (broker: must be greater than 0)",
            {"user": {"name": f"{u}-zero"}},
            {"producerByteRate": 0},
            Entity.for_user(f"{u}-zero"),
            "spec.quota.producerByteRate: must be greater than zero",
        ),
        refused(
            "stored: producerByteRate 1500m (broker: fractional value)",
            {"user": {"name": f"{u}-frac"}},
            {"producerByteRate": "1500m"},
            Entity.for_user(f"{u}-frac"),
            "spec.quota.producerByteRate: must be a whole number",
        ),
        refused(
            "stored: connectionCreationRate 2^31 (broker: too large for an INT)",
            {"ip": {"name": "192.0.2.77"}},
            {"connectionCreationRate": 2**31},
            Entity.for_ip("192.0.2.77"),
            "spec.quota.connectionCreationRate: Input should be less than or equal to 2147483647",
        ),
        refused(
            "stored: requestPercentage on an ip (broker: invalid configuration key)",
            {"ip": {"name": "192.0.2.78"}},
            {"requestPercentage": 50},
            Entity.for_ip("192.0.2.78"),
            "an ip entity supports only connectionCreationRate",
        ),
        refused(
            "stored: connectionCreationRate on a user (broker: invalid configuration key)",
            {"user": {"name": f"{u}-conn"}},
            {"connectionCreationRate": 5},
            Entity.for_user(f"{u}-conn"),
            "connectionCreationRate applies only to ip entities",
        ),
        refused(
            "stored: ip together with a user (broker: invalid entity combination)",
            {"user": {"name": f"{u}-mix"}, "ip": {"name": "192.0.2.79"}},
            {"connectionCreationRate": 5},
            None,
            "ip cannot be combined with user or clientId",
        ),
        refused(
            "stored: empty user name (broker: empty user not supported)",
            {"user": {"name": ""}},
            {"producerByteRate": 5},
            None,
            "spec.entity.user.name: String should have at least 1 character",
        ),
        refused(
            "stored: 1025-character user name (broker: accepted)",
            {"user": {"name": "y" * 1025}},
            {"producerByteRate": 5},
            Entity.for_user("y" * 1025),
            "spec.entity.user.name: String should have at most 1024 characters",
        ),
        refused(
            "stored: name and default: true together",
            {"user": {"name": f"{u}-both", "default": True}},
            {"producerByteRate": 5},
            Entity.for_user(f"{u}-both"),
            "spec.entity.user: set exactly one of name or default: true",
        ),
    ]


# -- helpers -------------------------------------------------------------------------------

_TYPES = {"users": "user", "clients": "client-id", "ips": "ip"}


def decode_path(path: str) -> dict[str, str | None] | None:
    """``status.entity`` back to wire parts: ``<default>`` is the default, other segments unquote."""
    segs = path.split("/")
    if len(segs) % 2 or not segs[0]:
        return None
    out: dict[str, str | None] = {}
    for kind, seg in zip(segs[::2], segs[1::2], strict=True):
        if kind not in _TYPES:
            return None
        out[_TYPES[kind]] = None if seg == "<default>" else unquote(seg, errors="strict")
    return out


def one_line(name: str) -> bool:
    """Whether kafka-configs' line-based output can carry the name (no line break of any kind)."""
    return len(f"x{name}x".splitlines()) == 1


def short(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else f"{text[: limit - 20]}...({len(text)} chars)"


def list_quotas(stack: Stack, ns: str) -> dict[str, dict[str, Any]]:
    out = stack.kube.kubectl("get", "clientquota", "-n", ns, "-o", "json", timeout=300).stdout
    return {o["metadata"]["name"]: o for o in json.loads(out)["items"]}


def create_all(stack: Stack, objects: list[dict[str, Any]], chunk: int = 50) -> None:
    """``kubectl create`` (no last-applied annotation doubling every object's size), a List per call."""
    for i in range(0, len(objects), chunk):
        body = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects[i : i + chunk]})
        stack.kube.kubectl("create", "-f", "-", input=body, timeout=600)


def status_verdict(row: Row, obj: dict[str, Any] | None) -> tuple[bool, str]:
    """Property 1 for one row: (ok, what its status says)."""
    if obj is None:
        return False, "resource not found"
    status = obj.get("status") or {}
    ready = condition(obj)
    said = f"Ready={ready.get('status')} {ready.get('reason')}: {short(str(ready.get('message')))}"
    if status.get("observedGeneration") != obj["metadata"].get("generation"):
        return False, f"status not written for this generation ({said})"
    if row.accepted:
        shown = str(status.get("entity") or "")
        if ready.get("status") != "True" or ready.get("reason") != "Applied":
            return False, said
        if not shown.isprintable():
            return False, f"status.entity {shown!r} has characters that do not print"
        if row.target is None or decode_path(shown) != row.target.parts():
            return False, f"status.entity {short(shown)!r} does not name {row.target}"
        return True, f"Ready Applied as {short(shown)}"
    stalled = condition(obj, "Stalled")
    if ready.get("status") != "False" or ready.get("reason") != row.reason:
        return False, f"expected Ready=False {row.reason}; {said}"
    if row.message not in str(ready.get("message")):
        return False, f"message lacks {row.message!r}; {said}"
    if stalled.get("status") != "True":
        return False, f"Stalled is not True; {said}"
    return True, f"Ready=False {row.reason}: {short(str(ready.get('message')), 160)}"


def key_diff(want: Mapping[QuotaKey, float], have: Mapping[QuotaKey, float]) -> int:
    """Keys missing, extra or with another value."""
    return sum(1 for k in set(want) | set(have) if want.get(k) != have.get(k))


class Health:
    """Property 2: the operator started for this module keeps running and answering.

    "Answering" is judged as the chart's liveness probe judges it: a probe
    fails when /healthz does not answer 200 within the probe's timeout, and the
    operator is unhealthy after ``failureThreshold`` failures in a row (the
    kubelet would restart it). One slow answer on a busy machine is not a
    restart; the slowest answer is kept for the report. The checks here come
    every few seconds, more often than the probe's period, so a run of
    failures is reached sooner than the kubelet would reach it.
    """

    def __init__(self, stack: Stack) -> None:
        self.op = stack.operator
        assert self.op.proc is not None
        self.pid = self.op.proc.pid
        self.starts = self.op.starts
        self.log_at = len(self.op.log())
        self.failed_passes = self.op.metric("kquota_reconcile_passes_total", result="error")
        self.timeout, self.threshold = chart_liveness_probe()
        self.failures: list[str] = []
        self.slowest = 0.0
        self.problems: list[str] = []

    def probe(self) -> str | None:
        """One liveness probe: None when it passed, else why it failed."""
        started = time.monotonic()
        try:
            ok = self.op.healthy(timeout=self.timeout)
        except OSError as exc:
            return f"/healthz failed: {exc}"
        finally:
            self.slowest = max(self.slowest, time.monotonic() - started)
        return None if ok else "/healthz did not answer 200"

    def check(self) -> bool:
        proc = self.op.proc
        if proc is None or not proc.alive():
            self.problems.append("operator process exited")
        elif proc.pid != self.pid or self.op.starts != self.starts:
            self.problems.append("operator was restarted")
        else:
            failed = self.probe()
            self.failures = [*self.failures, failed] if failed else []
            if len(self.failures) >= self.threshold:
                self.problems.append(
                    f"{len(self.failures)} liveness probes in a row failed "
                    f"(timeout {self.timeout:.0f} s): {'; '.join(self.failures)}"
                )
        return not self.problems

    def final(self) -> list[str]:
        if self.check():
            failed = self.op.metric("kquota_reconcile_passes_total", result="error") - self.failed_passes
            if failed:
                self.problems.append(f"{failed:.0f} reconcile passes failed")
            if "Traceback" in self.op.log()[self.log_at :]:
                self.problems.append("a traceback in the operator's log")
        return self.problems


def quiet_window(stack: Stack, health: Health) -> list[str]:
    """Property 3: with everything settled, passes keep running and send nothing."""
    op = stack.operator
    names = {
        "alter requests": ("kquota_apply_batch_ops_count", {}),
        "quota ops sent": ("kquota_apply_batch_ops_sum", {}),
        "status writes": ("kquota_status_writes_total", {}),
        "broker rejections": ("kquota_errors_total", {"reason": "Rejected"}),
    }
    before = {k: op.metric(m, **lbl) for k, (m, lbl) in names.items()}
    passes = op.metric("kquota_reconcile_passes_total", result="ok")
    end = time.monotonic() + QUIET_SECONDS
    while time.monotonic() < end and health.check():
        time.sleep(2)
    grew = {k: op.metric(m, **lbl) - before[k] for k, (m, lbl) in names.items()}
    problems = [f"{k} grew by {v:.0f} in {QUIET_SECONDS:.0f} s" for k, v in grew.items() if v > QUIET_BOUND]
    ran = op.metric("kquota_reconcile_passes_total", result="ok") - passes
    if ran < 2:
        problems.append(f"only {ran:.0f} passes ran in the quiet window: nothing was really checked")
    return problems


# -- loosening the CRD ------------------------------------------------------------------------


def loose_crd() -> dict[str, Any]:
    """The ClientQuota CRD as an older, laxer version might have had it: spec unchecked."""
    crd: dict[str, Any] = yaml.safe_load((REPO / "crds" / "clientquotas.kquota.io.yaml").read_text())
    for version in crd["spec"]["versions"]:
        props = version["schema"]["openAPIV3Schema"]["properties"]
        props["spec"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return crd


def store_under_loose_crd(stack: Stack, objects: list[dict[str, Any]]) -> None:
    """Create ``objects`` while the CRD is lax, then put today's CRD back (as a chart upgrade would)."""
    kube = stack.kube
    try:
        kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(loose_crd()))
        deadline = time.monotonic() + 60
        for obj in objects:
            while True:  # the API server takes the new schema a moment later
                result = kube.kubectl("create", "-f", "-", input=json.dumps(obj), check=False)
                if result.returncode == 0:
                    break
                assert time.monotonic() < deadline, f"the lax CRD never took effect:\n{result.stderr}"
                time.sleep(1)
    finally:
        kube.apply_crds()


# -- the tests ---------------------------------------------------------------------------------


def test_hostile_corpus_through_the_operator(stack: Stack, resilience: Resilience) -> None:
    tag = uuid.uuid4().hex[:6]
    ns = stack.new_namespace()
    accepted, stale = hostile_rows(), stale_rows(tag)
    rows = accepted + stale
    assert len({r.id for r in rows}) == len(rows)
    assert len({r.target for r in accepted}) == len(accepted), "two corpus rows name one entity"
    health = Health(stack)
    kafka = stack.kafka

    before = stack.broker_quotas()
    leftovers = [r.id for r in rows if r.target in before]
    assert not leftovers, f"corpus entities already on the broker (another test's leak?): {leftovers}"

    # Unmanaged entries, set by hand before kquota sees the corpus: they must survive it.
    literal_default = Entity.for_user("<default>")
    seeded: Live = {
        literal_default: {C: 555.0},  # a key kquota does not own, on an entity it will manage
        Entity.for_user(f"CN=unmanaged-{tag},O=Acme\\, Inc."): {P: 777.0},
        Entity.for_client(f"%2F-unmanaged-{tag}"): {R: 77.0},
    }
    for entity, values in seeded.items():
        args = ["--entity-type", "users", "--entity-name", entity.user or ""]
        if entity.has_client_id:
            args = ["--entity-type", "clients", "--entity-name", entity.client_id or ""]
        config = ",".join(f"{k.value}={v:g}" for k, v in values.items())
        kafka.kafka_configs("--alter", *args, "--add-config", config, check=True)
    try:
        _run_corpus(stack, resilience, ns, accepted, stale, before, seeded, health)
    finally:
        admin_remove(stack, seeded)


def admin_remove(stack: Stack, entries: Mapping[Entity, Mapping[QuotaKey, float]]) -> None:
    """Remove what the test set by hand (through the integration-tested adapter)."""
    admin = QuotaAdmin(ConnectionSettings(bootstrap_servers=stack.kafka.bootstrap))
    try:
        admin.alter([EntityChange(e, tuple(QuotaOp(k, None) for k in v)) for e, v in entries.items()])
    finally:
        admin.close()


def _run_corpus(
    stack: Stack,
    resilience: Resilience,
    ns: str,
    accepted: list[Row],
    stale: list[Row],
    before: Live,
    seeded: Live,
    health: Health,
) -> None:
    rows = accepted + stale
    names = {r.id: f"h{i:03d}" for i, r in enumerate(rows)}

    def manifest(r: Row) -> dict[str, Any]:
        return client_quota(ns, names[r.id], r.entity, r.quota)

    # The seeded keys really landed where meant: '<default>' the user, not the default user.
    live = stack.broker_quotas()
    for entity, values in seeded.items():
        assert live.get(entity, {}) == values, f"kafka-configs seeded {entity} as {live.get(entity)}"
    assert live.get(Entity.for_user(None)) == before.get(Entity.for_user(None)), "seeding touched the default user"

    store_under_loose_crd(stack, [manifest(r) for r in stale])
    create_all(stack, [manifest(r) for r in accepted])

    # Everything settles (statuses and broker) or the deadline passes: judge what is there then.
    want: Live = {r.target: dict(r.values) for r in accepted if r.target is not None}
    for entity, values in seeded.items():
        want[entity] = {**want.get(entity, {}), **values}
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while True:
        objs = list_quotas(stack, ns)
        live = stack.broker_quotas()
        verdicts = {r.id: status_verdict(r, objs.get(names[r.id])) for r in rows}
        broker_ok = all(live.get(e, {}) == v for e, v in want.items())
        if (all(ok for ok, _ in verdicts.values()) and broker_ok) or time.monotonic() > deadline:
            break
        if not health.check():
            break
        time.sleep(2)

    # Property 4 at convergence: exactly the accepted values; nothing else appeared or changed.
    ours = set(want) | {r.target for r in stale if r.target is not None}
    stray = {e: v for e, v in live.items() if e not in ours and e not in before}
    changed = {e: (v, live.get(e)) for e, v in before.items() if e not in ours and live.get(e) != v}
    lost_at_apply = {r.id: key_diff(want.get(r.target, {}), live.get(r.target, {})) if r.target else 0 for r in rows}

    # kafka-configs, an independent client, sees the same (line-safe names only).
    configs = kafka_configs_quotas(stack.kafka)
    configs_problems: dict[str, str] = {}
    for r in accepted:
        assert r.target is not None
        parts = [n for n in r.target.parts().values() if n is not None]
        if not all(one_line(n) for n in parts):
            continue
        expected = {k.value: v for k, v in want[r.target].items()}
        got = configs.get(configs_wording(r.target))
        if got != expected:
            configs_problems[r.id] = f"kafka-configs: {configs_wording(r.target)[:80]} = {got}"

    quiet = quiet_window(stack, health)

    # Delete the corpus: every key kquota set goes, the seeded ones stay.
    stack.kube.kubectl("delete", "clientquota", "--all", "-n", ns, "--wait=false")
    remain: Live = dict(seeded)
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while True:
        after = stack.broker_quotas()
        gone = not list_quotas(stack, ns)
        leftover = {e: after.get(e, {}) for e in ours if after.get(e, {}) != remain.get(e, {})}
        if (gone and not leftover) or time.monotonic() > deadline or not health.check():
            break
        time.sleep(2)
    seeded_lost = sum(key_diff(v, after.get(e, {})) for e, v in seeded.items())
    changed_after = {e: (v, after.get(e)) for e, v in before.items() if e not in ours and after.get(e) != v}
    crashed = health.final()

    # The report, one record per row, then the verdict on the same facts.
    failures: list[str] = []
    for r in rows:
        ok, said = verdicts[r.id]
        left = key_diff(remain.get(r.target, {}), after.get(r.target, {})) if r.target else 0
        lost = lost_at_apply[r.id] + left
        notes = [said]
        if lost_at_apply[r.id] and r.target is not None:
            notes.append(f"broker {live.get(r.target)} != {want.get(r.target, {})}")
        if left:
            notes.append(f"{left} key(s) left after delete")
        if r.id in configs_problems:
            notes.append(configs_problems[r.id])
        notes += quiet + crashed
        row_ok = ok and not lost and r.id not in configs_problems and not quiet and not crashed
        resilience.hostile(r.id, ok=row_ok, detail="; ".join(notes), lost=lost)
        if not row_ok:
            failures.append(f"{r.id!r}: {'; '.join(notes)}")
    unmanaged_ok = not seeded_lost and not changed and not changed_after and not stray
    resilience.hostile(
        "unmanaged entries seeded with kafka-configs (one on the user literally named <default>)",
        ok=unmanaged_ok,
        detail=f"untouched through apply and delete; stray entities {len(stray)}, changed {len(changed)}",
        lost=seeded_lost + len(changed_after) + len(stray),
    )
    assert not failures, "\n".join(failures) + "\n" + stack.operator.log()[-3000:]
    assert not stray, f"entities nobody asked for: {stray}"
    assert not changed and not changed_after, f"entries kquota does not own changed: {changed or changed_after}"
    assert not seeded_lost, f"seeded entries changed: {[(e, after.get(e)) for e in seeded]}"
    assert not leftover, f"keys left on the broker after deleting the corpus: {leftover}"
    assert gone, "corpus resources still present after delete (finalizers not released?)"


BULK = 400


def one_pass_sent_more_than(stack: Stack, ops: int) -> bool:
    """Whether a pass of the running operator sent more than ``ops`` quota ops (a histogram bound)."""
    op = stack.operator
    return op.metric("kquota_apply_batch_ops_count") > op.metric("kquota_apply_batch_ops_bucket", le=f"{ops:.1f}")


def while_operator_stopped(stack: Stack, action: Callable[[], object]) -> Health:
    """Run ``action`` with the operator stopped, so it finds all of it in its first pass; a fresh Health."""
    stack.operator.stop()
    try:
        action()
    finally:
        stack.operator.start()
    return Health(stack)


@pytest.mark.timeout(1200)
def test_longest_names_in_bulk_fit_the_controllers_batch_limit(stack: Stack, resilience: Resilience) -> None:
    """400 pairs with the longest names the CRD admits, three keys each, applied and deleted in one pass.

    About 9.4 MiB of metadata records: sent as one AlterClientQuotas request,
    the KRaft controller fails it whole (UNKNOWN_SERVER_ERROR; it renounces
    leadership on the way) and every resource says Rejected. That is what a
    GitOps sync of many such resources while the operator restarts produces:
    the operator is stopped while they are created (and again while they are
    deleted) so its first pass finds them all.
    """
    tag = uuid.uuid4().hex[:4]
    ns = stack.new_namespace()

    def names(i: int) -> tuple[str, str]:
        prefix = f"{tag}{i:04d}"  # 8 characters + 1016 four-byte emoji = 1024 characters
        return prefix + "\U0001f642" * 1016, prefix + "\U0001f643" * 1016

    want: Live = {}
    objects = []
    for i in range(BULK):
        user, client = names(i)
        want[Entity.for_pair(user, client)] = {P: 1000.0 + i, C: 2000.0 + i, R: 50.5}
        quota = {"producerByteRate": 1000 + i, "consumerByteRate": 2000 + i, "requestPercentage": 50.5}
        objects.append(client_quota(ns, f"b{i:03d}", {"user": {"name": user}, "clientId": {"name": client}}, quota))
    records = sum(
        record_bytes(EntityChange(e, tuple(QuotaOp(k, v) for k, v in vals.items()))) for e, vals in want.items()
    )
    assert records > KRAFT_MAX_BATCH_BYTES, "the corpus no longer exceeds one controller batch: make it bigger"
    readiness = '{range .items[*]}{.metadata.name}{"\\t"}{.status.conditions[?(@.type=="Ready")].reason}{"\\n"}{end}'

    def reasons() -> dict[str, str] | None:
        """Each resource's Ready reason; None when the API server did not answer this time.

        A list of these 400 objects is megabytes: on a busy machine the API server may time the handler
        out or kubectl its TLS handshake. The polls below retry; the deadline judges.
        """
        got = stack.kube.kubectl(
            "get", "clientquota", "-n", ns, "-o", f"jsonpath={readiness}", timeout=300, check=False
        )
        if got.returncode != 0:
            return None
        found = {}
        for line in got.stdout.splitlines():
            name, _, reason = line.partition("\t")
            found[name] = reason
        return found

    def remaining() -> int | None:
        """How many of the resources still exist (the server's table: names only, not megabytes of objects)."""
        got = stack.kube.kubectl("get", "clientquota", "-n", ns, "--no-headers", timeout=300, check=False)
        return len(got.stdout.splitlines()) if got.returncode == 0 else None

    health = while_operator_stopped(stack, lambda: create_all(stack, objects))
    deadline = time.monotonic() + 420
    seen: dict[str, str] = {}
    while True:
        got = reasons()
        if got is not None:
            seen = got
        live = stack.broker_quotas()
        applied = sum(1 for e, v in want.items() if live.get(e) == v)
        if (applied == BULK and list(seen.values()).count("Applied") == BULK) or time.monotonic() > deadline:
            break
        if not health.check():
            break
        time.sleep(5)
    counts = {r: list(seen.values()).count(r) for r in sorted(set(seen.values()))}
    rejected = stack.operator.metric("kquota_errors_total", reason="Rejected")
    # The scenario needs the big pass: without it this test would prove nothing.
    big_apply = one_pass_sent_more_than(stack, 1000)
    problems = health.final()
    slowest = health.slowest

    delete = ["delete", "clientquota", "--all", "-n", ns, "--wait=false"]
    health = while_operator_stopped(stack, lambda: stack.kube.kubectl(*delete))
    deadline = time.monotonic() + 420
    while True:
        after = stack.broker_quotas()
        left = sum(len(after.get(e, {})) for e in want)
        if (left == 0 and remaining() == 0) or time.monotonic() > deadline or not health.check():
            break
        time.sleep(5)
    big_delete = one_pass_sent_more_than(stack, 1000)
    rejected += stack.operator.metric("kquota_errors_total", reason="Rejected")
    problems += health.final()
    slowest = max(slowest, health.slowest)
    lost = sum(key_diff(v, live.get(e, {})) for e, v in want.items()) + left
    ok = applied == BULK and counts.get("Applied") == BULK and not rejected and not left and not problems
    resilience.hostile(
        f"{BULK} (user, client-id) pairs with 1024-character emoji names, 3 keys each, in one pass",
        ok=ok and big_apply and big_delete,
        detail=f"~{records / 2**20:.1f} MiB of records; {applied}/{BULK} on the broker; Ready reasons {counts}; "
        f"{rejected:.0f} broker rejections; {left} keys left after delete; one pass each: "
        f"apply {big_apply}, delete {big_delete}; slowest /healthz {slowest:.1f} s"
        + ("; " + "; ".join(problems) if problems else ""),
        lost=lost,
    )
    assert not problems, problems
    assert not rejected, f"the broker rejected {rejected:.0f} entities: {counts}"
    assert applied == BULK and counts.get("Applied") == BULK, f"{applied}/{BULK} applied; Ready reasons {counts}"
    assert left == 0, f"{left} keys left on the broker after deleting every resource"
    assert big_apply and big_delete, (
        f"the operator never sent the corpus in one pass (apply {big_apply}, delete {big_delete}): "
        "the controller's batch cap was not exercised"
    )
