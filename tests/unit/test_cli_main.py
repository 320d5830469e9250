"""The kquota command: subcommands registered, operator untouched, the advisor hook, completion scripts."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from kquota import __version__
from kquota.cli import completion
from kquota.cli.main import build_parser, main
from kquota.reconcile.settings import OperatorSettings

MINE = ("validate", "plan", "explain", "export", "completion")


def test_subcommands() -> None:
    names = set(completion.subcommands(build_parser()))
    assert {"operator", *MINE} <= names


def test_operator_subcommand_is_intact() -> None:
    args = build_parser().parse_args(
        ["operator", "--namespace", "ops", "--drift-interval", "5", "--watch-namespace", "a"]
    )
    assert (args.namespace, args.drift_interval, args.watch_namespace) == ("ops", 5.0, ["a"])
    assert args.func.__name__ == "_operator"


def test_advisor_subcommands_come_through_the_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("kquota.advisor.cli")
    assert {"advise", "collect"} <= set(completion.subcommands(build_parser()))
    # Without the advisor package the rest of the CLI still works.
    monkeypatch.setitem(sys.modules, "kquota.advisor.cli", None)
    names = set(completion.subcommands(build_parser()))
    assert "advise" not in names
    assert set(MINE) <= names


@pytest.mark.parametrize("command", MINE[:-1])
def test_help_has_examples(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out
    assert f"kquota {command} " in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.strip() == f"kquota {__version__}"


def test_bash_completion_knows_every_subcommand_and_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", "bash"]) == 0
    script = capsys.readouterr().out
    assert "complete -o default -F _kquota kquota" in script
    for name in ("operator", *MINE):
        assert f"        {name})" in script
    plan_block = script.split("        plan)")[1].split("        explain)")[0]
    assert "--broker-validate" in plan_block
    assert "--user" not in plan_block
    assert "-f|--filename) COMPREPLY=($(compgen -f" in plan_block
    assert "-o|--output) COMPREPLY=($(compgen -W 'text json'" in script
    assert "--out) COMPREPLY=($(compgen -d" in script


def test_zsh_and_fish(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", "zsh"]) == 0
    assert "bashcompinit" in capsys.readouterr().out
    assert main(["completion", "fish"]) == 0
    fish = capsys.readouterr().out
    assert "complete -c kquota -n __fish_use_subcommand -a 'plan'" in fish
    assert "complete -c kquota -n '__fish_seen_subcommand_from explain' -s o -l output -x -a 'text json'" in fish
    # plan's output also takes markdown (the pull-request comment), and --format is the same flag.
    assert (
        "complete -c kquota -n '__fish_seen_subcommand_from plan' -s o -l output -l format -x -a 'text json markdown'"
        in fish
    )
    assert "complete -c kquota -n '__fish_seen_subcommand_from validate' -s f -l filename -r -F" in fish
    assert "%(default)s" not in fish


def test_readme_lists_every_operator_setting_with_its_default() -> None:
    """The README's configuration table is what users tune from: every setting, the real default."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    rows = dict(re.findall(r"^\| `KQUOTA_([A-Z_]+)` \| `?([^|`]+?)`? \|", readme, re.MULTILINE))
    defaults = OperatorSettings.model_construct().model_dump()
    assert set(rows) == {name.upper() for name in defaults}
    for name, value in defaults.items():
        shown = rows[name.upper()]
        if value is None:
            assert shown == "unset", name
        elif isinstance(value, list):
            assert json.loads(shown) == value, name
        elif isinstance(value, bool):
            assert shown == str(value).lower(), name
        elif isinstance(value, float | int):
            assert float(shown) == value, name
        else:
            assert shown == value, name
