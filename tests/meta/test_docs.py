from pathlib import Path

from geonp_cli.main import cli

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def test_every_command_has_help_and_is_in_the_readme():
    assert set(cli.commands) == {"fill", "train", "batch", "evaluate", "models"}
    for name, command in cli.commands.items():
        assert command.help and len(command.help) > 40, name
        assert f"geonp {name}" in README, name


def test_readme_gives_the_two_newcomer_commands():
    assert "pip install -e ." in README
    assert "geonp fill sample_data/landsat8_cloudy.tif" in README
    assert "python -m pytest" in README
