"""TLS material in the forms Kafka users hand out: PEM text and PKCS#12 stores, turned into PEM for the connection.

Kafka's own clients take truststores and keystores as PKCS#12 (``ssl.truststore.type``,
``ssl.keystore.type``) or PEM; Strimzi writes both into its Secrets (``ca.p12`` with
``ca.password``, ``user.p12`` with ``user.password``, beside ``ca.crt`` and
``user.crt``/``user.key``). kafka-python and Python's ``ssl`` read only PEM files, so a
PKCS#12 store is opened here (with ``cryptography``) and its certificates and key become
PEM text, which :func:`kquota.kafka.settings.tls_file` writes to private files.

A truststore's certificates are all trust anchors, as in Java (the Kafka clients'
``ssl.truststore.*``): a Java truststore holding a broker's own certificate (a Strimzi
listener with a custom certificate) trusts that broker. The connection asks OpenSSL
for the same (``VERIFY_X509_PARTIAL_CHAIN``, see connection.py).

Errors (:class:`KeystoreError`) name where the material came from and what is wrong
with it, never a password or key.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, pkcs12


class KeystoreError(ValueError):
    """TLS material that cannot be used; the message says where it came from and why, never its content."""


@dataclass(frozen=True, slots=True)
class KeyMaterial:
    """What a store holds, as PEM: its certificates (a key's own certificate first) and its private key, if any."""

    certificates: tuple[str, ...]
    key: str | None


def _pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(Encoding.PEM).decode("ascii")


def pem_certificates(text: str, where: str) -> tuple[str, ...]:
    """Every certificate of a PEM text, each re-encoded (raises KeystoreError when there is none or one is corrupt)."""
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise KeystoreError(f"{where} holds no PEM certificate")
    try:
        certs = x509.load_pem_x509_certificates(text.encode("utf-8"))
    except ValueError as exc:
        raise KeystoreError(f"{where} holds a certificate that cannot be read ({exc})") from None
    return tuple(_pem(c) for c in certs)


def pkcs12_store(data: bytes, password: str | None, where: str) -> KeyMaterial:
    """The certificates and key of a PKCS#12 store (a Java truststore's trusted certificates included).

    ``password`` is the store's (Strimzi's ``ca.password`` / ``user.password``);
    None or empty opens a store without one.
    """
    secret = password.encode("utf-8") if password else None
    try:
        store = pkcs12.load_pkcs12(data, secret)
    except ValueError:
        # cryptography's message does not tell a wrong password from corrupt data either.
        raise KeystoreError(
            f"{where} is not a PKCS#12 store that opens with the password given (wrong password, or not PKCS#12)"
        ) from None
    except Exception as exc:  # noqa: BLE001 - e.g. an algorithm this build of OpenSSL lacks
        raise KeystoreError(f"{where} cannot be opened as PKCS#12 ({type(exc).__name__})") from None
    certs = ([store.cert.certificate] if store.cert is not None else []) + [
        c.certificate for c in store.additional_certs
    ]
    key = None
    if store.key is not None:
        key = store.key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode("ascii")
    return KeyMaterial(tuple(_pem(c) for c in certs), key)


def bundle(pems: Iterable[str]) -> str:
    """One PEM text of distinct certificates, in a stable order (the same set gives the same text, so the same file)."""
    distinct = sorted({p.strip() + "\n" for p in pems})
    return "".join(distinct)
