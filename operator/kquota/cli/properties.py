"""``kafka-configs --command-config`` files: Java properties with a JAAS line, read into ConnectionSettings.

The same file serves both tools: ``security.protocol``, ``sasl.mechanism``,
``sasl.jaas.config`` with username and password, PEM ``ssl.*`` files. No
message here quotes a property value, so credentials never reach the output.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from kquota.cli.target import TargetError
from kquota.kafka.settings import ConnectionSettings

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


def _pem_file(props: Mapping[str, str], prefix: str) -> str | None:
    location = props.get(f"{prefix}.location")
    if not location:
        return None
    kind = props.get(f"{prefix}.type", "").upper()
    if kind not in ("", "PEM"):
        raise TargetError(
            f"{prefix}.type {kind} is not supported: kquota reads PEM files (convert with keytool/openssl)"
        )
    return location


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
        conn["ssl_cafile"] = _pem_file(props, "ssl.truststore")
        keystore = _pem_file(props, "ssl.keystore")
        if keystore:
            # A PEM keystore file holds the certificate chain and the key, which Python's ssl loads from one file.
            conn["ssl_certfile"] = keystore
        if props.get("ssl.key.password") or props.get("ssl.keystore.password"):
            raise TargetError("encrypted private keys are not supported: use an unencrypted PEM key")
    return ConnectionSettings(**conn)


def read_command_config(path: str) -> dict[str, str]:
    try:
        return parse_properties(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise TargetError(f"--command-config {path}: cannot read: {exc.strerror}") from None
