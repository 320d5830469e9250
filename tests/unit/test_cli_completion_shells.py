"""The completion scripts parse in their shells.

Not marked ``unit``: it starts bash, zsh and fish (those installed) to check
the syntax of what ``kquota completion`` prints.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from kquota.cli import completion
from kquota.cli.main import build_parser


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_scripts_parse_in_their_shell(shell: str) -> None:
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed")
    script = {"bash": completion.bash, "zsh": completion.zsh, "fish": completion.fish}[shell](build_parser())
    flag = "--no-execute" if shell == "fish" else "-n"
    result = subprocess.run([shell, flag], input=script, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_bash_completes_a_subcommand_and_a_flag() -> None:
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    script = completion.bash(build_parser())
    probe = (
        script
        + '\nCOMP_WORDS=(kquota pl); COMP_CWORD=1; _kquota; echo "${COMPREPLY[*]}"'
        + '\nCOMP_WORDS=(kquota plan --broker-v); COMP_CWORD=2; _kquota; echo "${COMPREPLY[*]}"'
        + '\nCOMP_WORDS=(kquota plan -o j); COMP_CWORD=3; _kquota; echo "${COMPREPLY[*]}"'
    )
    result = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["plan", "--broker-validate", "json"]
