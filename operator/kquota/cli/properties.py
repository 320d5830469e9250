"""``kafka-configs --command-config`` files: Java properties with a JAAS line, read into ConnectionSettings.

The same file serves both tools: ``security.protocol``, ``sasl.mechanism``,
``sasl.jaas.config`` with username and password, ``ssl.truststore.*`` and
``ssl.keystore.*`` as PEM or PKCS12 stores (``.type``, ``.location``,
``.password``, Kafka's own names). No message here quotes a property value, so
credentials never reach the output.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from kquota.cli.target import TargetError
from kquota.kafka.keystores import KeyMaterial, KeystoreError, bundle, pem_certificates, pkcs12_store
from kquota.kafka.settings import ConnectionSettings, tls_file

SASL_MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
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
        mechanism = props.get("sasl.mechanism", "GSSAPI").upper()
        if mechanism not in SASL_MECHANISMS:
            raise TargetError(f"sasl.mechanism {mechanism} is not supported; use one of {', '.join(SASL_MECHANISMS)}")
        jaas = props.get("sasl.jaas.config")
        if not jaas:
            raise TargetError("SASL needs sasl.jaas.config with username and password in --command-config")
        options = parse_jaas(jaas)
        if "username" not in options or "password" not in options:
            raise TargetError('sasl.jaas.config needs username="..." and password="..."')
        conn |= {
            "sasl_mechanism": mechanism,
            "sasl_username": options["username"],
            "sasl_password": options["password"],
        }
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


def read_command_config(path: str) -> dict[str, str]:
    try:
        return parse_properties(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise TargetError(f"--command-config {path}: cannot read: {exc.strerror}") from None
