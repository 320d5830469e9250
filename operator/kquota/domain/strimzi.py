"""What Strimzi owns on a Kafka cluster it runs, decided as its operators decide it.

Read from Strimzi's sources (0.47 to 1.2; ``../shared/reference/strimzi-facts.md`` in the
project's notes), Strimzi writes client quotas in two places:

* The **User Operator** watches KafkaUsers labelled ``strimzi.io/cluster=<kafka>`` in
  ``STRIMZI_NAMESPACE`` (``spec.entityOperator.userOperator.watchedNamespace``, else the
  Kafka's namespace). Each full reconciliation it takes the union of the KafkaUsers' names
  and the users it finds on the brokers: the user of *every* quota entity (``{user,
  client-id}`` pairs too; ``<default>`` skipped), of every ACL and every SCRAM credential,
  each dropped when ``STRIMZI_IGNORED_USERS_PATTERN`` matches the raw name (Java
  ``Matcher.matches()``, so ``CN=x`` is matched as written), the rest decoded (the CN of
  ``CN=...``). For every name ``n`` it then reconciles ``users/n`` and ``users/CN=n``: a
  KafkaUser's ``spec.quotas`` on the form its authentication gives, the other form
  cleared; for a name without a KafkaUser, ``delete()``, which never looks at the pattern:
  the Secret ``<secretPrefix>n``, the ACLs of ``n`` and ``CN=n``, the SCRAM credential of
  ``n`` and the quotas of ``users/n`` and ``users/CN=n`` all go.
* The **Cluster Operator** (0.42 and later) owns ``users/<default>``: ``spec.kafka.quotas``
  with ``type: kafka`` sets it, anything else clears it.

So for kquota an entity is Strimzi's when the User Operator writes it (:meth:`StrimziOwnership.owner`),
and an entity kquota sets must not put a name on the User Operator's deletion path, which
would delete a Secret, a login and ACLs that have nothing to do with quotas. Both refuse the
resource (``OwnedByStrimzi``) and kquota never touches the entity, Adopt included.
"""

from __future__ import annotations

import functools
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kquota.domain.entities import Entity

#: The User Operator setting that hands users to another quota manager.
IGNORED_USERS_ENV = "STRIMZI_IGNORED_USERS_PATTERN"
#: Where that setting goes in a Strimzi Kafka.
IGNORED_USERS_PATH = "spec.entityOperator.template.userOperatorContainer.env"
#: The User Operator's container in the Entity Operator Deployment, and the settings kquota reads from it.
USER_OPERATOR_CONTAINER = "user-operator"
NAMESPACE_ENV = "STRIMZI_NAMESPACE"
SECRET_PREFIX_ENV = "STRIMZI_SECRET_PREFIX"  # noqa: S105 - an environment variable's name
#: First Strimzi versions with the ignore pattern and with Cluster Operator-managed default quotas.
IGNORE_PATTERN_SINCE = (0, 48)
DEFAULT_QUOTAS_SINCE = (0, 42)


def parse_version(text: str | None) -> tuple[int, int] | None:
    """``0.45.0`` -> (0, 45); None when absent or unreadable."""
    m = re.match(r"^\s*(\d+)\.(\d+)", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def entity_operator_deployment(kafka: str) -> str:
    """The Deployment the Cluster Operator runs the Entity Operator (and so the User Operator) in."""
    return f"{kafka}-entity-operator"


@dataclass(frozen=True)
class Listener:
    """One of a Strimzi Kafka's listeners, as kquota connects through it."""

    name: str
    bootstrap_servers: str
    tls: bool
    #: ``scram-sha-512``, ``tls``, ``custom``... or None (no authentication).
    authentication: str | None
    #: ``status.listeners[].certificates``: what the brokers present on a TLS listener (the cluster CA's
    #: certificate, or the listener's custom certificate), as PEM.
    certificates: tuple[str, ...] = ()
    #: The SASL mechanisms of a ``type: oauth`` listener (OAUTHBEARER) or a ``type: custom`` one with
    #: ``sasl: true`` (its listenerConfig's ``sasl.enabled.mechanisms``), upper case.
    sasl_mechanisms: tuple[str, ...] = ()

    @property
    def oauthbearer(self) -> bool:
        """Whether clients authenticate with OAUTHBEARER tokens (Strimzi 0.x ``type: oauth``, or ``custom``)."""
        return "OAUTHBEARER" in self.sasl_mechanisms


class StrimziError(ValueError):
    """A Strimzi object is missing what kquota needs; the message says what."""


def _where(obj: Mapping[str, Any], kind: str) -> str:
    meta = obj.get("metadata") or {}
    return f"{kind} {meta.get('namespace')}/{meta.get('name')}"


def listener(kafka: Mapping[str, Any], name: str) -> Listener:
    """The listener ``name`` of a Kafka: address and certificates from its status, TLS and authentication from spec."""
    where = _where(kafka, "Kafka")
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
    certificates = tuple(str(c) for c in (status or {}).get("certificates") or () if isinstance(c, str) and c.strip())
    auth = spec.get("authentication") or {}
    mechanisms: tuple[str, ...] = ()
    if auth.get("type") == "oauth":
        mechanisms = ("OAUTHBEARER",)
    elif auth.get("type") == "custom" and auth.get("sasl"):
        config = auth.get("listenerConfig") or {}
        enabled = config.get("sasl.enabled.mechanisms") if isinstance(config, Mapping) else None
        mechanisms = tuple(m.strip().upper() for m in str(enabled or "").split(",") if m.strip())
    return Listener(
        name,
        bootstrap,
        bool(spec.get("tls")),
        str(auth["type"]) if auth.get("type") else None,
        certificates,
        mechanisms,
    )


def user_principal(kafka_user: Mapping[str, Any]) -> str:
    """The principal name the brokers see for a KafkaUser (``CN=<name>`` for TLS users)."""
    meta = kafka_user.get("metadata") or {}
    status_name = (kafka_user.get("status") or {}).get("username")
    if status_name:
        return str(status_name)
    auth = ((kafka_user.get("spec") or {}).get("authentication") or {}).get("type")
    name = str(meta.get("name") or "")
    return f"CN={name}" if auth in ("tls", "tls-external") else name


def _rdns(dn: str) -> list[tuple[str, str]] | None:
    """(type, value) of each attribute of an RFC 2253 name, most specific first; None when it is not one."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(dn)
    while i < n:
        eq = dn.find("=", i)
        if eq < 0:
            return None
        attr = dn[i:eq].strip()
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9-]*|[0-9]+(\.[0-9]+)*", attr):
            return None
        value: list[str] = []
        j = eq + 1
        quoted = j < n and dn[j] == '"'
        if quoted:
            j += 1
        while j < n:
            ch = dn[j]
            if ch == "\\" and j + 1 < n:
                nxt = dn[j + 1]
                if re.fullmatch(r"[0-9A-Fa-f]", nxt) and j + 2 < n and re.fullmatch(r"[0-9A-Fa-f]", dn[j + 2]):
                    value.append(chr(int(dn[j + 1 : j + 3], 16)))
                    j += 3
                    continue
                value.append(nxt)
                j += 2
                continue
            if quoted and ch == '"':
                quoted = False
                j += 1
                continue
            if not quoted and ch in ",;+":
                break
            value.append(ch)
            j += 1
        if quoted:
            return None
        out.append((attr, "".join(value).strip()))
        i = j + 1
        if j >= n:
            break
    return out or None


def decode_username(name: str) -> str | None:
    """The KafkaUser name the User Operator derives from a user it finds on the brokers.

    As its ``KafkaUserModel.decodeUsername``: a name containing ``CN=`` is read
    as an LDAP name and becomes the values of its CN attributes, joined
    (``CN=app,OU=x`` -> ``app``); any other name is itself. None when a name
    with ``CN=`` is not an LDAP name (the User Operator fails on it).
    """
    if "CN=" not in name:
        return name
    rdns = _rdns(name)
    if rdns is None:
        return None
    return "".join(value for attr, value in rdns if attr.lower() == "cn")


def _literal(text: str) -> str:
    """``text`` as a regex matching itself, escaping only what Java and Python both treat as special."""
    return re.sub(r"([.^$*+?{}\[\]\\|()])", r"\\\1", text)


@functools.lru_cache(maxsize=64)
def java_pattern(pattern: str) -> re.Pattern[str] | str:
    """A Java regex as Python's ``re`` runs it, or why it cannot (a message).

    The two dialects agree on what an ignore pattern is made of (classes,
    groups, alternation, quantifiers, possessive and atomic forms); Java's named
    groups ``(?<name>...)`` and ``\\Q...\\E`` quoting are rewritten as Python's,
    and a pattern Python cannot compile, or would read differently in a later
    version (``\\p{...}``, POSIX-looking nested sets), is reported rather than guessed.
    tests/integration/test_strimzi_names.py runs both on the same names.
    """
    # \Q...\E quotes literally in Java; Python has no such form, so the text is escaped instead.
    translated = re.sub(r"\\Q(.*?)(?:\\E|$)", lambda m: _literal(m.group(1)), pattern, flags=re.S)
    translated = re.sub(r"\(\?<([A-Za-z][A-Za-z0-9]*)>", r"(?P<\1>", translated)
    try:
        with warnings.catch_warnings():
            # Python warns where its meaning may change (a nested set such as [[:alpha:]]): not a guess to make.
            warnings.simplefilter("error")
            return re.compile(translated)
    except (re.error, FutureWarning) as exc:
        return f"kquota cannot evaluate {IGNORED_USERS_ENV}={pattern!r} as Java does ({exc})"


@dataclass(frozen=True)
class UserOperatorView:
    """The User Operator as it runs: where it looks for KafkaUsers and which users it leaves alone."""

    #: STRIMZI_NAMESPACE: where its KafkaUsers are.
    namespace: str
    #: STRIMZI_SECRET_PREFIX: a KafkaUser ``n``'s Secret is ``<prefix>n``.
    secret_prefix: str = ""
    #: The STRIMZI_IGNORED_USERS_PATTERN it runs with, as kquota counts it (None: no user is left alone).
    pattern: str | None = None
    #: Why a pattern that may be set is not counted (unreadable, rolling out, not evaluable); None: nothing to say.
    pattern_note: str | None = None


def spec_env(kafka: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The User Operator's extra environment in a Kafka's spec (``...template.userOperatorContainer.env``)."""
    eo = (kafka.get("spec") or {}).get("entityOperator") or {}
    env = ((eo.get("template") or {}).get("userOperatorContainer") or {}).get("env") or []
    return [e for e in env if isinstance(e, Mapping)]


def ignored_pattern(kafka: Mapping[str, Any]) -> str | None:
    """The STRIMZI_IGNORED_USERS_PATTERN a Kafka's spec asks for, when it is given as a value."""
    for env in spec_env(kafka):
        if env.get("name") == IGNORED_USERS_ENV and env.get("value"):
            return str(env["value"])
    return None


def user_operator_spec(kafka: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """``spec.entityOperator.userOperator`` (None: Strimzi runs no User Operator for this Kafka)."""
    eo = (kafka.get("spec") or {}).get("entityOperator") or {}
    uo = eo.get("userOperator")
    return uo if isinstance(uo, Mapping) else None


def container_env(deployment: Mapping[str, Any], container: str) -> list[Mapping[str, Any]] | None:
    """The env of one container of a Deployment's pod template (None: no such container)."""
    pod = (((deployment.get("spec") or {}).get("template") or {}).get("spec")) or {}
    for c in pod.get("containers") or ():
        if isinstance(c, Mapping) and c.get("name") == container:
            return [e for e in c.get("env") or () if isinstance(e, Mapping)]
    return None


def rollout_problem(deployment: Mapping[str, Any]) -> str | None:
    """Why a Deployment's pods may not all run its template yet (None: rolled out), as kubectl rollout status says."""
    meta, spec, status = (deployment.get(k) or {} for k in ("metadata", "spec", "status"))
    want = int(spec.get("replicas", 1) or 0)
    if int(status.get("observedGeneration") or 0) < int(meta.get("generation") or 0):
        return "its controller has not seen its latest template yet"
    updated = int(status.get("updatedReplicas") or 0)
    if updated < want:
        return f"{updated} of {want} pods run its latest template"
    if int(status.get("replicas") or 0) > updated:
        return f"{int(status.get('replicas') or 0) - updated} old pod(s) still run"
    if int(status.get("availableReplicas") or 0) < want:
        return f"{int(status.get('availableReplicas') or 0)} of {want} updated pods are available"
    return None


@dataclass(frozen=True)
class StrimziOwnership:
    """Which quota entities Strimzi manages on one Kafka cluster, and which it would act on if kquota set them."""

    #: ``namespace/name`` of the Kafka.
    kafka: str
    #: The name of every KafkaUser the User Operator reconciles -> its ``namespace/name``.
    kafka_users: Mapping[str, str] = field(default_factory=dict)
    #: A User Operator runs for this Kafka.
    user_operator: bool = False
    #: What kquota knows of the running User Operator (None without one).
    view: UserOperatorView | None = None
    #: The Strimzi version that last reconciled the Kafka (status.operatorLastSuccessfulVersion).
    version: tuple[int, int] | None = None

    @property
    def ignored_pattern(self) -> str | None:
        return self.view.pattern if self.view is not None else None

    @property
    def owns_default_user(self) -> bool:
        # Unknown version: assume a current Strimzi (the safe side: never fight it).
        return self.version is None or self.version >= DEFAULT_QUOTAS_SINCE

    def _ignored(self, user: str) -> bool:
        """Whether the User Operator's pattern drops ``user`` (the raw name, as Java's ``matches()``)."""
        if self.ignored_pattern is None:
            return False
        compiled = java_pattern(self.ignored_pattern)
        return not isinstance(compiled, str) and compiled.fullmatch(user) is not None

    def owner(self, entity: Entity) -> str | None:
        """Why kquota must not set ``entity`` (Strimzi writes it, or would delete things for it); None: kquota's."""
        if not entity.has_user:
            return None
        user = entity.user
        if user is None:
            if entity.has_client_id or not self.owns_default_user:
                # The User Operator skips <default> users; {<default>, client-id} is nobody's but kquota's.
                return None
            return (
                f"Strimzi's Cluster Operator manages users/<default> for Kafka {self.kafka} (spec.kafka.quotas "
                "with type: kafka sets it, anything else clears it)"
            )
        if not self.user_operator:
            return None
        name = decode_username(user)
        user_level = not entity.has_client_id
        if name is not None and name in self.kafka_users:
            if user_level and user in (name, f"CN={name}"):
                return (
                    f"Strimzi's User Operator sets or clears users/{name} and users/CN={name} from KafkaUser "
                    f"{self.kafka_users[name]}, whatever {IGNORED_USERS_ENV} says (set the quotas in the KafkaUser's "
                    "spec.quotas, or a more specific entity such as the user's {user, client-id <default>} here)"
                )
            # The User Operator reconciles KafkaUser `name` as usual: it never writes this entity.
            return None
        if name is not None and user_level and user in (name, f"CN={name}"):
            other = f"CN={name}" if user == name else name
            if not self._ignored(user):
                return (
                    f"Strimzi's User Operator for Kafka {self.kafka} clears the quotas of users without a KafkaUser "
                    f"unless {IGNORED_USERS_ENV} matches them; {self.handover_hint()}"
                )
            if not self._ignored(other):
                return (
                    f"{IGNORED_USERS_ENV}={self.ignored_pattern!r} matches {user!r} but not {other!r}: whenever "
                    f"users/{other} or a pair of it exists, Strimzi's User Operator deletes user {name} (its quotas "
                    f"here included, its Secret, SCRAM credential and ACLs); make the pattern match both forms, "
                    f"e.g. '(CN=)?{_literal(name)}'"
                )
            return None
        # A {user, client-id} pair, or a user not in either of the two forms (CN=app,OU=x): the User Operator
        # never writes it, but the entity's user goes on its list of users to reconcile.
        if self._ignored(user):
            return None
        where = f"namespace {self.view.namespace}" if self.view is not None else "its namespace"
        prefix = self.view.secret_prefix if self.view is not None else ""
        if name is None:
            return (
                f"Strimzi's User Operator for Kafka {self.kafka} reads the user {user!r} of this entity as an LDAP "
                f"name and fails on it; set {IGNORED_USERS_ENV} to match it"
            )
        return (
            f"setting it would put user {name!r} on Strimzi's User Operator's deletion path: it has no KafkaUser in "
            f"{where} and {IGNORED_USERS_ENV} does not match {user!r}, so at every full reconciliation the User "
            f"Operator deletes Secret {prefix}{name} in {where}, the SCRAM credential of {name}, the ACLs of {name} "
            f"and CN={name} and the quotas of users/{name} and users/CN={name}; create a KafkaUser {name}, or make "
            f"{IGNORED_USERS_ENV} match {user!r}"
        )

    def handover_hint(self) -> str:
        """How to hand users without a KafkaUser to kquota, for this Strimzi version."""
        if self.version is not None and self.version < IGNORE_PATTERN_SINCE:
            return (
                f"Strimzi {self.version[0]}.{self.version[1]} has no such setting ({IGNORED_USERS_ENV} needs 0.48 "
                "or later): upgrade Strimzi, or set these users' quotas on ClientQuotas with a client-id too"
            )
        current = f" (now {self.ignored_pattern!r})" if self.ignored_pattern else ""
        note = f"; {self.view.pattern_note}" if self.view is not None and self.view.pattern_note else ""
        return (
            f"set {IGNORED_USERS_ENV}{current} in the Kafka's {IGNORED_USERS_PATH} to a regex matching both forms of "
            f"the users kquota should own, e.g. '(CN=)?kq-.*'{note}"
        )

    def summary(self) -> str:
        """The KafkaCluster's StrimziUsers condition message."""
        parts = [f"Kafka {self.kafka}"]
        if self.user_operator:
            where = f" in namespace {self.view.namespace}" if self.view is not None else ""
            parts.append(
                f"User Operator manages the users/<name> quotas of {len(self.kafka_users)} KafkaUser(s){where}"
                + (
                    f" and leaves users matching {IGNORED_USERS_ENV}={self.ignored_pattern!r} to kquota"
                    + (f" ({self.view.pattern_note})" if self.view is not None and self.view.pattern_note else "")
                    if self.ignored_pattern
                    else f" and clears those of every other user: {self.handover_hint()}"
                )
            )
            parts.append(
                "a {user, client-id} quota is kquota's only when its user has a KafkaUser or matches the pattern"
            )
        else:
            parts.append("no User Operator: users/<name> quotas are kquota's")
        if self.owns_default_user:
            parts.append("users/<default> is the Cluster Operator's")
        return "; ".join(parts)


def ownership(
    kafka: Mapping[str, Any],
    kafka_users: Sequence[Mapping[str, Any]],
    view: UserOperatorView | None = None,
) -> StrimziOwnership:
    """What Strimzi owns for this Kafka, given the KafkaUsers its User Operator reconciles.

    ``view`` is the User Operator as it runs (its Deployment, read by
    :mod:`kquota.reconcile.strimzi`); without one, the Kafka's spec stands
    for it (its watched namespace and a pattern given as a value), which is
    what the CLI's ``-f`` manifests and the unit tests have.
    """
    meta = kafka.get("metadata") or {}
    uo = user_operator_spec(kafka)
    version = parse_version((kafka.get("status") or {}).get("operatorLastSuccessfulVersion"))
    users = {}
    for ku in kafka_users:
        km = ku.get("metadata") or {}
        name = str(km.get("name") or "")
        if name:
            users[name] = f"{km.get('namespace')}/{name}"
    if uo is not None and view is None:
        view = UserOperatorView(
            namespace=str(uo.get("watchedNamespace") or meta.get("namespace") or ""),
            secret_prefix=str(uo.get("secretPrefix") or ""),
            pattern=ignored_pattern(kafka),
        )
    if view is not None and view.pattern is not None:
        compiled = java_pattern(view.pattern)
        if version is not None and version < IGNORE_PATTERN_SINCE:
            view = UserOperatorView(
                view.namespace,
                view.secret_prefix,
                None,
                f"Strimzi {version[0]}.{version[1]} ignores {IGNORED_USERS_ENV} (0.48 or later)",
            )
        elif isinstance(compiled, str):
            view = UserOperatorView(view.namespace, view.secret_prefix, None, compiled)
    return StrimziOwnership(
        kafka=f"{meta.get('namespace')}/{meta.get('name')}",
        kafka_users=users,
        user_operator=uo is not None,
        view=view if uo is not None else None,
        version=version,
    )
