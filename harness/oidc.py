"""A small OpenID Connect provider for tests: the client-credentials grant, RS256 JWTs and their JWKS.

Kafka's own server side validates what it issues: a broker listener with
``OAuthBearerValidatorCallbackHandler`` fetches the keys from ``jwks_url`` and
checks each token's signature, ``exp``, ``iss`` and ``aud`` (see
``OidcProvider.kafka_listener``). It serves, from a thread of the test process,
on a free loopback port:

* ``POST /token``: ``grant_type=client_credentials``, the client authenticated
  with HTTP Basic (RFC 6749 2.3.1: id and secret form-encoded) or with
  ``client_id``/``client_secret`` in the form; optional ``scope`` and
  ``audience`` (the token's ``aud``; the client's default audience otherwise).
  Answers ``{"access_token", "token_type": "Bearer", "expires_in"}``, or
  ``401 {"error": "invalid_client"}`` for an unknown, wrong or revoked client
  and ``400 {"error": "unsupported_grant_type"}``.
* ``GET /jwks``: the signing key as a JWK set; ``GET /.well-known/openid-configuration``.

Tokens are JWTs signed with an RSA key made at start (``cryptography``), with
``kid``, ``iss`` (``issuer``), ``sub`` (the client id), ``aud``, ``scope``,
``iat``, ``exp`` = ``iat`` + ``lifetime`` seconds, and a unique ``jti``. Every
token issued is kept (``issued``) so tests can search outputs for them.

``stop()`` and ``start()`` take the issuer down and bring it back on the same
port (the JWKS and keys stay the same); ``revoke(client)``/``restore(client)``
make the token endpoint refuse or accept a client. Starting takes milliseconds.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from harness import procs
from harness.kafka_cluster import Listener

#: Kafka 4.x refuses OAuth URLs not listed in this JVM system property (KIP-1139).
ALLOWED_URLS_PROPERTY = "org.apache.kafka.sasl.oauthbearer.allowed.urls"
VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _uint(value: int) -> str:
    return _b64(value.to_bytes((value.bit_length() + 7) // 8, "big"))


@dataclass
class Client:
    client_id: str
    secret: str = field(repr=False)
    audience: str
    revoked: bool = False


@dataclass(frozen=True)
class Issued:
    client_id: str
    token: str = field(repr=False)
    claims: dict[str, Any]


class OidcProvider:
    """The provider (see the module docstring); ``start()`` first."""

    def __init__(self, lifetime: float = 60.0, default_audience: str = "kafka") -> None:
        self.lifetime = lifetime
        self.default_audience = default_audience
        self.port = procs.free_port()
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = uuid.uuid4().hex[:12]
        self._clients: dict[str, Client] = {}
        self._lock = threading.Lock()
        self.issued: list[Issued] = []
        #: Token requests answered, by outcome: "issued", "refused".
        self.answers: dict[str, int] = {"issued": 0, "refused": 0}
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- addresses ---------------------------------------------------------------------

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def token_url(self) -> str:
        return f"{self.issuer}/token"

    @property
    def jwks_url(self) -> str:
        return f"{self.issuer}/jwks"

    # -- clients -----------------------------------------------------------------------

    def add_client(self, client_id: str, secret: str, audience: str | None = None) -> None:
        with self._lock:
            self._clients[client_id] = Client(client_id, secret, audience or self.default_audience)

    def revoke(self, client_id: str) -> None:
        with self._lock:
            self._clients[client_id].revoked = True

    def restore(self, client_id: str) -> None:
        with self._lock:
            self._clients[client_id].revoked = False

    def tokens_of(self, client_id: str) -> list[Issued]:
        with self._lock:
            return [i for i in self.issued if i.client_id == client_id]

    # -- the server ----------------------------------------------------------------------

    def start(self) -> OidcProvider:
        if self._server is not None:
            return self
        server = ThreadingHTTPServer(("127.0.0.1", self.port), _handler(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="oidc-provider", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    @property
    def running(self) -> bool:
        return self._server is not None

    # -- tokens --------------------------------------------------------------------------

    def jwks(self) -> dict[str, Any]:
        numbers = self._key.public_key().public_numbers()
        return {
            "keys": [
                {
                    "kty": "RSA",
                    "use": "sig",
                    "alg": "RS256",
                    "kid": self.kid,
                    "n": _uint(numbers.n),
                    "e": _uint(numbers.e),
                }
            ]
        }

    def sign(self, claims: dict[str, Any]) -> str:
        header = {"alg": "RS256", "typ": "JWT", "kid": self.kid}
        signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        signature = self._key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{_b64(signature)}"

    def issue(self, client: Client, scope: str | None, audience: str | None) -> str:
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "sub": client.client_id,
            "aud": audience or client.audience,
            "iat": now,
            "exp": now + int(self.lifetime),
            "jti": uuid.uuid4().hex,
        }
        if scope:
            claims["scope"] = scope
        token = self.sign(claims)
        with self._lock:
            self.issued.append(Issued(client.client_id, token, claims))
        return token

    def token_answer(self, form: dict[str, str], basic: tuple[str, str] | None) -> tuple[int, dict[str, Any]]:
        """The token endpoint's answer: (HTTP status, JSON body)."""
        if form.get("grant_type") != "client_credentials":
            return 400, {"error": "unsupported_grant_type"}
        client_id, secret = basic or (form.get("client_id", ""), form.get("client_secret", ""))
        with self._lock:
            client = self._clients.get(client_id)
            ok = client is not None and client.secret == secret and not client.revoked
        if not ok or client is None:
            self.answers["refused"] += 1
            return 401, {"error": "invalid_client", "error_description": "client authentication failed"}
        token = self.issue(client, form.get("scope"), form.get("audience"))
        self.answers["issued"] += 1
        return 200, {"access_token": token, "token_type": "Bearer", "expires_in": int(self.lifetime)}

    # -- Kafka -------------------------------------------------------------------------------

    def kafka_listener(self, name: str = "OAUTH", audience: str = "kafka", reauth_ms: int = 0) -> Listener:
        """A SASL_PLAINTEXT listener whose OAUTHBEARER tokens Kafka's own validator checks against this provider.

        ``reauth_ms`` sets the listener's connections.max.reauth.ms: a client must
        re-authenticate (with a valid token) before then, and before its token
        expires, or the broker closes the connection.
        """
        prefix = f"listener.name.{name.lower()}.oauthbearer."
        props = {
            f"listener.name.{name.lower()}.sasl.enabled.mechanisms": "OAUTHBEARER",
            f"{prefix}sasl.jaas.config": f"{LOGIN_MODULE} required;",
            f"{prefix}sasl.server.callback.handler.class": VALIDATOR,
            "sasl.oauthbearer.jwks.endpoint.url": self.jwks_url,
            "sasl.oauthbearer.expected.audience": audience,
            "sasl.oauthbearer.expected.issuer": self.issuer,
            # No grace for expired tokens: one machine has no clock skew to allow for.
            "sasl.oauthbearer.clock.skew.seconds": "0",
        }
        if reauth_ms:
            props[f"{prefix}connections.max.reauth.ms"] = str(reauth_ms)
        return Listener(name, "SASL_PLAINTEXT", props)

    def jvm_options(self, extra_urls: Sequence[str] = ()) -> list[str]:
        """The brokers' JVM flag that lets Kafka 4.x fetch this provider's URLs."""
        return [f"-D{ALLOWED_URLS_PROPERTY}={','.join([self.jwks_url, self.token_url, *extra_urls])}"]


def _handler(provider: OidcProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            pass  # no request lines on the test's stderr

        def _answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/jwks":
                self._answer(200, provider.jwks())
            elif self.path == "/.well-known/openid-configuration":
                self._answer(
                    200,
                    {
                        "issuer": provider.issuer,
                        "token_endpoint": provider.token_url,
                        "jwks_uri": provider.jwks_url,
                        "grant_types_supported": ["client_credentials"],
                    },
                )
            else:
                self._answer(404, {"error": "not_found"})

        def do_POST(self) -> None:
            if self.path != "/token":
                self._answer(404, {"error": "not_found"})
                return
            length = int(self.headers.get("Content-Length") or 0)
            form = {k: v[-1] for k, v in urllib.parse.parse_qs(self.rfile.read(length).decode()).items()}
            basic = None
            auth = self.headers.get("Authorization") or ""
            if auth.startswith("Basic "):
                user, _, password = base64.b64decode(auth[6:]).decode().partition(":")
                basic = (urllib.parse.unquote_plus(user), urllib.parse.unquote_plus(password))
            status, body = provider.token_answer(form, basic)
            self._answer(status, body)

    return Handler


@contextmanager
def running(lifetime: float = 60.0) -> Iterator[OidcProvider]:
    provider = OidcProvider(lifetime).start()
    try:
        yield provider
    finally:
        provider.stop()
