"""SASL/GSSAPI (Kerberos) with each cluster's own keytab and credential cache.

kafka-python's GSSAPI mechanism asks the Kerberos library for the *default*
credentials: the process's ``KRB5CCNAME`` and ``KRB5_CLIENT_KTNAME``, one
identity for the whole process. kquota reaches several clusters, each with its
own principal and keytab, so it registers a mechanism of its own under the name
``GSSAPI`` (the same exchange, RFC 4752, inherited from kafka-python's) that
acquires credentials from a per-cluster *credential store* (MIT's
``gss_acquire_cred_from``): ``client_keytab`` is the cluster's keytab (a private
file written from its Secret) and ``ccache`` a private file cache of its own.
The library gets a ticket from the keytab when the cache has none or its
ticket has expired, so an expired ticket is renewed on the next
authentication, which the brokers ask for every ``connections.max.reauth.ms``.
Connections that pass kafka-python anything else as ``sasl_kerberos_name``
behave exactly as kafka-python's own.

What stays process-wide: the Kerberos library reads one krb5.conf
configuration per process, from ``KRB5_CONFIG``. kquota sets it to every
krb5.conf its clusters name, joined with ``:`` (MIT reads each, the first
value of a setting wins), plus whatever ``KRB5_CONFIG`` was at start-up: realms
and KDCs of several clusters add up, but ``[libdefaults]`` such as
``default_realm`` come from the first file that sets them, so clusters in
different realms should name their realms in principals and map hosts in
``[domain_realm]``.

``gssapi`` (PyPI, built on MIT krb5's libgssapi_krb5) is imported only when a
cluster uses GSSAPI.
"""

from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass
from typing import Any, Final

from kafka.net.sasl import register_sasl_mechanism
from kafka.net.sasl.gssapi import SaslMechanismGSSAPI

from kquota.kafka.errors import KafkaLoginFailed
from kquota.kafka.settings import KerberosSettings, private_dir

#: KRB5_CONFIG as the process started with it (None: the library's default, /etc/krb5.conf).
_STARTUP_KRB5_CONFIG: Final = os.environ.get("KRB5_CONFIG")
_lock = threading.Lock()
#: The krb5.conf files of the clusters this process has connected to.
_krb5_files: set[str] = set()


@dataclass(frozen=True)
class Client:
    """A cluster's Kerberos client, handed to the mechanism as kafka-python's ``sasl_kerberos_name``."""

    settings: KerberosSettings
    #: The cluster's private credential cache file.
    ccache: str

    def __str__(self) -> str:
        return self.settings.principal or "<cached ticket>"

    def credentials(self) -> Any:
        """The Kerberos library's credentials for this client (a ticket from the keytab when none is cached)."""
        import gssapi  # noqa: PLC0415 - only clusters with GSSAPI need it
        from gssapi.raw.misc import GSSError  # noqa: PLC0415

        s = self.settings
        if s.keytab_file is None:
            return None  # the default cache: the ticket kinit left (the CLI's useTicketCache)
        name = gssapi.Name(s.principal, gssapi.NameType.kerberos_principal) if s.principal else None
        store: dict[bytes | str, bytes | str] = {"client_keytab": s.keytab_file, "ccache": f"FILE:{self.ccache}"}
        try:
            return gssapi.Credentials(name=name, usage="initiate", store=store)
        except GSSError as exc:
            raise KafkaLoginFailed(_login_failure(s, exc)) from None


def _login_failure(s: KerberosSettings, exc: Exception) -> str:
    detail = " ".join(str(exc).split())[:300]
    return (
        f"GSSAPI: no Kerberos ticket for {s.principal!r} from its keytab: {detail} (check the keytab holds this "
        "principal's current key, and that krb5.conf names a KDC of its realm that answers)"
    )


def _use_krb5_conf(path: str | None) -> None:
    """Make the library read ``path`` too (see the module docstring: one configuration per process)."""
    if path is None:
        return
    with _lock:
        if path in _krb5_files:
            return
        _krb5_files.add(path)
        files = sorted(_krb5_files) + ([_STARTUP_KRB5_CONFIG] if _STARTUP_KRB5_CONFIG else [])
        os.environ["KRB5_CONFIG"] = ":".join(files)


def target(settings: KerberosSettings) -> Client:
    """What the connection passes as ``sasl_kerberos_name`` for a cluster's Kerberos client.

    Raises KafkaLoginFailed when the gssapi package cannot be imported (an installation without the
    ``kerberos`` extra; the image has it, see docs/install.md).
    """
    try:
        import gssapi  # noqa: F401, PLC0415 - only clusters with GSSAPI need it
    except (ImportError, OSError) as exc:
        raise KafkaLoginFailed(
            f"GSSAPI needs the gssapi package (pip install 'kquota[kerberos]'), which cannot be imported: {exc}"
        ) from None
    _ensure_registered()
    _use_krb5_conf(settings.krb5_conf_file)
    slug = hashlib.sha256(f"{settings.principal}\0{settings.keytab_file}".encode()).hexdigest()[:16]
    return Client(settings, os.path.join(private_dir(), f"{slug}.ccache"))


class _Mechanism(SaslMechanismGSSAPI):  # type: ignore[misc]  # kafka-python is untyped
    """kafka-python's GSSAPI exchange, with a cluster's own credentials when ``sasl_kerberos_name`` is a Client."""

    def __init__(self, **config: Any) -> None:
        client = config.get("sasl_kerberos_name")
        if not isinstance(client, Client):
            super().__init__(**config)
            return
        import gssapi  # noqa: PLC0415 - only clusters with GSSAPI need it
        from gssapi.raw.misc import GSSError  # noqa: PLC0415

        self._is_done = False
        self._is_authenticated = False
        host = config.get("sasl_kerberos_domain_name") or config.get("host", "")
        self.auth_id = f"{client.settings.service_name}@{host}"
        try:
            self.gssapi_name = gssapi.Name(self.auth_id, name_type=gssapi.NameType.hostbased_service).canonicalize(
                gssapi.MechType.kerberos
            )
            creds = client.credentials()
            self._client_ctx = gssapi.SecurityContext(name=self.gssapi_name, usage="initiate", creds=creds)
            self._next_token = self._client_ctx.step(None)
        except GSSError as exc:
            detail = " ".join(str(exc).split())[:300]
            raise KafkaLoginFailed(
                f"GSSAPI: no service ticket for {self.auth_id!r} as {str(client)!r}: {detail} (check "
                "sasl.kerberos.service.name, that the brokers' principal is <service>/<host>@REALM for the host "
                "names kquota connects to, and krb5.conf)"
            ) from None


_registered = threading.Event()


def _ensure_registered() -> None:
    if not _registered.is_set():
        with _lock:
            if not _registered.is_set():
                # kafka-python looks mechanisms up by name at each authentication: this one replaces its
                # GSSAPI for the whole process, and behaves as it for connections kquota did not make.
                register_sasl_mechanism("GSSAPI", _Mechanism, overwrite=True)
                _registered.set()
