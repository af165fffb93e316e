"""A 140-px hole over the homogeneous water of the shared scene's lake (issue 25, red-team item 12).

The default model fills the rim of such a hole as well as GDAL FillNodata, but deeper than ~15 px
from the hole's edge its fill drifts towards its far context, the land around the lake: a darker
blob in the blue and green bands (-24 and -23 DN with today's default; GDAL -4 and -7 DN; RMSE 31
against GDAL's 12).
Nothing at fill time removes the drift without a cost elsewhere (shift and scale of each tile from
its near set: no change; no far set: +11 to +16 DN of bias on 70-px water holes instead; far set
kept within 128 px: water RMSE 44 -> 31 but scene-scale clouds 346 -> 351 DN on the model card's
test columns, 267 -> 385 DN beyond 192 px). The model has to learn it: it was trained on 256-px
windows, so its far set never came from beyond them, while a fill's reaches 512 px (a fine-tune on
512-px windows brought the RMSE to 20-25 DN: docs/benchmarks.md, "Training on the corpus"). Until then
the std must own up to the drift, and it does.
"""

from __future__ import annotations

import numpy as np
import pytest
import rasterio
from click.testing import CliRunner
from geonp_cli.main import cli
from rasterio.fill import fillnodata
from rasterio.windows import Window
from scipy import ndimage

from tests.io.test_footprint import SCENE, needs_scene

#: The lake: rows 643-1155, cols 841-1353 of the scene (std 13-17 DN per band in 101 px at its centre).
CROP = Window(841, 643, 512, 512)
DIAMETER = 140


@pytest.fixture(scope="module")
def water_fill(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("water")
    with rasterio.open(SCENE) as src:
        truth = src.read(window=CROP)
        profile = src.profile
        profile.update(width=512, height=512, transform=src.window_transform(CROP), nodata=None)
    rr, cc = np.mgrid[:512, :512]
    hole = (rr - 255.5) ** 2 + (cc - 255.5) ** 2 <= (DIAMETER / 2) ** 2
    assert (truth > 0).all()
    hidden = truth.copy()
    hidden[:, hole] = 0
    inp = tmp / "lake.tif"
    with rasterio.open(inp, "w", **profile) as dst:
        dst.write(hidden)
    out = tmp / "filled.tif"
    res = CliRunner().invoke(cli, ["-q", "fill", str(inp), str(out), "--nodata", "0", "--device", "cpu"])
    assert res.exit_code == 0, res.output
    with rasterio.open(out) as f:
        filled = f.read().astype(np.float64)
    with rasterio.open(tmp / "filled_std.tif") as f:
        std = f.read().astype(np.float64)
    gdal = np.stack([fillnodata(b.astype(np.float32), mask=(~hole).astype(np.uint8), max_search_distance=300)
                     for b in hidden]).astype(np.float64)
    depth = ndimage.distance_transform_edt(hole)
    return truth.astype(np.float64), hole, depth, filled, std, gdal


@needs_scene
def test_the_water_is_homogeneous_and_gdal_fills_it_closely(water_fill):
    truth, hole, _, _, _, gdal = water_fill
    assert truth[:, hole].std(axis=1).max() < 25.0  # DN: open water, no shore inside the hole
    err = gdal[:, hole] - truth[:, hole]
    assert np.abs(err.mean(axis=1)).max() < 8.0
    assert np.sqrt(np.mean(err**2)) < 15.0


@needs_scene
def test_the_rim_of_the_hole_is_filled_without_bias(water_fill):
    truth, hole, depth, filled, _, _ = water_fill
    rim = hole & (depth <= 5)
    bias = (filled[:, rim] - truth[:, rim]).mean(axis=1)
    assert np.abs(bias).max() < 6.0, bias


@needs_scene
def test_the_std_covers_the_drift_deep_in_the_hole(water_fill):
    truth, hole, depth, filled, std, _ = water_fill
    z = (filled[:, hole] - truth[:, hole]) / std[:, hole]
    assert (np.mean(np.abs(z) <= 1.96, axis=1) >= 0.95).all()
    deep = hole & (depth > 15)
    bias = (filled[:, deep] - truth[:, deep]).mean(axis=1)
    assert (np.abs(bias) < std[:, deep].mean(axis=1)).all(), (bias, std[:, deep].mean(axis=1))


@needs_scene
@pytest.mark.xfail(strict=True, reason="the default model's fill drifts towards the land around the lake deep in "
                                       "a hole (blue -42 DN); needs retraining (issue 25, item 12)")
def test_the_hole_is_filled_without_a_dark_blob(water_fill):
    truth, hole, _, filled, _, gdal = water_fill
    bias = (filled[:, hole] - truth[:, hole]).mean(axis=1)
    assert np.abs(bias).max() < 10.0, bias
    rmse = np.sqrt(np.mean((filled[:, hole] - truth[:, hole]) ** 2))
    gdal_rmse = np.sqrt(np.mean((gdal[:, hole] - truth[:, hole]) ** 2))
    assert rmse < 1.5 * gdal_rmse, (rmse, gdal_rmse)
