"""How to reach the brokers: connection settings, and TLS and Kerberos material as files.

Credentials never leave ``ConnectionSettings``: they are kept out of reprs (and
out of kafka-python's debug log and exception messages, see connection.py and
diagnosis.py). TLS files (CA, client certificate and key) are passed to
kafka-python as paths, because it and Python's ``ssl`` read only files; so are
a Kerberos keytab and krb5.conf, which the Kerberos library reads only from files.

SASL mechanisms beyond a username and password carry their own settings:
``OAuthSettings`` (OAUTHBEARER with a client-credentials grant),
``KerberosSettings`` (GSSAPI) and ``MskIamSettings`` (AWS MSK IAM); they are
plain values, so a changed Secret makes different settings and a new connection.

``tls_file`` (text) and ``private_file`` (bytes) write material from Secrets to
such files: mode 0600, in a directory of this process's own (``mkdtemp``, mode
0700) so nobody can plant or read them, one file per content, the previous one
of the same cluster and kind removed when a Secret changes, and the directory
removed at exit.
"""

from __future__ import annotations

import atexit
import glob
import hashlib
import os
import shutil
import ssl
import tempfile
from dataclasses import dataclass, field


@dataclass(frozen=True)
class OAuthSettings:
    """An OAuth 2 client-credentials grant (Kafka's ``sasl.oauthbearer.*``). ``client_secret`` is never printed."""

    token_endpoint_url: str
    client_id: str
    client_secret: str = field(repr=False)
    scope: str | None = None
    audience: str | None = None
    #: SASL extensions sent with the token, as (name, value) pairs.
    extensions: tuple[tuple[str, str], ...] = ()
    #: A PEM file of the CAs the token endpoint's certificate is checked with (None: the system's).
    ca_file: str | None = None


@dataclass(frozen=True)
class KerberosSettings:
    """A Kerberos client (GSSAPI): principal, keytab file, krb5.conf file and the brokers' service name.

    Without a keytab, the ticket ``kinit`` left in the default credential cache
    (``KRB5CCNAME``) is used, as Java's ``useTicketCache=true`` (the CLI only).
    """

    principal: str | None
    keytab_file: str | None
    #: A krb5.conf file of this cluster's (None: the process's, /etc/krb5.conf or $KRB5_CONFIG).
    krb5_conf_file: str | None = None
    service_name: str = "kafka"


@dataclass(frozen=True)
class MskIamSettings:
    """Amazon MSK IAM: the region a token is signed for, and whose credentials sign it."""

    region: str
    role_arn: str | None = None
    role_session_name: str | None = None
    profile: str | None = None


@dataclass(frozen=True)
class ConnectionSettings:
    """How to reach the brokers. ``sasl_password`` never appears in the repr."""

    bootstrap_servers: str
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    request_timeout_ms: int = 30_000
    #: How long to keep trying to reach a first broker. A wrong password is only
    #: reported once this runs out: kafka-python keeps retrying the bootstrap.
    connect_timeout_ms: int = 10_000
    client_id: str = "kquota"
    #: OAUTHBEARER's token endpoint and client (sasl_mechanism OAUTHBEARER).
    oauth: OAuthSettings | None = None
    #: GSSAPI's principal and keytab (sasl_mechanism GSSAPI).
    kerberos: KerberosSettings | None = None
    #: MSK IAM's signer (sasl_mechanism AWS_MSK_IAM, sent as OAUTHBEARER).
    msk_iam: MskIamSettings | None = None

    @property
    def wire_mechanism(self) -> str | None:
        """The SASL mechanism the brokers are asked for (MSK IAM tokens go as OAUTHBEARER)."""
        return "OAUTHBEARER" if self.sasl_mechanism == "AWS_MSK_IAM" else self.sasl_mechanism


#: The process's private directory for TLS files (created on first use).
_TLS_DIR: dict[str, str] = {}


def _tls_dir() -> str:
    # Not a fixed name under /tmp: anyone could create it first and plant a CA
    # file there (the old name was derived from a public CA's content), or
    # read keys in it. mkdtemp makes a fresh directory only this user can enter.
    path = _TLS_DIR.get("path")
    if path is None or not os.path.isdir(path):
        path = tempfile.mkdtemp(prefix="kquota-tls-")
        _TLS_DIR["path"] = path
        atexit.register(shutil.rmtree, path, True)
    return path


def tls_file(pem: str, cluster: str, kind: str) -> str:
    """A private file holding ``pem``; the same path for the same content, so the connection is reused."""
    return private_file(pem.encode(), cluster, kind, ".pem")


def private_file(content: bytes, cluster: str, kind: str, suffix: str) -> str:
    """A private file holding ``content`` (a keytab, a krb5.conf, PEM); the same path for the same content."""
    directory = _tls_dir()
    digest = hashlib.sha256(content).hexdigest()[:16]
    # Fixed length: with raw names, cluster "a"'s "a-ca-*" would match cluster "a-ca"'s files.
    slug = hashlib.sha256(cluster.encode()).hexdigest()[:12]
    path = os.path.join(directory, f"{slug}-{kind}-{digest}{suffix}")
    if not os.path.exists(path):
        fd, tmp = tempfile.mkstemp(prefix=f".{kind}-", suffix=".tmp", dir=directory)  # mode 0600
        with os.fdopen(fd, "wb") as fh:
            fh.write(content)
        os.replace(tmp, path)
        # A rotated Secret's old key must not linger. The connection that used it
        # is replaced on this same pass, since its settings now differ.
        for old in glob.glob(os.path.join(directory, f"{slug}-{kind}-*{suffix}")):
            if old != path:
                os.unlink(old)
    return path


def private_dir() -> str:
    """The process's private directory (mode 0700, removed at exit), for files a library writes (a ccache)."""
    return _tls_dir()


def ssl_context(settings: ConnectionSettings) -> ssl.SSLContext:
    """The TLS context of a connection: kafka-python's own defaults, with Java's truststore semantics.

    As kafka-python builds it (TLS 1.2 or later, host names checked, the CA
    file or else the system's CAs, the client certificate), plus one thing:
    every certificate in the CA file is a trust anchor
    (``VERIFY_X509_PARTIAL_CHAIN``), as every entry of a Java truststore is for
    Kafka's own clients. A truststore that holds a broker's own certificate, not
    its CA (a Strimzi listener with a custom certificate lists just that
    certificate), then works here as it does for a Java client.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = True
    if settings.ssl_cafile:
        ctx.load_verify_locations(settings.ssl_cafile)
        ctx.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    else:
        ctx.load_default_certs()
    if settings.ssl_certfile:
        ctx.load_cert_chain(certfile=settings.ssl_certfile, keyfile=settings.ssl_keyfile)
    return ctx
