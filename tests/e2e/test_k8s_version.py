"""The API server is the Kubernetes version the run asked for (``KQUOTA_KUBE_VERSION``).

``make test-k8s-floor`` runs the tests marked ``k8s_floor`` on the supported floor
(1.31); this one makes sure they really ran there and not silently on the default
1.35: the server's own ``/version`` answers, through the real kubectl.
"""

from __future__ import annotations

import json

import pytest
from harness.kube_apiserver import VERSIONS, KubeAPIServer, selected_version

pytestmark = [pytest.mark.e2e, pytest.mark.k8s_floor]


def test_the_api_server_runs_the_selected_kubernetes_version(kube: KubeAPIServer) -> None:
    expected = VERSIONS[selected_version()][0]
    assert kube.version == expected
    # kubectl warns on stderr about its skew from an older server; the JSON is on stdout.
    server = json.loads(kube.kubectl("version", "--output=json").stdout)["serverVersion"]
    major, minor = expected.split(".")[:2]
    assert (server["gitVersion"], server["major"], server["minor"]) == (f"v{expected}", major, minor)
