"""The API server's proxy is taken from the environment once, at connect time.

The client's own session would look the proxy variables and ``~/.netrc`` up on
every request; ``env_proxy`` resolves them as aiohttp would, once, and turns
that off. Table rows: environment, API server URL, kubeconfig proxy -> proxy used.
"""

from __future__ import annotations

import pytest
from kubernetes.aio import client

from kquota.k8s.api import env_proxy

PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY")


@pytest.mark.parametrize(
    ("env", "host", "configured", "expected"),
    [
        pytest.param({}, "https://10.0.0.1:6443", None, None, id="no proxy variables: direct"),
        pytest.param(
            {"HTTPS_PROXY": "http://proxy:3128"},
            "https://api.example:6443",
            None,
            "http://proxy:3128",
            id="https_proxy applies to an https API server",
        ),
        pytest.param(
            {"HTTP_PROXY": "http://proxy:3128"}, "https://api.example:6443", None, None, id="http_proxy does not"
        ),
        pytest.param(
            {"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": ".example,localhost"},
            "https://api.example:6443",
            None,
            None,
            id="no_proxy names the API server: direct",
        ),
        pytest.param(
            {"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": "other.example"},
            "https://api.example:6443",
            None,
            "http://proxy:3128",
            id="no_proxy names another host: proxied",
        ),
        pytest.param(
            {"HTTPS_PROXY": "http://proxy:3128"},
            "https://api.example:6443",
            "http://kubeconfig-proxy:8080",
            "http://kubeconfig-proxy:8080",
            id="the kubeconfig's proxy-url wins",
        ),
    ],
)
def test_proxy_resolved_once(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], host: str, configured: str | None, expected: str | None
) -> None:
    for var in PROXY_VARS:
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    cfg = client.Configuration(host=host)
    cfg.proxy = configured
    env_proxy(cfg)
    assert cfg.proxy == expected
    # The session no longer consults the environment on each request.
    assert cfg.client_session_kwargs == {"trust_env": False}
