"""The ``geonp`` group: -q/-v on every subcommand, GDAL logs only at -vv, missing inputs exit 1."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from click.testing import CliRunner
from geonp_cli.main import cli


@pytest.mark.parametrize("command", ["fill", "train", "batch", "evaluate", "models"])
def test_every_subcommand_takes_q_and_v(command: str) -> None:
    res = CliRunner().invoke(cli, [command, "--help"])
    assert res.exit_code == 0
    assert "-v, --verbose" in res.output and "-q, --quiet" in res.output


def test_q_and_v_after_the_subcommand_set_the_levels() -> None:
    runner = CliRunner()
    res = runner.invoke(cli, ["models", "-q"])
    assert res.exit_code == 0, res.output
    assert logging.getLogger().level == logging.ERROR
    res = runner.invoke(cli, ["models", "-v"])
    assert res.exit_code == 0
    assert logging.getLogger().level == logging.INFO
    assert logging.getLogger("rasterio").level == logging.ERROR  # rasterio stays quiet at -v
    res = runner.invoke(cli, ["-v", "models", "-v"])  # counts add up: -vv
    assert res.exit_code == 0
    assert logging.getLogger().level == logging.DEBUG
    assert logging.getLogger("rasterio").level == logging.NOTSET
    runner.invoke(cli, ["models"])
    assert logging.getLogger().level == logging.WARNING


def test_fill_q_after_arguments_is_accepted(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["fill", str(tmp_path / "none.tif"), str(tmp_path / "o.tif"), "-q"])
    assert res.exit_code == 1
    assert "No such option" not in res.output and "does not exist" in res.output


@pytest.mark.parametrize(
    "args",
    [["evaluate", "{tmp}/missing.tif"], ["train", "{tmp}/missing.tif", "-o", "{tmp}/m"]],
)
def test_missing_input_is_a_geonp_error_exit_1(tmp_path: Path, args: list[str]) -> None:
    res = CliRunner().invoke(cli, [a.format(tmp=tmp_path) for a in args])
    assert res.exit_code == 1, res.output
    line = next(ln for ln in res.output.splitlines() if ln.startswith("Error:"))
    assert "missing.tif" in line and "does not exist" in line and "check the path" in line
    assert "Usage:" not in res.output
    assert not (tmp_path / "m").exists()


def test_a_command_module_that_fails_to_import_is_an_error_not_a_missing_command():
    from geonp_cli.main import COMMANDS, _register

    assert set(COMMANDS) <= set(cli.commands)
    with pytest.raises(ImportError, match="geonp no_such_command command cannot be loaded"):
        _register(("no_such_command",))
    assert "no_such_command" not in cli.commands
