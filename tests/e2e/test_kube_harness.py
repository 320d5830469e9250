"""The test API server is a real kube-apiserver: CRDs, custom resources and RBAC work."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from harness import procs
from harness.kube_apiserver import KubeAPIServer, selected_version

pytestmark = [pytest.mark.e2e, pytest.mark.k8s_floor]

WIDGET_CRD = textwrap.dedent("""
    apiVersion: apiextensions.k8s.io/v1
    kind: CustomResourceDefinition
    metadata: {name: widgets.smoke.kquota.io}
    spec:
      group: smoke.kquota.io
      scope: Namespaced
      names: {plural: widgets, singular: widget, kind: Widget}
      versions:
      - name: v1
        served: true
        storage: true
        subresources: {status: {}}
        schema:
          openAPIV3Schema:
            type: object
            properties:
              spec:
                type: object
                properties:
                  size: {type: integer, minimum: 1}
                x-kubernetes-validations:
                - rule: "self.size <= 10"
                  message: "size must be at most 10"
              status:
                type: object
                properties:
                  seen: {type: boolean}
""")


def widget(ns: str, name: str, size: int) -> str:
    return json.dumps(
        {
            "apiVersion": "smoke.kquota.io/v1",
            "kind": "Widget",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"size": size},
        }
    )


@pytest.fixture(scope="module")
def widgets(kube: KubeAPIServer) -> KubeAPIServer:
    kube.kubectl("apply", "-f", "-", input=WIDGET_CRD)
    kube.kubectl("wait", "--for=condition=Established", "crd/widgets.smoke.kquota.io", "--timeout=60s")
    return kube


def test_custom_resource_round_trips_through_the_real_server(widgets: KubeAPIServer, namespace: str) -> None:
    widgets.kubectl("apply", "-f", "-", input=widget(namespace, "w1", 3))
    got = json.loads(widgets.kubectl("get", "widget", "w1", "-n", namespace, "-o", "json").stdout)
    assert got["spec"] == {"size": 3}
    assert got["metadata"]["generation"] == 1


def test_schema_and_cel_rules_are_enforced_at_admission(widgets: KubeAPIServer, namespace: str) -> None:
    too_big = widgets.kubectl("apply", "-f", "-", input=widget(namespace, "w2", 11), check=False)
    assert too_big.returncode != 0
    assert "size must be at most 10" in too_big.stderr
    too_small = widgets.kubectl("apply", "-f", "-", input=widget(namespace, "w3", 0), check=False)
    assert too_small.returncode != 0
    assert "should be greater than or equal to 1" in too_small.stderr


def test_status_subresource_ignores_status_in_main_resource(widgets: KubeAPIServer, namespace: str) -> None:
    body = json.loads(widget(namespace, "w4", 2))
    body["status"] = {"seen": True}
    widgets.kubectl("create", "-f", "-", input=json.dumps(body))
    got = json.loads(widgets.kubectl("get", "widget", "w4", "-n", namespace, "-o", "json").stdout)
    assert "status" not in got or got["status"] == {}
    widgets.kubectl(
        "patch",
        "widget",
        "w4",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status": {"seen": true}}',
    )
    got = json.loads(widgets.kubectl("get", "widget", "w4", "-n", namespace, "-o", "json").stdout)
    assert got["status"] == {"seen": True}


def test_identity_without_rbac_rights_is_refused(kube: KubeAPIServer, namespace: str) -> None:
    result = kube.kubectl("get", "configmaps", "-n", namespace, token=kube.token_for("team-a"), check=False)
    assert result.returncode != 0
    assert "forbidden" in result.stderr.lower()
    assert 'User "team-a" cannot list resource "configmaps"' in result.stderr


def test_rbac_grant_lets_a_service_account_in(kube: KubeAPIServer, namespace: str) -> None:
    token = kube.service_account_token(namespace, "reader")
    before = kube.kubectl("get", "configmaps", "-n", namespace, token=token, check=False)
    assert before.returncode != 0
    kube.kubectl("create", "role", "cm-reader", "-n", namespace, "--verb=get,list", "--resource=configmaps")
    kube.kubectl(
        "create",
        "rolebinding",
        "cm-reader",
        "-n",
        namespace,
        "--role=cm-reader",
        f"--serviceaccount={namespace}:reader",
    )
    after = kube.kubectl("get", "configmaps", "-n", namespace, token=token)
    assert after.returncode == 0
    # The grant is namespaced: other namespaces stay closed.
    elsewhere = kube.kubectl("get", "configmaps", "-n", "default", token=token, check=False)
    assert elsewhere.returncode != 0


def test_server_that_cannot_start_fails_fast_with_its_log(tmp_path: Path) -> None:
    with pytest.raises(procs.ComponentError) as err:
        KubeAPIServer.start(tmp_path, extra_args=["--no-such-flag=1"], timeout=60, version=selected_version())
    assert "exited" in str(err.value)
    assert "no-such-flag" in str(err.value)
