"""The operator image (the Dockerfile's, which the chart runs) authenticates with GSSAPI and AWS MSK IAM.

No node is started: buildah runs tests/node/image_check.py in a container of
the image (runc, the image's UID 65532, the host's network), the way
harness/images.py builds it for the node suite. Inside, kquota's own Kerberos
client gets tickets from a real MIT KDC (harness/kdc.py) with a keytab and
establishes a context with a service's keytab, and kquota's MSK IAM signer
signs a token with made-up credentials, which is checked here as a SigV4
signature. Marked ``node`` because it needs what the node suite needs (root,
buildah, runc) and the same image.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import images
from harness.kdc import Kdc

from tests.unit.test_msk_iam import ACCESS_KEY, SECRET_KEY, verify_sigv4

pytestmark = pytest.mark.node

INSIDE = "/check"
#: Where the Dockerfile puts the MIT Kerberos libraries gssapi links (RPATH of its modules).
KRB5_DIR = "/opt/kquota/lib/krb5/"


@pytest.fixture(scope="module")
def kdc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kdc]:
    server = Kdc.start(tmp_path_factory.mktemp("kdc"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def in_image(kdc: Kdc, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What image_check.py reports from inside the operator image."""
    image = images.ensure_operator_image()
    check = tmp_path_factory.mktemp("image-check")
    kdc.add_principal("kquota", check / "kquota.keytab")
    kdc.add_principal("kafka/127.0.0.1", check / "kafka.keytab")
    shutil.copyfile(kdc.krb5_conf, check / "krb5.conf")
    shutil.copyfile(Path(__file__).with_name("image_check.py"), check / "image_check.py")
    (check / "check.json").write_text(
        json.dumps(
            {
                "principal": kdc.principal("kquota"),
                "keytab": f"{INSIDE}/kquota.keytab",
                "service_keytab": f"{INSIDE}/kafka.keytab",
                "krb5_conf": f"{INSIDE}/krb5.conf",
                "host": "127.0.0.1",
            }
        )
    )
    check.chmod(0o755)
    for file in check.iterdir():
        file.chmod(0o644)  # the image's user (65532) reads them; a throwaway realm's keys
    result = images.run_in(
        image,
        ["/opt/kquota/bin/python", f"{INSIDE}/image_check.py", INSIDE],
        volumes={check: INSIDE},
        env={
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": "/nonexistent",
            "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
        },
    )
    assert result.returncode == 0, f"image_check.py failed in {image.reference}:\n{result.stderr[-4000:]}"
    report: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return report


def test_gssapi_in_the_image_authenticates_against_a_real_kdc(in_image: dict[str, Any], kdc: Kdc) -> None:
    kerberos = in_image["kerberos"]
    assert "error" not in kerberos, kerberos["error"]
    assert kerberos["complete"] and kerberos["mutual"], kerberos
    assert kerberos["initiator"] == kdc.principal("kquota")
    assert kerberos["encrypted"] and kerberos["unwrapped"] == "kquota"
    assert kdc.as_requests("kquota") >= 1  # the ticket came from the KDC, through the keytab


def test_gssapi_uses_the_images_own_mit_kerberos_libraries(in_image: dict[str, Any]) -> None:
    libraries = in_image["libraries"]
    assert set(libraries) == {"libgssapi_krb5.so", "libkrb5.so", "libk5crypto.so", "libkrb5support.so"}, libraries
    assert all(path.startswith(KRB5_DIR) for path in libraries.values()), libraries


def test_msk_iam_in_the_image_signs_a_valid_connect_token(in_image: dict[str, Any]) -> None:
    msk = in_image["msk"]
    assert "error" not in msk, msk["error"]
    query = verify_sigv4(msk["url"], SECRET_KEY)
    assert msk["url"].startswith("https://kafka.eu-west-1.amazonaws.com/?")
    assert query["Action"] == "kafka-cluster:Connect"
    assert query["X-Amz-Credential"].startswith(f"{ACCESS_KEY}/")
    assert query["X-Amz-Credential"].endswith("/eu-west-1/kafka-cluster/aws4_request")
    assert msk["lifetime"] > 0
