"""kquota reads user names as Strimzi's User Operator does: its ignore pattern and its CN decoding, compared with Java.

The User Operator matches ``STRIMZI_IGNORED_USERS_PATTERN`` with Java's
``Pattern.matcher(name).matches()`` and turns a name containing ``CN=`` into its
CN values with ``javax.naming.ldap.LdapName`` (``KafkaUserModel.decodeUsername``).
kquota runs the pattern with Python's ``re`` (``java_pattern``) and parses the
name itself (``decode_username``); StrimziNames.java makes the same Java calls as
Strimzi, and both must agree on every case, or kquota must say it cannot
evaluate the pattern (and then count none, the User Operator's side).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from kquota.domain.strimzi import decode_username, java_pattern

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent

PATTERNS = [
    "kq-.*",
    "(CN=)?kq-.*",
    "(?:CN=)?batch-[0-9]+",
    "(?<team>kq|ops)-.*",
    "kq-\\d{2,3}",
    "(?i)KQ-.*",
    "a|b|CN=c",
    "[a-z]+(-[a-z]+)*",
    ".*,OU=platform",
    "CN=[^,]+,OU=.*",
    "kq-.*+",
    "(?>kq)-x",
    "\\Qkq.x\\E",
    "\\p{Alpha}+",
    "[[:alpha:]]+",
]
NAMES = [
    "kq-app",
    "CN=kq-app",
    "xkq-app",
    "batch-7",
    "CN=batch-7",
    "ops-1",
    "KQ-Upper",
    "kq-12",
    "kq-1234",
    "CN=app,OU=platform",
    "OU=x,CN=a",
    "CN=a\\,b",
    'CN="a,b"',
    "CN=a+UID=b",
    "cn=lower",
    "CN=",
    "user-CN=x",
    "kq.x",
    "kqx",
    "abc",
    "<default>",
]


def java_answers(cases: list[tuple[str, str]]) -> list[tuple[str, str]]:
    java = shutil.which("java")
    if java is None:
        pytest.fail("java is needed (part of the project's setup)")
    text = "".join(f"{p}\t{n}\n" for p, n in cases)
    out = subprocess.run(
        [java, str(HERE / "StrimziNames.java")], input=text.encode(), capture_output=True, timeout=120, check=True
    ).stdout.decode()
    return [tuple(line.split("\t", 1)) for line in out.splitlines()]  # type: ignore[misc]


def test_patterns_and_decoded_names_agree_with_java() -> None:
    cases = [(p, n) for p in PATTERNS for n in NAMES]
    answers = java_answers(cases)
    assert len(answers) == len(cases)
    disagreements = []
    unevaluated = set()
    for (pattern, name), (matches, decoded) in zip(cases, answers, strict=True):
        compiled = java_pattern(pattern)
        if isinstance(compiled, str):
            # kquota says it cannot evaluate this pattern, and counts none (every user stays Strimzi's).
            unevaluated.add(pattern)
        else:
            ours = str(compiled.fullmatch(name) is not None).lower()
            if ours != matches:
                disagreements.append(f"{pattern!r} on {name!r}: Java {matches}, kquota {ours}")
        mine = decode_username(name)
        if (mine if mine is not None else "!") != decoded:
            disagreements.append(f"decode {name!r}: Java {decoded!r}, kquota {mine!r}")
    assert not disagreements, "\n".join(disagreements)
    # The patterns Python cannot run are exactly the Java-only syntax (never silently different).
    assert unevaluated == {"\\p{Alpha}+", "[[:alpha:]]+"}, unevaluated
