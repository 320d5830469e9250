"""Connection flags: kafka-configs' --command-config files, JAAS options, and credentials kept out of output."""

from __future__ import annotations

import argparse
import datetime as dt
import errno
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import (
    BestAvailableEncryption,
    Encoding,
    NoEncryption,
    PrivateFormat,
    pkcs12,
)
from cryptography.x509.oid import NameOID

from kquota.cli.brokers import probe, read_live, split_address
from kquota.cli.connect import add_connection_args, direct_connection
from kquota.cli.main import main
from kquota.cli.properties import parse_jaas, parse_properties, settings_from_properties
from kquota.cli.target import TargetError
from kquota.kafka.settings import ConnectionSettings

SECRET = 's3cr=t;"quoted"'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("a=1\nb = 2\n", {"a": "1", "b": "2"}, id="key=value with or without spaces"),
        pytest.param("a:1\nb 2\n", {"a": "1", "b": "2"}, id="colon and whitespace separate too"),
        pytest.param("# c\n! c\n\n  a=1", {"a": "1"}, id="comments and blank lines are skipped"),
        pytest.param("a=x \\\n   y\\\n z\n", {"a": "x yz"}, id="a trailing backslash continues the line"),
        pytest.param("a=x\\\\\nb=2", {"a": "x\\", "b": "2"}, id="an escaped backslash does not continue"),
        pytest.param("k\\=ey=v\\:1\\u00e9\\t", {"k=ey": "v:1é\t"}, id="escapes in keys and values"),
        pytest.param("a=", {"a": ""}, id="an empty value"),
    ],
)
def test_properties(text: str, expected: dict[str, str]) -> None:
    assert parse_properties(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="pw";',
            {"username": "alice", "password": "pw"},
            id="the usual SCRAM form",
        ),
        pytest.param(
            'x.PlainLoginModule required\n  username=alice\n  password="a \\"b\\";c";',
            {"username": "alice", "password": 'a "b";c'},
            id="unquoted values, newlines, escaped quotes and a semicolon inside quotes",
        ),
    ],
)
def test_jaas(text: str, expected: dict[str, str]) -> None:
    assert parse_jaas(text) == expected


def test_a_broken_jaas_config_is_reported_without_its_content() -> None:
    with pytest.raises(TargetError) as info:
        parse_jaas(f'Module required username="a" "{SECRET}";')
    assert SECRET not in str(info.value)
    assert "s3cr" not in str(info.value)


def sasl(protocol: str = "SASL_PLAINTEXT", **extra: str) -> dict[str, str]:
    jaas = SECRET.replace("\\", "\\\\").replace('"', '\\"')
    return {
        "security.protocol": protocol,
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": f'x.ScramLoginModule required username="admin" password="{jaas}";',
        **extra,
    }


def test_sasl_settings_keep_the_password_out_of_the_repr() -> None:
    conn = settings_from_properties(sasl(), "kafka:9093", 5)
    assert (conn.security_protocol, conn.sasl_mechanism, conn.sasl_username) == (
        "SASL_PLAINTEXT",
        "SCRAM-SHA-512",
        "admin",
    )
    assert conn.sasl_password == SECRET
    assert SECRET not in repr(conn)
    assert (conn.request_timeout_ms, conn.connect_timeout_ms) == (5000, 5000)


def self_signed(cn: str) -> tuple[str, str, Any, Any]:
    """A certificate and key, as PEM text and as objects (for PKCS#12 stores)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
    return cert.public_bytes(Encoding.PEM).decode(), key_pem, cert, key


def test_ssl_with_pem_files(tmp_path: Path) -> None:
    ca_pem, _, _, _ = self_signed("ca")
    cert_pem, key_pem, _, _ = self_signed("client")
    (tmp_path / "ca.pem").write_text(ca_pem)
    (tmp_path / "client.pem").write_text(cert_pem + key_pem)  # Kafka's PEM keystore: chain and key in one file
    props = sasl("SASL_SSL", **{"ssl.truststore.type": "PEM", "ssl.truststore.location": str(tmp_path / "ca.pem")})
    props["ssl.keystore.location"] = str(tmp_path / "client.pem")
    conn = settings_from_properties(props, "kafka:9093", 5)
    assert conn.ssl_cafile and conn.ssl_certfile and conn.ssl_keyfile
    assert Path(conn.ssl_cafile).read_text() == ca_pem
    assert Path(conn.ssl_certfile).read_text() == cert_pem
    assert "PRIVATE KEY" in Path(conn.ssl_keyfile).read_text()


def test_ssl_with_pkcs12_stores_as_kafka_clients_name_them(tmp_path: Path) -> None:
    ca_pem, _, ca, _ = self_signed("ca")
    cert_pem, _, cert, key = self_signed("client")
    (tmp_path / "trust.p12").write_bytes(
        pkcs12.serialize_key_and_certificates(b"t", None, None, [ca], BestAvailableEncryption(b"trustpw"))
    )
    (tmp_path / "keys.p12").write_bytes(
        pkcs12.serialize_key_and_certificates(b"k", key, cert, None, BestAvailableEncryption(b"keypw"))
    )
    props = {
        "security.protocol": "SSL",
        "ssl.truststore.type": "PKCS12",
        "ssl.truststore.location": str(tmp_path / "trust.p12"),
        "ssl.truststore.password": "trustpw",
        # No type: Kafka's default (JKS) reads PKCS#12 files, and so does kquota.
        "ssl.keystore.location": str(tmp_path / "keys.p12"),
        "ssl.keystore.password": "keypw",
        "ssl.key.password": "keypw",
    }
    conn = settings_from_properties(props, "kafka:9093", 5)
    assert conn.ssl_cafile and conn.ssl_certfile and conn.ssl_keyfile
    assert Path(conn.ssl_cafile).read_text() == ca_pem
    assert Path(conn.ssl_certfile).read_text() == cert_pem
    props["ssl.keystore.password"] = "wrong-and-secret"
    with pytest.raises(TargetError) as info:
        settings_from_properties(props, "kafka:9093", 5)
    assert "wrong password" in str(info.value) and "wrong-and-secret" not in str(info.value)


def test_a_jks_store_is_refused_with_the_conversion(tmp_path: Path) -> None:
    (tmp_path / "t.jks").write_bytes(b"\xfe\xed\xfe\xed" + b"\x00" * 40)
    props = {"security.protocol": "SSL", "ssl.truststore.location": str(tmp_path / "t.jks")}
    with pytest.raises(TargetError, match=r"a JKS store is not supported.*keytool -importkeystore"):
        settings_from_properties(props, "k:1", 5)


@pytest.mark.parametrize(
    ("props", "bootstrap", "message"),
    [
        pytest.param({}, None, "no brokers", id="no bootstrap anywhere"),
        pytest.param(
            {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-1"},
            "k:1",
            "sasl.mechanism SCRAM-SHA-1 is not supported",
            id="a mechanism Kafka does not have",
        ),
        pytest.param(
            {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}, "k:1", "needs sasl.jaas.config", id="no JAAS"
        ),
        pytest.param(
            {"security.protocol": "SSL", "ssl.truststore.location": "/t.bks", "ssl.truststore.type": "BKS"},
            "k:1",
            "type BKS is not supported",
            id="a store type kquota does not read",
        ),
        pytest.param({"security.protocol": "TLS"}, "k:1", "is not one of", id="an unknown protocol"),
    ],
)
def test_errors(props: dict[str, str], bootstrap: str | None, message: str) -> None:
    with pytest.raises(TargetError) as info:
        settings_from_properties(props, bootstrap, 5)
    assert message in str(info.value)
    assert SECRET not in str(info.value)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_connection_args(parser, "cluster")
    return parser.parse_args(argv)


def test_command_config_file_and_flag_precedence(tmp_path: Path) -> None:
    path = tmp_path / "admin.properties"
    # Backslashes are escapes in a properties file: the JAAS value's \" is written \\".
    body = "\n".join(f"{k}={v.replace(chr(92), chr(92) * 2)}" for k, v in sasl().items())
    path.write_text("bootstrap.servers=from-file:9092\n" + body)
    conn = direct_connection(parse(["--command-config", str(path)]))
    assert conn is not None
    assert conn.bootstrap_servers == "from-file:9092"
    conn = direct_connection(parse(["--command-config", str(path), "--bootstrap-server", "flag:9092"]))
    assert conn is not None
    assert conn.bootstrap_servers == "flag:9092"
    assert (conn.sasl_username, conn.sasl_password) == ("admin", SECRET)
    assert direct_connection(parse([])) is None
    with pytest.raises(TargetError, match="cannot read"):
        direct_connection(parse(["--command-config", str(tmp_path / "missing")]))


def test_defaults_follow_the_operator_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KQUOTA_NAMESPACE", "ops")
    monkeypatch.setenv("KQUOTA_DEFAULT_CLUSTER", "prod")
    args = parse([])
    assert (args.ledger_namespace, args.default_cluster) == ("ops", "prod")


# --- reaching the brokers: the cause, at once --------------------------------------------


def closed_port() -> int:
    """A local port nothing listens on (bound once to pick it, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_a_refused_port_fails_at_once_naming_the_cause() -> None:
    port = closed_port()
    started = time.monotonic()
    with pytest.raises(TargetError) as info:
        read_live(ConnectionSettings(f"127.0.0.1:{port}", connect_timeout_ms=30_000, request_timeout_ms=30_000))
    assert time.monotonic() - started < 5
    assert str(info.value) == (
        f"cannot reach any bootstrap server: 127.0.0.1:{port}: connection refused "
        f"(nothing listens on port {port} of 127.0.0.1)"
    )


def test_plan_against_a_refused_port_says_so_in_seconds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "q.yaml").write_text(
        "apiVersion: kquota.io/v1alpha1\nkind: ClientQuota\nmetadata: {name: a, namespace: t}\n"
        "spec: {entity: {user: {name: alice}}, quota: {producerByteRate: 1Mi}}\n"
    )
    port = closed_port()
    started = time.monotonic()
    code = main(["plan", "-f", str(tmp_path), "--bootstrap-server", f"127.0.0.1:{port}"])
    assert (code, time.monotonic() - started < 5) == (1, True)
    assert f"127.0.0.1:{port}: connection refused" in capsys.readouterr().err


def fake_connect(outcomes: dict[str, OSError | None]) -> Any:
    def connect(address: tuple[str, int], timeout: float) -> None:
        outcome = outcomes[address[0]]
        if outcome is not None:
            raise outcome

    return connect


@pytest.mark.parametrize(
    ("servers", "outcomes", "message"),
    [
        pytest.param(
            "kafka-0.example:9092,kafka-1.example:9093",
            {
                "kafka-0.example": socket.gaierror(socket.EAI_NONAME, "Name or service not known"),
                "kafka-1.example": ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"),
            },
            "cannot reach any bootstrap server: kafka-0.example:9092: DNS lookup of kafka-0.example failed "
            "(Name or service not known); kafka-1.example:9093: connection refused "
            "(nothing listens on port 9093 of kafka-1.example)",
            id="every address is named with its own cause, in the order given",
        ),
        pytest.param(
            "10.0.0.1",
            {"10.0.0.1": TimeoutError("timed out")},
            "cannot reach any bootstrap server: 10.0.0.1: "
            "no answer within 2.5 s (timeout; a firewall, or the wrong host)",
            id="a timeout says how long it waited; a bare host means port 9092 as in kafka-python",
        ),
        pytest.param(
            "[::1]:9094",
            {"::1": OSError(errno.ENETUNREACH, "Network is unreachable")},
            "cannot reach any bootstrap server: [::1]:9094: cannot connect: Network is unreachable",
            id="any other socket error is quoted",
        ),
    ],
)
def test_probe_names_each_address_and_its_cause(servers: str, outcomes: dict[str, OSError], message: str) -> None:
    with pytest.raises(TargetError) as info:
        probe(servers, 2.5, fake_connect(outcomes))
    assert str(info.value) == message


def test_one_answering_server_is_enough() -> None:
    outcomes: dict[str, OSError | None] = {"down": ConnectionRefusedError(errno.ECONNREFUSED, "refused"), "up": None}
    probe("down:9092,up:9092", 1, fake_connect(outcomes))  # no error


@pytest.mark.parametrize(
    ("server", "address"),
    [
        pytest.param("kafka:9093", ("kafka", 9093), id="host:port"),
        pytest.param(" kafka ", ("kafka", 9092), id="a bare host gets Kafka's port"),
        pytest.param("[fe80::1]:9094", ("fe80::1", 9094), id="a bracketed IPv6 address"),
        pytest.param("fe80::1", ("fe80::1", 9092), id="a bare IPv6 address"),
    ],
)
def test_split_address(server: str, address: tuple[str, int]) -> None:
    assert split_address(server) == address


def test_a_port_that_is_not_a_number_is_refused() -> None:
    with pytest.raises(TargetError, match="the port is not a number"):
        split_address("kafka:90x2")
