"""A real MIT Kerberos KDC (Debian's krb5-kdc) with a throwaway realm, for the GSSAPI tests.

``Kdc.start(workdir)`` writes a kdc.conf and a krb5.conf of its own (nothing
in /etc is read or changed: ``KRB5_CONFIG`` and ``KRB5_KDC_PROFILE`` point at
them), creates the realm's database with ``kdb5_util create -s`` and runs
``krb5kdc -n`` (foreground) on a free loopback port, TCP and UDP. That takes
well under a second. Principals and keytabs are made with ``kadmin.local``,
which works on the database directly (no kadmind).

The krb5.conf is what the brokers (``-Djava.security.krb5.conf``), the
operator (a ConfigMap) and the CLI (``KRB5_CONFIG``) all use: TCP only
(``udp_preference_limit = 1``), no DNS, no reverse lookups, host names as
given (``dns_canonicalize_hostname = false``), and ``clockskew`` of a few
seconds instead of 300, so a ticket past its end is refused by the KDC and
by the brokers soon after, as a test of expiry needs.

``add_principal(name, maxlife=...)`` creates a principal with a random key and
exports it to a keytab; ``rotate(name)`` gives it a new key, so keytabs
exported before no longer work; ``as_requests(name)`` counts the initial
tickets the KDC issued it (its log). ``kafka_listener()`` is a broker
listener (SASL_PLAINTEXT, GSSAPI) with the brokers' own service principal
``kafka/127.0.0.1`` and keytab.

Debian packages: krb5-kdc, krb5-admin-server (the Makefile's system-packages).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness import procs
from harness.kafka_cluster import Listener

REALM = "KQUOTA.TEST"
#: Seconds of clock difference the KDC and the brokers accept (MIT's and Java's default is 300).
CLOCK_SKEW = 5
KRB5_LOGIN_MODULE = "com.sun.security.auth.module.Krb5LoginModule"


def _tool(name: str) -> str:
    for directory in ("", "/usr/sbin/", "/usr/bin/"):
        path = shutil.which(name) if not directory else directory + name
        if path and os.access(path, os.X_OK):
            return path
    raise procs.ComponentError(
        f"{name} not found: the Kerberos tests need Debian's krb5-kdc and krb5-admin-server (make system-packages)"
    )


@dataclass
class Kdc:
    workdir: Path
    port: int
    realm: str = REALM
    proc: procs.Process | None = field(default=None, repr=False)

    @property
    def krb5_conf(self) -> Path:
        return self.workdir / "krb5.conf"

    @property
    def log(self) -> Path:
        return self.workdir / "kdc.log"

    def env(self) -> dict[str, str]:
        return dict(os.environ, KRB5_CONFIG=str(self.krb5_conf), KRB5_KDC_PROFILE=str(self.workdir / "kdc.conf"))

    @classmethod
    def start(cls, workdir: Path, realm: str = REALM, timeout: float = 30) -> Kdc:
        workdir.mkdir(parents=True, exist_ok=True)
        kdc = cls(workdir, procs.free_port(), realm)
        (workdir / "kdc.conf").write_text(
            "[kdcdefaults]\n"
            f" kdc_ports = {kdc.port}\n"
            f" kdc_tcp_ports = {kdc.port}\n"
            "[realms]\n"
            f" {realm} = {{\n"
            f"  database_name = {workdir}/principal\n"
            f"  key_stash_file = {workdir}/stash\n"
            f"  acl_file = {workdir}/kadm5.acl\n"
            "  max_life = 1h\n"
            "  max_renewable_life = 0\n"
            "  supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal\n"
            " }\n"
            "[logging]\n"
            f" kdc = FILE:{kdc.log}\n"
        )
        (workdir / "kadm5.acl").write_text("")
        kdc.krb5_conf.write_text(
            "[libdefaults]\n"
            f" default_realm = {realm}\n"
            " dns_lookup_realm = false\n"
            " dns_lookup_kdc = false\n"
            " dns_canonicalize_hostname = false\n"
            " rdns = false\n"
            " udp_preference_limit = 1\n"
            f" clockskew = {CLOCK_SKEW}\n"
            " forwardable = false\n"
            "[realms]\n"
            f" {realm} = {{\n  kdc = 127.0.0.1:{kdc.port}\n }}\n"
            "[domain_realm]\n"
            f" 127.0.0.1 = {realm}\n"
            f" localhost = {realm}\n"
        )
        kdc._run(_tool("kdb5_util"), "create", "-s", "-r", realm, "-P", os.urandom(12).hex())
        kdc.proc = procs.Process(
            "krb5kdc", [_tool("krb5kdc"), "-n", "-r", realm], workdir / "krb5kdc.out", env=kdc.env()
        )
        kdc.proc.start()
        try:
            kdc.proc.wait_until(lambda: _tcp_open(kdc.port), timeout, "the KDC listening")
        except BaseException:
            kdc.stop()
            raise
        return kdc

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.signal(signal.SIGTERM)
            self.proc.stop(timeout=5)

    def _run(self, *argv: str, stdin: str | None = None) -> str:
        result = subprocess.run(
            argv, input=stdin, capture_output=True, text=True, env=self.env(), timeout=60, check=False
        )
        if result.returncode != 0 or "error" in result.stderr.lower():
            raise procs.ComponentError(f"{' '.join(argv[:2])} failed (exit {result.returncode}):\n{result.stderr}")
        return result.stdout

    def kadmin(self, *queries: str) -> str:
        """Run ``kadmin.local`` queries, one per line on its standard input."""
        return self._run(_tool("kadmin.local"), "-r", self.realm, stdin="".join(q + "\n" for q in queries))

    def principal(self, name: str) -> str:
        return name if "@" in name else f"{name}@{self.realm}"

    def add_principal(self, name: str, keytab: Path, maxlife: str | None = None) -> Path:
        """A principal with a random key, exported to ``keytab``; ``maxlife`` e.g. ``"12 seconds"``."""
        life = f'-maxlife "{maxlife}" ' if maxlife else ""
        keytab.unlink(missing_ok=True)
        self.kadmin(f"addprinc -randkey {life}{self.principal(name)}", f"ktadd -k {keytab} {self.principal(name)}")
        return keytab

    def export(self, name: str, keytab: Path) -> Path:
        """The principal's current key in a (new) keytab, the key unchanged."""
        keytab.unlink(missing_ok=True)
        self.kadmin(f"ktadd -norandkey -k {keytab} {self.principal(name)}")
        return keytab

    def rotate(self, name: str) -> None:
        """A new random key for the principal: keytabs exported before hold a key the KDC no longer has."""
        self.kadmin(f"cpw -randkey {self.principal(name)}")

    def as_requests(self, name: str) -> int:
        """Initial tickets (AS exchanges) the KDC issued to the principal, from its log."""
        if not self.log.exists():
            return 0
        who = f"{self.principal(name)} for krbtgt/"
        return sum(
            1 for line in self.log.read_text().splitlines() if "AS_REQ" in line and "ISSUE" in line and who in line
        )

    # -- Kafka ---------------------------------------------------------------------------

    def kafka_listener(self, name: str = "KERBEROS", host: str = "127.0.0.1", reauth_ms: int = 0) -> Listener:
        """A SASL_PLAINTEXT listener with GSSAPI, the brokers' service principal ``kafka/<host>`` and its keytab.

        ``reauth_ms`` sets the listener's connections.max.reauth.ms: clients must
        re-authenticate (with a valid ticket) that often or be disconnected.
        """
        service = f"kafka/{host}@{self.realm}"
        keytab = self.add_principal(service, self.workdir / "kafka.keytab")
        prefix = f"listener.name.{name.lower()}.gssapi."
        props = {
            f"listener.name.{name.lower()}.sasl.enabled.mechanisms": "GSSAPI",
            f"{prefix}sasl.jaas.config": f'{KRB5_LOGIN_MODULE} required useKeyTab=true storeKey=true keyTab="{keytab}" '
            f'principal="{service}" serviceName="kafka";',
        }
        if reauth_ms:
            props[f"{prefix}connections.max.reauth.ms"] = str(reauth_ms)
        return Listener(name, "SASL_PLAINTEXT", props)

    def jvm_options(self) -> list[str]:
        return [f"-Djava.security.krb5.conf={self.krb5_conf}"]


def _tcp_open(port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_for_as_requests(kdc: Kdc, name: str, count: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while True:
        seen = kdc.as_requests(name)
        if seen >= count or time.monotonic() > deadline:
            return seen
        time.sleep(0.2)
