"""OAUTHBEARER tokens: the client-credentials request, the refresh schedule, and what failures say.

The token endpoint is harness/oidc.py's provider, a real HTTP server in a
thread of this process (no process started); odd answers come from a bare
``http.server`` of the test's own. The provider's refresh logic runs on a
clock the test moves.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from harness import procs
from harness.oidc import OidcProvider

from kquota.kafka.errors import KafkaLoginFailed
from kquota.kafka.oauth import (
    REFRESH_WINDOW_FACTOR,
    REFRESH_WINDOW_JITTER,
    Token,
    TokenProvider,
    _Mechanism,
    client_credentials,
    jwt_claims,
)
from kquota.kafka.settings import OAuthSettings

pytestmark = pytest.mark.unit

#: A secret with every character form-encoding and HTTP Basic make special.
SECRET = "s3cr:et %+/=&é-" + "x" * 12


@pytest.fixture
def provider() -> Iterator[OidcProvider]:
    p = OidcProvider(lifetime=60).start()
    p.add_client("kquota", SECRET)
    try:
        yield p
    finally:
        p.stop()


def settings(provider: OidcProvider, **changes: Any) -> OAuthSettings:
    return OAuthSettings(
        **{"token_endpoint_url": provider.token_url, "client_id": "kquota", "client_secret": SECRET} | changes
    )


def test_a_token_from_the_client_credentials_grant_with_scope_and_audience(provider: OidcProvider) -> None:
    before = time.time()
    token = client_credentials(settings(provider, scope="kafka-admin", audience="kafka-prod"))
    issued = provider.tokens_of("kquota")
    assert [i.token for i in issued] == [token.value]
    assert issued[0].claims["scope"] == "kafka-admin" and issued[0].claims["aud"] == "kafka-prod"
    # The lifetime is the JWT's own exp, and what the provider says of the token is kept for messages.
    assert token.expires_at == issued[0].claims["exp"]
    assert token.issued_at <= time.time() and token.issued_at >= before - 1
    assert token.claims["sub"] == "kquota" and token.claims["aud"] == "kafka-prod"
    assert token.value not in repr(token)


def test_a_refused_client_is_said_with_the_providers_error_and_never_the_secret(provider: OidcProvider) -> None:
    provider.revoke("kquota")
    with pytest.raises(KafkaLoginFailed) as info:
        client_credentials(settings(provider))
    message = str(info.value)
    assert message.startswith(f"OAUTHBEARER: the token endpoint {provider.token_url} refused client 'kquota': HTTP 401")
    assert "invalid_client: client authentication failed" in message
    assert SECRET not in message


def test_an_unreachable_endpoint_is_said_so(provider: OidcProvider) -> None:
    provider.stop()
    with pytest.raises(KafkaLoginFailed, match=r"cannot reach the token endpoint .*/token: connection refused$"):
        client_credentials(settings(provider))


class _Odd(BaseHTTPRequestHandler):
    """Answers every POST with the test's (status, body, headers)."""

    answer: tuple[int, bytes, dict[str, str]] = (200, b"{}", {})

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_POST(self) -> None:
        status, body, headers = self.answer
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def odd() -> Iterator[Callable[[int, bytes, dict[str, str]], str]]:
    port = procs.free_port()
    server = ThreadingHTTPServer(("127.0.0.1", port), _Odd)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def answering(status: int, body: bytes, headers: dict[str, str]) -> str:
        _Odd.answer = (status, body, headers)
        return f"http://127.0.0.1:{port}/token"

    try:
        yield answering
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("status", "body", "headers", "message"),
    [
        pytest.param(200, b"<html>", {}, "answered with something that is not JSON", id="not JSON"),
        pytest.param(200, b'{"token_type": "Bearer"}', {}, "answered without an access_token", id="no token"),
        pytest.param(
            200,
            b'{"access_token": "opaque"}',
            {},
            "gave a token without a lifetime (no expires_in, and not a JWT with exp)",
            id="opaque token without expires_in",
        ),
        pytest.param(
            302,
            b"",
            {"Location": "http://elsewhere.example/token"},
            "HTTP 302 (a redirect, not followed",
            id="redirect",
        ),
        pytest.param(
            400,
            json.dumps({"error": "invalid_scope", "error_description": f"no scope for {SECRET}"}).encode(),
            {"Content-Type": "application/json"},
            "HTTP 400 invalid_scope: no scope for ********",
            id="a description echoing the secret is scrubbed",
        ),
    ],
)
def test_odd_answers_are_said_precisely(
    odd: Callable[[int, bytes, dict[str, str]], str], status: int, body: bytes, headers: dict[str, str], message: str
) -> None:
    url = odd(status, body, headers)
    with pytest.raises(KafkaLoginFailed) as info:
        client_credentials(OAuthSettings(url, "kquota", SECRET))
    assert message in str(info.value)
    assert SECRET not in str(info.value)


def test_an_opaque_token_lives_for_expires_in(odd: Callable[[int, bytes, dict[str, str]], str]) -> None:
    url = odd(200, b'{"access_token": "opaque-token", "expires_in": 300}', {})
    token = client_credentials(OAuthSettings(url, "kquota", SECRET), clock=lambda: 1000.0)
    assert (token.value, token.expires_at, token.claims) == ("opaque-token", 1300.0, {})


def test_jwt_claims_read_the_payload_and_nothing_else() -> None:
    assert jwt_claims("a.b") == {} and jwt_claims("opaque") == {} and jwt_claims("x.!!!.y") == {}
    provider = OidcProvider()
    token = provider.sign({"sub": "kquota", "exp": 5})
    assert jwt_claims(token) == {"sub": "kquota", "exp": 5}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def token(issued: float, lifetime: float, value: str = "t") -> Token:
    return Token(value, issued + lifetime, issued, {"sub": "kquota"})


def test_the_token_is_refreshed_at_kafkas_refresh_window_and_kept_while_valid_when_a_refresh_fails() -> None:
    clock = Clock()
    answers: list[Token | KafkaLoginFailed] = []

    def fetch() -> Token:
        answer = answers.pop(0)
        if isinstance(answer, KafkaLoginFailed):
            raise answer
        return answer

    tokens = TokenProvider(fetch, clock=clock)
    tokens.close()  # no background thread: the test drives every refresh
    with pytest.raises(KafkaLoginFailed, match="no valid token"):
        tokens.token()

    answers.append(token(1000, 100, "first"))
    assert tokens.ensure().value == "first" and tokens.token() == "first"
    refresh_at = tokens._refresh_at
    assert (
        1000 + 100 * REFRESH_WINDOW_FACTOR <= refresh_at <= 1000 + 100 * (REFRESH_WINDOW_FACTOR + REFRESH_WINDOW_JITTER)
    )

    clock.now = refresh_at - 1  # before the window: no fetch
    assert tokens.ensure().value == "first"
    clock.now = refresh_at + 1  # in the window, the provider down: the valid token stays, the failure is kept
    answers.append(KafkaLoginFailed("endpoint down"))
    assert tokens.ensure().value == "first" and str(tokens.failure) == "endpoint down"
    assert tokens.token() == "first"

    clock.now = 1100  # expired: the failure is the answer, for kafka-python and for the pass alike
    answers.append(KafkaLoginFailed("endpoint still down"))
    with pytest.raises(KafkaLoginFailed, match="endpoint still down"):
        tokens.ensure()
    with pytest.raises(KafkaLoginFailed, match="endpoint still down"):
        tokens.token()
    assert not tokens.usable()

    answers.append(token(1100, 100, "second"))
    assert tokens.ensure().value == "second" and tokens.failure is None and tokens.fetched == 2


def test_the_background_thread_refreshes_before_expiry_and_retries_after_a_failure() -> None:
    fetched: list[float] = []
    fail = {"next": False}

    def fetch() -> Token:
        if fail["next"]:
            fail["next"] = False
            raise KafkaLoginFailed("one failure")
        now = time.time()
        fetched.append(now)
        return token(now, 1.0, f"t{len(fetched)}")

    tokens = TokenProvider(fetch)
    try:
        tokens.ensure()
        deadline = time.monotonic() + 20
        while len(fetched) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        fail["next"] = True
        while len(fetched) < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(fetched) >= 5, fetched
        # Each token was replaced before it expired, a failed refresh included (retried within its lifetime).
        assert all(later < earlier + 1.0 for earlier, later in itertools.pairwise(fetched[:3]))
    finally:
        tokens.close()


def test_the_brokers_error_challenge_reaches_the_provider() -> None:
    tokens = TokenProvider(lambda: token(time.time(), 60, "t"), {"logicalCluster": "lkc-1"})
    tokens.close()
    tokens.ensure()
    mechanism = _Mechanism(sasl_oauth_token_provider=tokens)
    # The token and the extensions, as RFC 7628 lays them out.
    assert mechanism.auth_bytes() == b"n,,\x01auth=Bearer t\x01logicalCluster=lkc-1\x01\x01"
    mechanism.receive(b'{"status":"invalid_token"}')
    assert tokens.refusal == '{"status":"invalid_token"}'
    # The next authentication that succeeds clears it.
    _Mechanism(sasl_oauth_token_provider=tokens).receive(b"")
    assert tokens.refusal is None
