"""A reader that closes the pipe early (``kquota ... | head``): no traceback, and the exit code the command documents.

Real processes: the CLI runs as the console script would, writing into a
pipe whose reader has gone, which is what makes Python raise
BrokenPipeError.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

DOC = """\
---
apiVersion: kquota.io/v1alpha1
kind: ClientQuota
metadata: {{name: q-{i}, namespace: team-a}}
spec:
  entity: {{user: {{name: user-{i}}}}}
  quota: {{producerByteRate: {rate}}}
"""


def kquota_into_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    """Run kquota with stdout a pipe nobody reads any more: the reader closed before the first write."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [sys.executable, "-m", "kquota.cli.main", *args],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write)


def assert_quiet(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stderr, result.stderr
    assert "BrokenPipeError" not in result.stderr, result.stderr
    assert "Exception ignored" not in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("args", "code"),
    [
        pytest.param(("completion", "bash"), 0, id="a command that succeeds still exits 0"),
        pytest.param(("--help",), 0, id="--help exits 0"),
        pytest.param(("plan", "--no-such-flag"), 1, id="a usage error still exits 1"),
    ],
)
def test_a_closed_stdout_changes_neither_the_exit_code_nor_stderr(args: tuple[str, ...], code: int) -> None:
    result = kquota_into_closed_pipe(*args)
    assert_quiet(result)
    assert result.returncode == code, result.stderr


def test_validate_piped_into_head_keeps_its_exit_code(tmp_path: Path) -> None:
    """``kquota validate | head -n 1``: far more output than a pipe holds, head leaves after one line.

    One manifest is invalid, so validate's exit code is 1 whether or not
    anyone reads the verdicts.
    """
    docs = [DOC.format(i=i, rate="10Mi") for i in range(3000)] + [DOC.format(i="bad", rate="0")]
    (tmp_path / "quotas.yaml").write_text("".join(docs))
    script = f'"$0" -m kquota.cli.main validate -f {tmp_path} | head -n 1; echo "exit=${{PIPESTATUS[0]}}" >&2'
    result = subprocess.run(
        ["bash", "-c", script, sys.executable], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.stdout.startswith("valid   ClientQuota team-a/q-0"), result.stdout
    assert_quiet(result)
    assert result.stderr.strip().endswith("exit=1"), result.stderr
