"""Amazon MSK IAM access control: OAUTHBEARER tokens signed by AWS's own ``aws-msk-iam-sasl-signer-python``.

MSK's IAM listeners take, from clients other than Java's, a SASL/OAUTHBEARER
token that is a SigV4-presigned ``kafka-cluster:Connect`` URL, base64url-encoded,
valid for 15 minutes. AWS publishes the library that makes it; kquota calls it
and sends exactly what it returns (``TokenProvider`` refreshes it at 80% of its
lifetime, as any OAUTHBEARER token). Credentials are the library's choice: the
default chain (EKS Pod Identity or IRSA's web identity, environment variables,
the instance role), a named profile, or a role assumed with STS.

The AWS libraries (boto3, botocore) are imported only when a cluster uses MSK IAM:
they take tens of MiB, which an operator of 10,000 resources on other clusters
should not pay. kquota has not been run against MSK itself (no AWS account here):
tests check that the token the library signs is the one the SASL exchange sends,
and that it is a valid SigV4 signature of the Connect action for the region.
"""

from __future__ import annotations

import time
from typing import Any

from kquota.kafka.errors import KafkaLoginFailed
from kquota.kafka.oauth import Token, TokenProvider
from kquota.kafka.settings import MskIamSettings

#: The session name of an assumed role when none is set (aws-msk-iam-auth's is "MSKSASLDefaultSession").
DEFAULT_SESSION_NAME = "kquota"


def _signer() -> Any:
    try:
        from aws_msk_iam_sasl_signer import MSKAuthTokenProvider  # noqa: PLC0415 - tens of MiB, only when used
    except ImportError as exc:
        raise KafkaLoginFailed(
            f"AWS_MSK_IAM needs the aws-msk-iam-sasl-signer-python package (and boto3), which cannot be imported: {exc}"
        ) from None
    return MSKAuthTokenProvider


def sign(settings: MskIamSettings, clock: Any = time.time) -> Token:
    """One token from AWS's signer; raises KafkaLoginFailed with the cause (no credentials, STS refused)."""
    signer = _signer()
    s = settings
    asked = clock()
    try:
        if s.role_arn:
            value, expiry_ms = signer.generate_auth_token_from_role_arn(
                s.region, s.role_arn, s.role_session_name or DEFAULT_SESSION_NAME
            )
        elif s.profile:
            value, expiry_ms = signer.generate_auth_token_from_profile(s.region, s.profile)
        else:
            value, expiry_ms = signer.generate_auth_token(s.region)
    except AttributeError:
        # The signer reads the credentials the chain found without checking that it found any.
        raise KafkaLoginFailed(
            f"AWS_MSK_IAM: signing a token for {s.region} failed: no AWS credentials (none of the default chain's "
            "sources has any: the pod's web identity, AWS_ACCESS_KEY_ID, the config files, the instance role)"
        ) from None
    except Exception as exc:  # noqa: BLE001 - botocore's many exceptions all mean "no token"
        # botocore's messages name profiles, roles and missing credentials, never secret keys.
        text = " ".join(str(exc).split())[:300]
        raise KafkaLoginFailed(
            f"AWS_MSK_IAM: signing a token for {s.region} failed: {type(exc).__name__}: {text}"
        ) from None
    return Token(str(value), float(expiry_ms) / 1000, asked, {"region": s.region})


def provider_for(settings: MskIamSettings, name: str) -> TokenProvider:
    """The token provider of an MSK IAM connection."""
    return TokenProvider(lambda: sign(settings), name=f"{name}: MSK IAM ({settings.region})")
