"""TLS failures are told apart from other connection failures and explained."""

from __future__ import annotations

import ssl

import kafka.errors as kafka_errors
import pytest

from kquota.kafka.diagnosis import is_tls_failure, tls_hint

# What kafka-python logged in each case, against Kafka 4.3.1's SSL and SASL_SSL listeners
# (the host mismatch: Python's ssl against a certificate without the IP).
VERIFY_FAILED = (
    "Handshake failed: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: "
    "unable to get local issuer certificate (_ssl.c:1006)"
)
HOST_MISMATCH = (
    "Handshake failed: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: "
    "IP address mismatch, certificate is not valid for '127.0.0.1'. (_ssl.c:1006)"
)
NO_CLIENT_CERT = "[SSL: SSLV3_ALERT_BAD_CERTIFICATE] sslv3 alert bad certificate (_ssl.c:2580)"
UNTRUSTED_CLIENT_CERT = "[SSL: SSLV3_ALERT_CERTIFICATE_UNKNOWN] sslv3 alert certificate unknown (_ssl.c:2580)"
KEY_MISMATCH = "[X509: KEY_VALUES_MISMATCH] key values mismatch (_ssl.c:3926)"
PLAINTEXT_PORT = "Handshake failed: [SSL: UNEXPECTED_EOF_WHILE_READING] EOF occurred in violation of protocol"


@pytest.mark.parametrize(
    ("detail", "hint"),
    [
        pytest.param(VERIFY_FAILED, "could not be verified with the CA certificate", id="a wrong CA names the CA"),
        pytest.param(HOST_MISMATCH, "does not name the host", id="a certificate for another host names the SAN"),
        pytest.param(NO_CLIENT_CERT, "refused kquota's client certificate", id="mTLS without a client certificate"),
        pytest.param(UNTRUSTED_CLIENT_CERT, "refused kquota's client certificate", id="a client cert from another CA"),
        pytest.param(KEY_MISMATCH, "do not match", id="a key that is not the certificate's"),
        pytest.param(PLAINTEXT_PORT, "check the CA certificate", id="anything else gets the generic advice"),
    ],
)
def test_hint(detail: str, hint: str) -> None:
    assert hint in tls_hint(detail)


@pytest.mark.parametrize(
    ("exc", "tls"),
    [
        pytest.param(kafka_errors.KafkaConnectionError(VERIFY_FAILED), True, id="a failed handshake, as text"),
        pytest.param(
            kafka_errors.KafkaConnectionError(ssl.SSLError(1, NO_CLIENT_CERT)), True, id="a TLS alert on first read"
        ),
        pytest.param(ssl.SSLError(116, KEY_MISMATCH), True, id="a key that does not load"),
        pytest.param(kafka_errors.KafkaConnectionError("socket disconnected"), False, id="a plain disconnect"),
        pytest.param(kafka_errors.SaslAuthenticationFailedError("Authentication failed"), False, id="a SASL refusal"),
        pytest.param(ConnectionRefusedError(111, "Connection refused"), False, id="nothing listening"),
        pytest.param("[SSL: x]", False, id="a log argument that is not an exception"),
    ],
)
def test_tls_failures_are_recognised(exc: object, tls: bool) -> None:
    assert is_tls_failure(exc) is tls
