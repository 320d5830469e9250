"""SASL/OAUTHBEARER tokens: fetched from an OAuth 2 token endpoint and refreshed in the background.

kafka-python sends whatever ``sasl_oauth_token_provider.token()`` returns, and
calls it from its own I/O thread whenever it authenticates: on connect and on
each KIP-368 re-authentication, which the brokers ask for before the token
expires (``connections.max.reauth.ms``). ``TokenProvider`` therefore does no I/O
in ``token()``: it hands out the token it holds, and a thread of its own fetches
the next one once 80% of the current one's lifetime has passed, plus a random
0-5% (Kafka's ``sasl.login.refresh.window.factor`` and ``.window.jitter``).
A refresh that fails is retried with backoff (0.1 s doubling to 10 s, Kafka's
``sasl.login.retry.backoff.ms`` and ``.max.ms``) while the token it would replace
is still valid; the failure is kept (``failure``), and once no valid token is
left, ``token()`` and ``ensure()`` raise it: ``KafkaLoginFailed`` naming the
endpoint and the cause (unreachable, TLS, the provider's HTTP status and OAuth
error), which becomes the pass's status condition.

``client_credentials`` is the fetch for a client-credentials grant (RFC 6749
4.4) as Kafka's own ``HttpAccessTokenRetriever`` makes it: a form POST with
HTTP Basic client authentication (id and secret form-encoded first), ``scope``
when set, plus ``audience`` (Strimzi's oauth.audience, Auth0, Okta). The
token's lifetime is its JWT ``exp`` claim, else the answer's ``expires_in``.
Redirects are not followed: the Basic credentials must reach no other host.

A broker that refuses a token answers with an RFC 7628 error challenge
(``{"status":"invalid_token"}``) and then closes the connection, which
kafka-python reports only as a lost connection. kquota registers its own
OAUTHBEARER mechanism (kafka-python's, plus this): the challenge is handed to
the connection's ``TokenProvider`` (``refusal``), so the pass can say that the
brokers refused the token, and which token (its public claims), rather than
that they could not be reached.

Nothing here logs or raises a token or the client secret; messages quote the
provider's OAuth error code and at most 200 characters of its description, with
the client secret scrubbed.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import random
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kafka.net.sasl import register_sasl_mechanism
from kafka.net.sasl.oauth import AbstractTokenProvider, SaslMechanismOAuth

from kquota.kafka.errors import KafkaLoginFailed
from kquota.kafka.settings import OAuthSettings

log = logging.getLogger(__name__)

#: Kafka's sasl.login.refresh.window.factor and .window.jitter defaults.
REFRESH_WINDOW_FACTOR: Final = 0.8
REFRESH_WINDOW_JITTER: Final = 0.05
#: Kafka's sasl.login.retry.backoff.ms and .max.ms defaults, in seconds.
RETRY_BACKOFF: Final = 0.1
RETRY_BACKOFF_MAX: Final = 10.0
#: Connect and read timeout of a token request (Kafka has none by default; a hung provider must not hang a pass).
HTTP_TIMEOUT: Final = 10.0
#: The most of a provider's answer a message quotes.
_QUOTED: Final = 200


@dataclass(frozen=True)
class Token:
    """A bearer token and when it expires (epoch seconds). The value is never printed."""

    value: str = field(repr=False)
    expires_at: float
    issued_at: float
    #: What the token says of itself (a JWT's iss, aud, sub, scope), for messages; empty when opaque.
    claims: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def lifetime(self) -> float:
        return max(0.0, self.expires_at - self.issued_at)

    def valid(self, now: float) -> bool:
        return now < self.expires_at

    def described(self, now: float) -> str:
        """The token's public claims, for a message: ``iss 'x', aud 'y', sub 'z', expires in 12 s``."""
        parts = [f"{claim} {self.claims[claim]!r}" for claim in ("iss", "aud", "sub", "scope") if claim in self.claims]
        left = self.expires_at - now
        parts.append(f"expires in {left:.0f} s" if left >= 0 else f"expired {-left:.0f} s ago")
        return ", ".join(parts)


Fetch = Callable[[], Token]


def jwt_claims(token: str) -> dict[str, Any]:
    """The claims of a JWT's payload (not verified: the brokers verify it), or {} when it is not one."""
    parts = token.split(".")
    if len(parts) != 3:
        return {}
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload))
    except (ValueError, binascii.Error):
        return {}
    return claims if isinstance(claims, dict) else {}


def _public_claims(claims: Mapping[str, Any]) -> dict[str, Any]:
    # Only what helps to tell why a broker refused a token; nothing else of it is kept.
    return {k: claims[k] for k in ("iss", "aud", "sub", "scope", "exp", "iat") if k in claims}


def _quote(text: str, secret: str) -> str:
    text = " ".join(text.split())
    if secret:
        text = text.replace(secret, "********")
    return text[:_QUOTED] + ("..." if len(text) > _QUOTED else "")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _tls_context(ca_file: str | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=ca_file)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


def client_credentials(
    settings: OAuthSettings, timeout: float = HTTP_TIMEOUT, clock: Callable[[], float] = time.time
) -> Token:
    """One token from the token endpoint; raises KafkaLoginFailed naming the endpoint and the cause."""
    s = settings
    where = f"the token endpoint {s.token_endpoint_url}"
    form = {"grant_type": "client_credentials"}
    if s.scope:
        form["scope"] = s.scope
    if s.audience:
        form["audience"] = s.audience
    basic = f"{urllib.parse.quote(s.client_id, safe='')}:{urllib.parse.quote(s.client_secret, safe='')}"
    request = urllib.request.Request(  # noqa: S310 - the scheme is http(s), checked by the CRD and the CLI
        s.token_endpoint_url,
        data=urllib.parse.urlencode(form).encode(),
        method="POST",
        headers={
            "Authorization": "Basic " + base64.b64encode(basic.encode()).decode(),
            "Content-Type": "application/x-www-form-urlencoded",
            "Accept": "application/json",
        },
    )
    handlers: list[urllib.request.BaseHandler] = [_NoRedirect()]
    if s.token_endpoint_url.lower().startswith("https:"):
        try:
            handlers.append(urllib.request.HTTPSHandler(context=_tls_context(s.ca_file)))
        except (OSError, ssl.SSLError) as exc:
            raise KafkaLoginFailed(f"OAUTHBEARER: the CA for {where} cannot be loaded: {exc}") from None
    opener = urllib.request.build_opener(*handlers)
    asked = clock()
    try:
        with opener.open(request, timeout=timeout) as response:
            body = response.read(1 << 20)
    except urllib.error.HTTPError as exc:
        raise KafkaLoginFailed(_refusal(s, where, exc)) from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, ssl.SSLError):
            raise KafkaLoginFailed(
                f"OAUTHBEARER: TLS with {where} failed: {reason}; check oauth.caSecretRef "
                "(the CA that signed the endpoint's certificate)"
            ) from None
        raise KafkaLoginFailed(f"OAUTHBEARER: cannot reach {where}: {_why(reason)}") from None
    except (OSError, ValueError) as exc:  # a timeout while reading, a malformed URL
        raise KafkaLoginFailed(f"OAUTHBEARER: cannot reach {where}: {_why(exc)}") from None
    try:
        answer = json.loads(body)
    except ValueError:
        raise KafkaLoginFailed(f"OAUTHBEARER: {where} answered with something that is not JSON") from None
    value = answer.get("access_token") if isinstance(answer, dict) else None
    if not isinstance(value, str) or not value:
        raise KafkaLoginFailed(f"OAUTHBEARER: {where} answered without an access_token")
    claims = jwt_claims(value)
    expires_at: float | None = None
    if isinstance(claims.get("exp"), (int, float)):
        expires_at = float(claims["exp"])
    elif isinstance(answer.get("expires_in"), (int, float)):
        expires_at = asked + float(answer["expires_in"])
    if expires_at is None:
        raise KafkaLoginFailed(
            f"OAUTHBEARER: {where} gave a token without a lifetime (no expires_in, and not a JWT with exp): "
            "kquota cannot tell when to refresh it"
        )
    issued = float(claims["iat"]) if isinstance(claims.get("iat"), (int, float)) else asked
    return Token(value, expires_at, min(issued, asked), _public_claims(claims))


def _why(reason: object) -> str:
    if isinstance(reason, TimeoutError):
        return f"no answer within {HTTP_TIMEOUT:.0f} s (timeout)"
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    if isinstance(reason, OSError) and reason.strerror:
        return str(reason.strerror)
    return f"{type(reason).__name__}: {reason}"


def _refusal(s: OAuthSettings, where: str, exc: urllib.error.HTTPError) -> str:
    """The provider's refusal: its HTTP status, OAuth error and description (RFC 6749 5.2)."""
    detail = ""
    try:
        raw = exc.read(4096)
        answer = json.loads(raw)
        if isinstance(answer, dict) and answer.get("error"):
            detail = str(answer["error"])
            if answer.get("error_description"):
                detail += f": {answer['error_description']}"
    except (ValueError, OSError):
        pass
    detail = _quote(detail, s.client_secret)
    what = f"HTTP {exc.code}" + (f" {detail}" if detail else "")
    hint = ""
    if exc.code in (400, 401, 403):
        hint = " (check the client id and secret, and that the client may use the client-credentials grant"
        hint += " with this scope)" if s.scope else ")"
    if 300 <= exc.code < 400:
        hint = " (a redirect, not followed: give the endpoint's final URL)"
    return f"OAUTHBEARER: {where} refused client {s.client_id!r}: {what}{hint}"


class TokenProvider(AbstractTokenProvider):  # type: ignore[misc]  # kafka-python is untyped
    """The token kafka-python sends, kept fresh by a background thread (see the module docstring)."""

    def __init__(
        self,
        fetch: Fetch,
        extensions: Mapping[str, str] | None = None,
        name: str = "oauth",
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__()
        self._fetch = fetch
        self._extensions = dict(extensions or {})
        self._name = name
        self._clock = clock
        self._lock = threading.Lock()
        self._token: Token | None = None
        self._refresh_at = 0.0
        self._failure: KafkaLoginFailed | None = None
        self._refusal: str | None = None
        self._stopped = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        #: Tokens fetched so far (the first included).
        self.fetched = 0

    def __repr__(self) -> str:
        return f"TokenProvider({self._name})"

    # -- what kafka-python calls (its I/O thread: no I/O here) ------------------

    def token(self) -> str:
        with self._lock:
            token, failure = self._token, self._failure
        if token is None or not token.valid(self._clock()):
            raise failure or KafkaLoginFailed(f"{self._name}: no valid token")
        return token.value

    def extensions(self) -> dict[str, str]:
        return dict(self._extensions)

    # -- what the connection calls -------------------------------------------------

    @property
    def current(self) -> Token | None:
        """The token held now (valid or not)."""
        with self._lock:
            return self._token

    @property
    def failure(self) -> KafkaLoginFailed | None:
        """The last fetch's failure, None once a fetch has succeeded since."""
        with self._lock:
            return self._failure

    @property
    def refusal(self) -> str | None:
        """The brokers' error challenge to the last authentication, None once one has succeeded since."""
        with self._lock:
            return self._refusal

    def authenticated(self, challenge: str | None) -> None:
        """What the brokers answered to a token: nothing (accepted) or an RFC 7628 error challenge."""
        with self._lock:
            self._refusal = None if challenge is None else _quote(challenge, "")

    def usable(self) -> bool:
        """Whether a valid token is held."""
        token = self.current
        return token is not None and token.valid(self._clock())

    def ensure(self) -> Token:
        """A valid token: the one held unless it is due for refresh, else a new one fetched now.

        Raises KafkaLoginFailed when none is held and none can be fetched. A token
        due for refresh but still valid is kept when the fetch fails (the background
        retries); the failure stays in ``failure``.
        """
        now = self._clock()
        with self._lock:
            token = self._token
        if token is not None and token.valid(now) and now < self._refresh_at:
            return token
        try:
            return self._refresh()
        except KafkaLoginFailed:
            token = self.current
            if token is not None and token.valid(self._clock()):
                return token
            raise

    def close(self) -> None:
        self._stopped.set()
        self._wake.set()

    # -- fetching ---------------------------------------------------------------------

    def _refresh(self) -> Token:
        try:
            token = self._fetch()
        except KafkaLoginFailed as exc:
            with self._lock:
                self._failure = exc
            raise
        window = REFRESH_WINDOW_FACTOR + random.uniform(0, REFRESH_WINDOW_JITTER)  # jitter, not a secret
        with self._lock:
            self._token = token
            self._failure = None
            self._refresh_at = token.issued_at + token.lifetime * window
            self.fetched += 1
        self._start()
        self._wake.set()
        return token

    def _start(self) -> None:
        if self._thread is None and not self._stopped.is_set():
            self._thread = threading.Thread(target=self._run, name=f"kquota-token-{self._name}", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        backoff = RETRY_BACKOFF
        while not self._stopped.is_set():
            with self._lock:
                delay = self._refresh_at - self._clock()
            if delay > 0:
                self._wake.clear()
                self._wake.wait(delay)
                continue
            try:
                self._refresh()
                backoff = RETRY_BACKOFF
            except KafkaLoginFailed as exc:
                usable = self.usable()
                log.warning(
                    "%s: refreshing the token failed (%s); %s, retrying in %.1f s",
                    self._name,
                    exc,
                    "the current one is still valid" if usable else "no valid token is left",
                    backoff,
                )
                self._stopped.wait(backoff)
                backoff = min(backoff * 2, RETRY_BACKOFF_MAX)
            except Exception:  # a fetch must never end the refresh thread
                log.exception("%s: refreshing the token failed unexpectedly", self._name)
                self._stopped.wait(backoff)
                backoff = min(backoff * 2, RETRY_BACKOFF_MAX)


class _Mechanism(SaslMechanismOAuth):  # type: ignore[misc]  # kafka-python is untyped
    """kafka-python's OAUTHBEARER, telling a TokenProvider what the brokers answered to its token."""

    def receive(self, auth_bytes: bytes) -> None:
        if isinstance(self.token_provider, TokenProvider):
            self.token_provider.authenticated(auth_bytes.decode("utf-8", "replace") if auth_bytes else None)
        super().receive(auth_bytes)


# kafka-python looks mechanisms up by name at each authentication; this one behaves as its own
# for token providers that are not kquota's.
register_sasl_mechanism("OAUTHBEARER", _Mechanism, overwrite=True)


def provider_for(settings: OAuthSettings, name: str) -> TokenProvider:
    """The token provider of an OAUTHBEARER client-credentials connection."""
    return TokenProvider(
        lambda: client_credentials(settings),
        dict(settings.extensions),
        name=f"{name}: OAuth client {settings.client_id!r}",
    )
