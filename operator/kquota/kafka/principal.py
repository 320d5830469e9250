"""The user name Kafka gives a TLS client: its certificate's subject, as Java renders it.

With mutual TLS and the default ``ssl.principal.mapping.rules``, a broker names
a client ``User:<X500Principal.getName()>``: the certificate's subject DN in
RFC 2253 form, most specific RDN first (``CN=kquota,OU=platform,O=Acme``). That
name is also the ``user`` of its client quotas, so the operator protects it like
its SASL user. Java's rendering differs from RFC 4514 libraries (it escapes
every ``#`` and ``=``, names only nine attribute types and writes the others as
``<oid>=#<DER hex>``), hence this small DER reader rather than a dependency;
tests/integration/test_tls_principal.py compares it with Java on real certificates.

Brokers with custom mapping rules rename the principal: ``protectedUsers`` is
the place for that name.
"""

from __future__ import annotations

import base64
import re

#: Attribute types Java's RFC 2253 output names by keyword; others appear as OIDs.
_KEYWORDS = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.9": "STREET",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
_ESCAPED = set(',=+<>#;"\\')
#: DER string types and their encodings (UTF8String, PrintableString, IA5String, T61String, BMPString, UniversalString).
_STRINGS = {0x0C: "utf-8", 0x13: "latin-1", 0x16: "latin-1", 0x14: "latin-1", 0x1E: "utf-16-be", 0x1C: "utf-32-be"}
_PEM = re.compile(r"-----BEGIN CERTIFICATE-----(.+?)-----END CERTIFICATE-----", re.DOTALL)


class CertificateError(ValueError):
    """Not a PEM certificate this reader understands."""


def _tlv(der: bytes, pos: int) -> tuple[int, int, int]:
    """(tag, start of content, end of content) of the element at ``pos``."""
    if pos + 2 > len(der):
        raise CertificateError("truncated DER")
    tag, length = der[pos], der[pos + 1]
    pos += 2
    if length & 0x80:
        count = length & 0x7F
        if count == 0 or count > 4 or pos + count > len(der):
            raise CertificateError("unsupported DER length")
        length = int.from_bytes(der[pos : pos + count], "big")
        pos += count
    if pos + length > len(der):
        raise CertificateError("truncated DER")
    return tag, pos, pos + length


def _children(der: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """(tag, content start, content end, element start) of each element in ``der[start:end]``."""
    out = []
    while start < end:
        tag, body, stop = _tlv(der, start)
        out.append((tag, body, stop, start))
        start = stop
    return out


def _oid(raw: bytes) -> str:
    if not raw:
        raise CertificateError("empty OID")
    parts = [min(raw[0] // 40, 2), raw[0] - 40 * min(raw[0] // 40, 2)]
    value = 0
    for byte in raw[1:]:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            parts.append(value)
            value = 0
    return ".".join(map(str, parts))


def _escape(value: str) -> str:
    out = "".join(f"\\{c}" if c in _ESCAPED else "\\00" if c == "\0" else c for c in value)
    # Leading and trailing spaces (and carriage returns) are escaped, as Java does.
    lead = len(out) - len(out.lstrip(" \r"))
    trail = len(out.rstrip(" \r"))
    return "".join(f"\\{c}" if i < lead or i >= trail else c for i, c in enumerate(out))


def _ava(der: bytes, body: int, end: int) -> str:
    (oid_tag, oid_start, oid_end, _), (tag, start, stop, element) = _children(der, body, end)[:2]
    if oid_tag != 0x06:
        raise CertificateError("attribute without a type")
    oid = _oid(der[oid_start:oid_end])
    keyword = _KEYWORDS.get(oid)
    if keyword is None or tag not in _STRINGS:
        return f"{oid}=#{der[element:stop].hex()}"
    return f"{keyword}={_escape(der[start:stop].decode(_STRINGS[tag], errors='replace'))}"


def subject_principal(pem: str) -> str:
    """The Kafka user name of the first certificate in ``pem`` (default mapping rules)."""
    match = _PEM.search(pem)
    if match is None:
        raise CertificateError("no PEM certificate")
    try:
        der = base64.b64decode("".join(match.group(1).split()), validate=True)
    except ValueError as exc:
        raise CertificateError("the PEM certificate is not valid base64") from exc
    _, cert_body, _ = _tlv(der, 0)
    _, tbs_body, tbs_end = _tlv(der, cert_body)
    fields = _children(der, tbs_body, tbs_end)
    if fields and fields[0][0] == 0xA0:  # explicit [0] version
        fields = fields[1:]
    # serialNumber, signature, issuer, validity, subject
    if len(fields) < 5 or fields[4][0] != 0x30:
        raise CertificateError("certificate without a subject")
    _, subject_body, subject_end, _ = fields[4]
    rdns = []
    for tag, body, end, _ in _children(der, subject_body, subject_end):
        if tag != 0x31:
            raise CertificateError("malformed subject")
        avas = [_ava(der, b, e) for t, b, e, _ in _children(der, body, end) if t == 0x30]
        rdns.append("+".join(sorted(avas)) if len(avas) > 1 else "".join(avas))
    return ",".join(reversed(rdns))
