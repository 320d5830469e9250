"""``kafka-configs --command-config`` files: Java properties with a JAAS line, read into ConnectionSettings.

The same file serves both tools: ``security.protocol``, ``sasl.mechanism``,
``sasl.jaas.config``, ``ssl.truststore.*`` and ``ssl.keystore.*`` as PEM or
PKCS12 stores (``.type``, ``.location``, ``.password``), Kafka's own names.
Per mechanism, as Kafka's Java clients read them:

* PLAIN, SCRAM-SHA-256/512: ``username`` and ``password`` in the JAAS line.
* OAUTHBEARER (client-credentials grant): ``sasl.oauthbearer.token.endpoint.url``
  and the client as Kafka's ``OAuthBearerLoginModule`` options (``clientId``,
  ``clientSecret``, ``scope``, ``extension_<name>``) or Kafka 4.1's
  ``sasl.oauthbearer.client.credentials.client.id``/``.client.secret`` and
  ``sasl.oauthbearer.scope``; the token endpoint's CA in the JAAS line's
  ``ssl.truststore.*`` options. Strimzi's OAuth client options
  (``oauth.token.endpoint.uri``, ``oauth.client.id``, ``oauth.client.secret``,
  ``oauth.scope``, ``oauth.audience``, ``oauth.ssl.truststore.*``) are read too.
* GSSAPI: ``sasl.kerberos.service.name`` (default kafka) and a
  ``Krb5LoginModule`` line with ``useKeyTab=true keyTab=... principal=...``, or
  ``useTicketCache=true`` for the ticket ``kinit`` left; krb5.conf is the
  process's (``KRB5_CONFIG``, else /etc/krb5.conf), as ``java.security.krb5.conf`` is Java's.
* AWS MSK IAM: ``sasl.mechanism=AWS_MSK_IAM`` with aws-msk-iam-auth's
  ``IAMLoginModule`` (``awsRoleArn``, ``awsRoleSessionName``, ``awsProfileName``),
  or ``sasl.mechanism=OAUTHBEARER`` with its ``IAMOAuthBearerLoginCallbackHandler``;
  the region from the brokers' host names (``*.kafka.<region>.amazonaws.com``), else
  ``AWS_REGION``.

No message here quotes a property value, so credentials never reach the output.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from kquota.cli.target import TargetError
from kquota.kafka.keystores import KeyMaterial, KeystoreError, bundle, pem_certificates, pkcs12_store
from kquota.kafka.settings import (
    ConnectionSettings,
    KerberosSettings,
    MskIamSettings,
    OAuthSettings,
    tls_file,
)

SASL_MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI", "AWS_MSK_IAM")
PASSWORD_MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
#: aws-msk-iam-auth's OAUTHBEARER login handler: an OAUTHBEARER file with it is MSK IAM.
MSK_OAUTH_HANDLER: Final = "software.amazon.msk.auth.iam.IAMOAuthBearerLoginCallbackHandler"
_MSK_REGION: Final = re.compile(r"\.kafka(?:-serverless)?\.([a-z]{2}(?:-[a-z]+)+-[0-9]+)\.amazonaws\.com(?::|$)")
PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2 : i + 6]):
                out.append(chr(int(text[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    current = ""
    continuing = False
    for raw in text.splitlines():
        line = raw.lstrip() if continuing or not current else raw
        if not continuing and (not line.strip() or line.lstrip()[:1] in ("#", "!")):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            current += line[:-1]
            continuing = True
            continue
        lines.append((current + line).lstrip())
        current, continuing = "", False
    if current:
        lines.append(current.lstrip())
    return lines


def parse_properties(text: str) -> dict[str, str]:
    """A Java ``.properties`` file as ``java.util.Properties.load`` reads it (comments, continuations, escapes)."""
    out: dict[str, str] = {}
    for line in _logical_lines(text):
        match = re.match(r"((?:\\.|[^\\=:\s])*)\s*[=:]?\s*(.*)$", line, re.S)
        assert match is not None  # the pattern matches any string
        out[_unescape(match.group(1))] = _unescape(match.group(2))
    return out


_JAAS_OPTION: Final = re.compile(r'([A-Za-z0-9_.-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))')


def parse_jaas(text: str) -> dict[str, str]:
    """The options of a ``sasl.jaas.config`` value: ``LoginModule required username="u" password="p";``."""
    match = re.match(r"\s*[A-Za-z0-9_.$]+\s+(required|requisite|sufficient|optional)\b(.*)$", text, re.S)
    if not match:
        raise TargetError("sasl.jaas.config is not '<LoginModule> required key=\"value\" ...;'")
    body = match.group(2).strip()
    options: dict[str, str] = {}
    pos = 0
    while pos < len(body):
        if body[pos].isspace():
            pos += 1
            continue
        if body[pos] == ";":
            break
        option = _JAAS_OPTION.match(body, pos)
        if option is None:
            raise TargetError('sasl.jaas.config has an option that is not key=value or key="value"')
        quoted = option.group(2)
        options[option.group(1)] = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else option.group(3)
        pos = option.end()
    return options


#: The first bytes of a Java KeyStore (JKS) file, which neither Python nor cryptography reads.
JKS_MAGIC: Final = b"\xfe\xed\xfe\xed"


def _store_type(props: Mapping[str, str], prefix: str, data: bytes) -> str:
    """PEM or PKCS12, as the file is (Java's "JKS" type reads PKCS#12 files too; a real JKS file is refused)."""
    kind = props.get(f"{prefix}.type", "").upper()
    if data.startswith(JKS_MAGIC) or kind not in ("", "PEM", "PKCS12", "JKS"):
        raise TargetError(
            f"{prefix}: {'a JKS store' if data.startswith(JKS_MAGIC) else f'type {kind}'} is not supported: kquota "
            "reads PEM and PKCS12 stores (keytool -importkeystore -deststoretype PKCS12 converts a JKS one)"
        )
    if kind == "PEM" or (kind == "" and data.lstrip().startswith(b"-----BEGIN")):
        return "PEM"
    return "PKCS12"


def _read_store(props: Mapping[str, str], prefix: str) -> KeyMaterial | None:
    """The certificates (and key) of ``ssl.truststore.*`` or ``ssl.keystore.*``, as Kafka's clients read them."""
    location = props.get(f"{prefix}.location")
    if not location:
        return None
    where = f"{prefix}.location {location}"
    _store_type(props, prefix, b"")
    try:
        data = Path(location).read_bytes()
    except OSError as exc:
        raise TargetError(f"{where}: cannot read: {exc.strerror}") from None
    kind = _store_type(props, prefix, data)
    try:
        if kind == "PKCS12":
            return pkcs12_store(data, props.get(f"{prefix}.password"), where)
        text = data.decode("utf-8")
    except KeystoreError as exc:
        raise TargetError(str(exc)) from None
    except UnicodeDecodeError:
        raise TargetError(f"{where} is not PEM text (set {prefix}.type=PKCS12 for a PKCS#12 store)") from None
    try:
        certs = pem_certificates(text, where)
    except KeystoreError as exc:
        raise TargetError(str(exc)) from None
    key = None
    if prefix == "ssl.keystore":
        if "PRIVATE KEY-----" not in text:
            raise TargetError(f"{where} holds no PEM private key")
        if "ENCRYPTED PRIVATE KEY" in text or props.get("ssl.key.password"):
            raise TargetError("encrypted PEM private keys are not supported: use an unencrypted PEM key, or PKCS12")
        key = text
    return KeyMaterial(certs, key)


def settings_from_properties(props: Mapping[str, str], bootstrap: str | None, timeout: float) -> ConnectionSettings:
    """Connection settings from client properties; ``bootstrap`` overrides ``bootstrap.servers``."""
    servers = bootstrap or props.get("bootstrap.servers")
    if not servers:
        raise TargetError("no brokers: give --bootstrap-server, bootstrap.servers in --command-config, or --cluster")
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise TargetError(f"security.protocol {protocol} is not one of {', '.join(PROTOCOLS)}")
    conn: dict[str, Any] = {
        "bootstrap_servers": servers,
        "security_protocol": protocol,
        "request_timeout_ms": int(timeout * 1000),
        "connect_timeout_ms": int(timeout * 1000),
    }
    if protocol.startswith("SASL_"):
        conn |= _sasl(props, servers, protocol)
    if protocol.endswith("SSL"):
        # Both become private PEM files (kafka-python reads only those), whatever the store's type.
        trust = _read_store(props, "ssl.truststore")
        if trust is not None:
            conn["ssl_cafile"] = tls_file(bundle(trust.certificates), "command-config", "ca")
        keystore = _read_store(props, "ssl.keystore")
        if keystore is not None:
            if keystore.key is None or not keystore.certificates:
                raise TargetError("ssl.keystore holds no private key with its certificate")
            conn["ssl_certfile"] = tls_file("".join(keystore.certificates), "command-config", "cert")
            conn["ssl_keyfile"] = tls_file(keystore.key, "command-config", "key")
    return ConnectionSettings(**conn)


def _jaas(props: Mapping[str, str], mechanism: str) -> dict[str, str]:
    jaas = props.get("sasl.jaas.config")
    if not jaas:
        if mechanism in PASSWORD_MECHANISMS:
            raise TargetError("SASL needs sasl.jaas.config with username and password in --command-config")
        return {}
    return parse_jaas(jaas)


def _sasl(props: Mapping[str, str], servers: str, protocol: str) -> dict[str, Any]:
    """The SASL part of the settings, per mechanism (see the module docstring)."""
    mechanism = props.get("sasl.mechanism", "GSSAPI").upper()
    if mechanism not in SASL_MECHANISMS:
        raise TargetError(f"sasl.mechanism {mechanism} is not supported; use one of {', '.join(SASL_MECHANISMS)}")
    options = _jaas(props, mechanism)
    if mechanism in PASSWORD_MECHANISMS:
        if "username" not in options or "password" not in options:
            raise TargetError('sasl.jaas.config needs username="..." and password="..."')
        return {"sasl_mechanism": mechanism, "sasl_username": options["username"], "sasl_password": options["password"]}
    msk_oauth = props.get("sasl.login.callback.handler.class", "").strip() == MSK_OAUTH_HANDLER
    if mechanism == "AWS_MSK_IAM" or (mechanism == "OAUTHBEARER" and msk_oauth):
        return {"sasl_mechanism": "AWS_MSK_IAM", "msk_iam": _msk(options, servers, protocol)}
    if mechanism == "OAUTHBEARER":
        return {"sasl_mechanism": mechanism, "oauth": _oauth(props, options)}
    return {"sasl_mechanism": mechanism, "kerberos": _kerberos(props, options)}


def _oauth(props: Mapping[str, str], options: Mapping[str, str]) -> OAuthSettings:
    """A client-credentials grant from Kafka's names, or Strimzi's OAuth client options."""
    strimzi = any(k.startswith("oauth.") for k in options)

    def first(*names: str) -> str | None:
        for name in names:
            value = options.get(name) if not name.startswith("sasl.") else props.get(name)
            if value:
                return value
        return None

    url = first("sasl.oauthbearer.token.endpoint.url", "oauth.token.endpoint.uri")
    client_id = first("clientId", "sasl.oauthbearer.client.credentials.client.id", "oauth.client.id")
    secret = first("clientSecret", "sasl.oauthbearer.client.credentials.client.secret", "oauth.client.secret")
    if not url:
        raise TargetError("OAUTHBEARER needs sasl.oauthbearer.token.endpoint.url (kquota fetches tokens itself)")
    if not re.match(r"^https?://[^\s/?#]+([/?#]\S*)?$", url):
        raise TargetError("sasl.oauthbearer.token.endpoint.url is not an http or https URL")
    if not client_id or not secret:
        raise TargetError(
            "OAUTHBEARER needs the client id and secret: clientId and clientSecret in sasl.jaas.config, or "
            "sasl.oauthbearer.client.credentials.client.id and .client.secret"
        )
    prefix = "oauth.ssl.truststore" if strimzi else "ssl.truststore"
    trust = _read_store({k.replace(prefix, "ssl.truststore", 1): v for k, v in options.items()}, "ssl.truststore")
    extensions = tuple(
        (k.removeprefix("extension_"), v) for k, v in options.items() if k.startswith("extension_") and len(k) > 10
    )
    return OAuthSettings(
        token_endpoint_url=url,
        client_id=client_id,
        client_secret=secret,
        scope=first("scope", "sasl.oauthbearer.scope", "oauth.scope"),
        audience=first("oauth.audience"),
        extensions=extensions,
        ca_file=tls_file(bundle(trust.certificates), "command-config", "oauth-ca") if trust is not None else None,
    )


def _kerberos(props: Mapping[str, str], options: Mapping[str, str]) -> KerberosSettings:
    """GSSAPI from a Krb5LoginModule line: a keytab and principal, or the ticket cache ``kinit`` filled."""
    service = props.get("sasl.kerberos.service.name", "kafka").strip() or "kafka"
    keytab = options.get("keyTab")
    principal = options.get("principal")
    if options.get("useKeyTab", "").lower() == "true":
        if not keytab or not principal:
            raise TargetError('GSSAPI with useKeyTab=true needs keyTab="..." and principal="..." in sasl.jaas.config')
        if not os.access(keytab, os.R_OK):
            raise TargetError(f"GSSAPI: the keytab {keytab} cannot be read")
        return KerberosSettings(principal=principal, keytab_file=keytab, service_name=service)
    if options.get("useTicketCache", "").lower() == "true" or not options:
        # The ticket kinit left (KRB5CCNAME or the default cache), as Krb5LoginModule's useTicketCache.
        return KerberosSettings(principal=principal, keytab_file=None, service_name=service)
    raise TargetError(
        "GSSAPI needs useKeyTab=true with keyTab and principal, or useTicketCache=true, in sasl.jaas.config"
    )


def _msk(options: Mapping[str, str], servers: str, protocol: str) -> MskIamSettings:
    """MSK IAM from aws-msk-iam-auth's options; the region from the brokers' names (as that library finds it)."""
    if protocol != "SASL_SSL":
        raise TargetError("AWS MSK IAM needs security.protocol=SASL_SSL")
    match = _MSK_REGION.search(servers.split(",", maxsplit=1)[0].strip())
    region = match.group(1) if match else os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if not region:
        raise TargetError(
            "AWS MSK IAM: no region: the bootstrap servers are not *.kafka.<region>.amazonaws.com names; set AWS_REGION"
        )
    role = options.get("awsRoleArn")
    return MskIamSettings(
        region=region,
        role_arn=role,
        role_session_name=options.get("awsRoleSessionName") if role else None,
        profile=None if role else options.get("awsProfileName"),
    )


def read_command_config(path: str) -> dict[str, str]:
    try:
        return parse_properties(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise TargetError(f"--command-config {path}: cannot read: {exc.strerror}") from None
