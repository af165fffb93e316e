"""The whole real scene: a dry run counts no gap in the collar; relative paths reach Dask workers."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import rasterio
from click.testing import CliRunner
from geonp_cli.main import cli

from tests.conftest import smooth_field, write_raster
from tests.io.test_footprint import SCENE, needs_scene


@needs_scene
def test_dry_run_on_the_whole_scene_counts_no_collar_gap(tmp_path, tiny_model) -> None:
    res = CliRunner().invoke(cli, ["fill", str(SCENE), str(tmp_path / "o.tif"), "--nodata", "0", "--dry-run",
                                   "--model", str(tiny_model)])
    assert res.exit_code == 0, res.output
    with rasterio.open(SCENE) as src:
        collar = int((src.read(1) == 0).sum())
    assert "  gap_pixels: 0\n" in res.output
    assert f"  outside_footprint_pixels: {3 * collar}\n" in res.output
    assert "inside the straight edges of the data's collar (83.5 % of the grid has data)" in res.output


def test_fill_scheduler_with_relative_paths(tmp_path, tiny_model, cluster, monkeypatch) -> None:
    pytest.importorskip("distributed")
    arr = np.stack([smooth_field((48, 48), seed=5)]).astype("float32")
    arr[0, 10:20, 10:20] = np.nan
    write_raster(tmp_path / "in.tif", arr, nodata=float("nan"))
    shutil.copytree(tiny_model, tmp_path / "model")
    monkeypatch.chdir(tmp_path)  # the workers run elsewhere: they need absolute paths
    res = CliRunner().invoke(cli, ["-q", "fill", "in.tif", "out.tif", "--model", "model", "--device", "cpu",
                                   "--scheduler", cluster.scheduler_address])
    assert res.exit_code == 0, res.output
    with rasterio.open(tmp_path / "out.tif") as dst:
        assert np.isfinite(dst.read(1)[10:20, 10:20]).all()
