"""Every package of the source tree is listed in pyproject.toml, so a wheel ships all of them."""

from __future__ import annotations

from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_directory_is_listed_in_pyproject():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = {"geonp_cli"} | {
        ".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "geonp").rglob("__init__.py")}
    assert found <= listed, sorted(found - listed)
    # folders of data files too (a model, the recipes): setuptools warns of an importable folder it
    # would leave out, at every `pip install`
    data = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "geonp").rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}
    assert data <= listed, sorted(data - listed)
    assert "geonp.model_files" in listed and "geonp.evaluation" in listed
