"""kquota names its TLS client exactly as a Kafka broker does: compared with Java on real certificates.

Each subject below is put in a certificate by ``openssl req -subj``; Java's
``X500Principal.getName()`` (what Kafka's DefaultKafkaPrincipalBuilder uses with
the default mapping rules) and :func:`kquota.kafka.principal.subject_principal`
read it back, and must agree character for character.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from kquota.kafka.principal import CertificateError, subject_principal

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
#: openssl -subj strings (RDNs least specific first, "/" and "+" escaped with "\\"; "+" joins a multi-valued RDN).
SUBJECTS = {
    "simple": "/OU=platform/CN=kquota-operator",
    "organisation": "/C=DE/ST=Berlin/L=Berlin/O=Acme GmbH/OU=platform/CN=kquota",
    "comma and equals": "/O=Acme, Inc./CN=a=b",
    "every special character": '/CN=#lead,plus\\+;semi<lt>gt"quote\\\\back',
    "leading and trailing spaces": "/CN= padded ",
    "hash inside": "/CN=team#1",
    "unicode": "/O=Müller/CN=クオータ",
    "domain components": "/DC=io/DC=kquota/UID=op-1/CN=operator",
    "email (an OID in RFC 2253)": "/emailAddress=ops@example.com/CN=kquota",
    "serial number (an OID)": "/serialNumber=42/CN=kquota",
    "multi-valued RDN": "/O=Acme/CN=kquota+UID=ops",
    "only an OU": "/OU=no-common-name",
}


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if shutil.which("openssl") is None or shutil.which("java") is None:
        pytest.fail("openssl and java are needed (both are part of the project's setup)")
    directory = tmp_path_factory.mktemp("principals")
    out = {}
    for i, (case, subj) in enumerate(SUBJECTS.items()):
        cert = directory / f"{i}.pem"
        subprocess.run(
            [
                *("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"),
                *("-keyout", str(directory / f"{i}.key"), "-out", str(cert), "-days", "1", "-utf8"),
                *("-multivalue-rdn", "-subj", subj),
            ],
            check=True,
            capture_output=True,
        )
        out[case] = cert
    return out


def java_names(paths: list[Path]) -> list[str]:
    result = subprocess.run(
        ["java", str(HERE / "X500Name.java"), *map(str, paths)], capture_output=True, check=True, timeout=120
    )
    return result.stdout.decode("utf-8").split("\n")[: len(paths)]


def test_principal_names_agree_with_java(certificates: dict[str, Path]) -> None:
    cases = list(certificates)
    expected = dict(zip(cases, java_names([certificates[c] for c in cases]), strict=True))
    ours = {case: subject_principal(certificates[case].read_text()) for case in cases}
    assert ours == expected
    # The corpus exercises what differs from RFC 4514 libraries.
    assert expected["hash inside"] == "CN=team\\#1"
    assert expected["email (an OID in RFC 2253)"].startswith("CN=kquota,1.2.840.113549.1.9.1=#")


def test_a_chain_is_named_by_its_first_certificate(certificates: dict[str, Path]) -> None:
    chain = certificates["simple"].read_text() + certificates["unicode"].read_text()
    assert subject_principal(chain) == "CN=kquota-operator,OU=platform"


@pytest.mark.parametrize(
    "pem",
    [
        "",
        "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
        "-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n",
        "-----BEGIN CERTIFICATE-----\nMAMCAQE=\n-----END CERTIFICATE-----\n",
    ],
    ids=["empty", "a key", "not base64", "not a certificate"],
)
def test_what_is_not_a_certificate_is_a_certificate_error(pem: str) -> None:
    with pytest.raises(CertificateError):
        subject_principal(pem)
