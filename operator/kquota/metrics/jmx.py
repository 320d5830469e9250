"""JMX label values back to Kafka's names: the ``user`` and ``clientId`` labels of the quota metrics.

Kafka puts them in the MBean's ObjectName: ``user`` URL-encoded by its
Sanitizer, any value JMX-quoted (``ObjectName.quote``) when it has characters
outside ``[A-Za-z0-9_%. -]``. The operator and the advisor both decode with
these two functions, so a principal reads the same in a status and in advice.
"""

from __future__ import annotations

import urllib.parse


def decode_user(raw: str) -> str:
    """A ``user`` label back to the principal name (Kafka's Sanitizer.desanitize).

    ``CN%3Dapp%2COU%3Dx`` -> ``CN=app,OU=x``; ``%3Cdefault%3E`` -> the user
    literally named ``<default>`` (the default entity never appears in tags).
    """
    return urllib.parse.unquote_plus(decode_client_id(raw))


def decode_client_id(raw: str) -> str:
    """A ``clientId`` label back to the client.id: undoes ``ObjectName.quote`` when the value is quoted."""
    if len(raw) < 2 or not (raw.startswith('"') and raw.endswith('"')):
        return raw
    body = raw[1:-1]
    out: list[str] = []
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            out.append("\n" if nxt == "n" else nxt)
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)
