"""``geonp batch`` lists dangling symbolic links and link loops as failures in its summary."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner
from geonp_cli.main import cli

from tests.test_cli_batch import write_scene

pytest.importorskip("distributed")


def test_broken_links_are_failures_in_the_summary(tmp_path, tiny_model, cluster, monkeypatch) -> None:
    monkeypatch.setenv("DASK_LOGGING__DISTRIBUTED", "warning")
    src, out = tmp_path / "in", tmp_path / "out"
    write_scene(src / "good.tif", 0)
    os.symlink(src / "missing.tif", src / "gone.tif")
    os.symlink(src / "loop.tif", src / "loop.tif")
    res = CliRunner().invoke(cli, ["batch", str(src), str(out), "--model", str(tiny_model), "--device", "cpu",
                                   "--scheduler", cluster.scheduler_address])
    assert res.exit_code == 1, res.output
    assert "3 file(s): 1 done, 0 skipped, 2 failed" in res.stdout
    lines = {line.split()[1]: line for line in res.stdout.splitlines()[1:-1]}
    assert "dangling symbolic link" in lines["gone.tif"] and "missing.tif" in lines["gone.tif"]
    assert "symbolic link loop" in lines["loop.tif"]
    manifest = json.loads((out / "geonp_batch.json").read_text())
    assert {f["name"]: f["status"] for f in manifest["files"]} == {
        "good.tif": "done", "gone.tif": "failed", "loop.tif": "failed"}
