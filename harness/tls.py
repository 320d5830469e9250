"""Throwaway certificate authorities and certificates for TLS tests, made with ``openssl``.

``CertificateAuthority.create(directory)`` makes a self-signed CA;
``ca.issue(dn, ...)`` a leaf certificate signed by it. Everything is PEM:
certificates as ``*.crt``, keys as unencrypted PKCS#8 ``*.key`` (mode 0600),
EC P-256 (fast to generate on a small machine; Java, librdkafka and Python's
``ssl`` all take it). Certificates are valid for 30 days from now.

DNs are written the way Kafka prints a TLS principal (RFC 2253, most specific
first): ``CN=kquota-operator,OU=platform`` is the subject ``/OU=platform/CN=kquota-operator``,
and a broker's listener with ``ssl.client.auth=required`` names a client with
that certificate ``User:CN=kquota-operator,OU=platform``. Only simple DNs are
supported (no ``,``, ``+``, ``/``, ``\\`` or ``"`` inside values).

Why the ``openssl`` command and not ``keytool``: keytool cannot write a private
key as PEM, which the operator (kafka-python, Python's ``ssl``) and librdkafka
need; openssl is a Debian base tool. Without it, ``ComponentError`` says so.

For the brokers, ``BrokerTls.create`` adds a broker certificate for
``127.0.0.1``/``localhost`` and wraps it in a PKCS#12 keystore. Why not a PEM
keystore (``ssl.keystore.type=PEM`` with a file): Kafka's file-based PEM
keystore demands ``ssl.key.password``, i.e. an encrypted PKCS#8 key whose
cipher Java must know (``DefaultSslEngineFactory``: "SSL PEM key store is
specified, but key password is not specified"). The truststore is the CA's PEM
file (``ssl.truststore.type=PEM``, no password), which Kafka reads as is.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness import procs

_DAYS = "30"
_SAFE_VALUE = re.compile(r"^[^,+/\\\"=<>#;]+$")
_EXTENSIONS = """\
[req]
distinguished_name = dn
[dn]
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[leaf]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = {eku}
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
{san}
"""


def _openssl() -> str:
    path = shutil.which("openssl")
    if path is None:
        raise procs.ComponentError("TLS tests need the openssl command (Debian package openssl)")
    return path


def _run(*args: str) -> None:
    result = subprocess.run([_openssl(), *args], capture_output=True, text=True, timeout=60, check=False)
    if result.returncode != 0:
        raise procs.ComponentError(f"openssl {args[0]} failed (exit {result.returncode}):\n{result.stderr}")


def subject(dn: str) -> str:
    """openssl's ``-subj`` for an RFC 2253 DN: ``CN=a,OU=b`` -> ``/OU=b/CN=a``."""
    parts = [p.strip() for p in dn.split(",")]
    for part in parts:
        attr, sep, value = part.partition("=")
        if not sep or not attr.isalpha() or not _SAFE_VALUE.match(value):
            raise ValueError(f"unsupported DN component {part!r} in {dn!r}")
    return "/" + "/".join(reversed(parts))


def _private(path: Path) -> None:
    os.chmod(path, 0o600)


@dataclass(frozen=True)
class Credential:
    """A certificate and its private key, as PEM files."""

    dn: str
    cert: Path
    key: Path

    def cert_pem(self) -> str:
        return self.cert.read_text()

    def key_pem(self) -> str:
        return self.key.read_text()

    def secret_lines(self) -> list[str]:
        """The key's base64 lines that carry private key bits, as needles for leak searches.

        A P-256 PKCS#8 key is three lines: the first holds the algorithm
        identifier and the first 12 bytes of the private scalar, the second the
        rest of it, the last only the public key (which is in the certificate
        too, so it is no needle). Each line is unique to the key.
        """
        lines = [line for line in self.key_pem().splitlines() if line and not line.startswith("-----")]
        return lines[:-1]

    def pkcs12(self, path: Path, password: str, chain: Sequence[Path] = ()) -> Path:
        """A PKCS#12 keystore with this key, its certificate and ``chain`` (what Java reads)."""
        args = ["-export", "-in", str(self.cert), "-inkey", str(self.key), "-name", "kafka"]
        for extra in chain:
            args += ["-certfile", str(extra)]
        _run("pkcs12", *args, "-out", str(path), "-passout", f"pass:{password}")
        _private(path)
        return path


@dataclass(frozen=True)
class CertificateAuthority:
    """A self-signed CA in ``directory``; ``issue`` signs leaf certificates."""

    directory: Path
    own: Credential

    @property
    def cert(self) -> Path:
        return self.own.cert

    def cert_pem(self) -> str:
        return self.own.cert_pem()

    @classmethod
    def create(cls, directory: Path, cn: str = "kquota test CA") -> CertificateAuthority:
        directory.mkdir(parents=True, exist_ok=True)
        slug = _slug(cn)
        cert, key = directory / f"{slug}.crt", directory / f"{slug}.key"
        config = _config(directory, slug, eku="serverAuth", san="")
        _run(
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            _DAYS,
            "-subj",
            subject(f"CN={cn}"),
            "-config",
            str(config),
            "-extensions",
            "ca",
        )
        _private(key)
        return cls(directory, Credential(f"CN={cn}", cert, key))

    def issue(
        self,
        dn: str,
        *,
        name: str | None = None,
        ips: Sequence[str] = (),
        dns: Sequence[str] = (),
        server: bool = False,
    ) -> Credential:
        """A certificate for ``dn`` signed by this CA: a client certificate, or a server one with SANs."""
        slug = name or _slug(dn)
        cert, key, csr = (self.directory / f"{slug}.{ext}" for ext in ("crt", "key", "csr"))
        sans = [f"IP:{ip}" for ip in ips] + [f"DNS:{d}" for d in dns]
        config = _config(
            self.directory,
            slug,
            eku="serverAuth,clientAuth" if server else "clientAuth",
            san=f"subjectAltName = {','.join(sans)}" if sans else "",
        )
        _run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(key))
        _private(key)
        _run("req", "-new", "-key", str(key), "-subj", subject(dn), "-config", str(config), "-out", str(csr))
        _run(
            "x509",
            "-req",
            "-in",
            str(csr),
            "-CA",
            str(self.own.cert),
            "-CAkey",
            str(self.own.key),
            "-set_serial",
            f"0x{secrets.token_hex(16)}",
            "-days",
            _DAYS,
            "-extfile",
            str(config),
            "-extensions",
            "leaf",
            "-out",
            str(cert),
        )
        csr.unlink()
        return Credential(dn, cert, key)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.-]+", "-", text).strip("-").lower() or "cert"


def _config(directory: Path, slug: str, eku: str, san: str) -> Path:
    path = directory / f"{slug}.cnf"
    path.write_text(_EXTENSIONS.format(eku=eku, san=san))
    return path


@dataclass(frozen=True)
class BrokerTls:
    """What the brokers' SSL and SASL_SSL listeners use, under ``<workdir>/tls``."""

    ca: CertificateAuthority
    broker: Credential
    keystore: Path
    keystore_password: str = field(repr=False)
    #: With ``custom=True``: a second CA (as a public CA is to a Strimzi cluster) and the broker
    #: certificate it signed, for a listener with a custom certificate.
    custom_ca: CertificateAuthority | None = None
    custom: Credential | None = None
    custom_keystore: Path | None = None

    @classmethod
    def create(cls, workdir: Path, custom: bool = False) -> BrokerTls:
        ca = CertificateAuthority.create(workdir / "tls", cn="kquota test CA")
        broker = ca.issue("CN=localhost,OU=kafka", name="broker", ips=["127.0.0.1"], dns=["localhost"], server=True)
        password = secrets.token_hex(12)
        keystore = broker.pkcs12(ca.directory / "broker.p12", password)
        if not custom:
            return cls(ca, broker, keystore, password)
        other = CertificateAuthority.create(workdir / "tls-custom", cn="kquota test public CA")
        leaf = other.issue("CN=kafka.example.com", name="custom", ips=["127.0.0.1"], dns=["localhost"], server=True)
        return cls(ca, broker, keystore, password, other, leaf, leaf.pkcs12(other.directory / "custom.p12", password))

    def server_properties(self) -> dict[str, str]:
        """Broker settings shared by both TLS listeners (client auth is set per listener)."""
        return {
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(self.keystore),
            "ssl.keystore.password": self.keystore_password,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca.cert),
        }
