"""Run inside the operator image by tests/node/test_image.py: GSSAPI and AWS MSK IAM work there.

Its argument is a directory with ``check.json`` (the client principal and keytab,
the brokers' service keytab and host, the KDC's krb5.conf). It prints one JSON
object:

- ``kerberos``: kquota's own GSSAPI client (``kquota.kafka.kerberos``: a ticket
  from the keytab, through MIT's credential store) establishes a security
  context with mutual authentication to ``kafka/<host>``, accepted here with the
  service's keytab as a broker would, and a message wrapped by one side is
  unwrapped by the other: a real AS, TGS and AP exchange with the harness's KDC.
- ``libraries``: the files the process mapped for the MIT Kerberos libraries
  (the image's own copies are in /opt/kquota/lib/krb5).
- ``msk``: the URL inside the token ``kquota.kafka.msk.sign`` got from AWS's
  signer with the credentials of the environment (the test checks its SigV4
  signature).

Only the standard library, kquota and what the image ships are imported.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

MIT_LIBRARIES = ("libgssapi_krb5.so", "libkrb5.so", "libk5crypto.so", "libkrb5support.so")


def mapped_libraries() -> dict[str, str]:
    """The file each MIT Kerberos library was mapped from (the process's /proc/self/maps)."""
    found: dict[str, str] = {}
    for line in Path("/proc/self/maps").read_text().splitlines():
        path = line.split()[-1]
        for name in MIT_LIBRARIES:
            if os.path.basename(path).startswith(name + "."):
                found[name] = path
    return found


def kerberos(check: dict[str, str]) -> dict[str, Any]:
    import gssapi  # imported here: a missing package fails this check only

    from kquota.kafka import kerberos as kquota_kerberos
    from kquota.kafka.settings import KerberosSettings

    # The acceptor stands in for a broker; its replay cache would be a file in /var/tmp.
    os.environ["KRB5RCACHETYPE"] = "none"
    client = kquota_kerberos.target(KerberosSettings(check["principal"], check["keytab"], check["krb5_conf"]))
    service = gssapi.Name(f"kafka@{check['host']}", gssapi.NameType.hostbased_service)
    initiator = gssapi.SecurityContext(name=service, usage="initiate", creds=client.credentials())
    acceptor = gssapi.SecurityContext(
        usage="accept", creds=gssapi.Credentials(usage="accept", store={"keytab": check["service_keytab"]})
    )
    token = initiator.step()  # AP-REQ (after the AS and TGS exchanges with the KDC)
    for _ in range(4):
        if initiator.complete and acceptor.complete:
            break
        token = acceptor.step(token)  # AP-REP: mutual authentication
        if not initiator.complete:
            token = initiator.step(token)
    wrapped = initiator.wrap(b"kquota", True)
    return {
        "complete": initiator.complete and acceptor.complete,
        "mutual": bool(initiator.actual_flags & gssapi.RequirementFlag.mutual_authentication),
        "initiator": str(acceptor.initiator_name),
        "encrypted": wrapped.encrypted,
        "unwrapped": acceptor.unwrap(wrapped.message).message.decode(),
    }


def msk() -> dict[str, Any]:
    from kquota.kafka.msk import sign
    from kquota.kafka.settings import MskIamSettings

    token = sign(MskIamSettings("eu-west-1"))
    url = base64.urlsafe_b64decode(token.value + "=" * (-len(token.value) % 4)).decode()
    return {"url": url, "lifetime": token.lifetime}


def attempt(what: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``what()``, or the exception it raised (each check fails on its own)."""
    try:
        return what()
    except Exception as exc:  # noqa: BLE001 - reported to the test, which fails with it
        return {"error": f"{type(exc).__name__}: {exc}"}


def main(directory: str) -> None:
    check = json.loads((Path(directory) / "check.json").read_text())
    result = {
        "kerberos": attempt(lambda: kerberos(check)),
        "msk": attempt(msk),
        "libraries": mapped_libraries(),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
