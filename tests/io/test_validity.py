"""Unfilled pixels read as missing; predictions never equal nodata; alpha is rewritten, not filled."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import rasterio
from rasterio.enums import ColorInterp
from rasterio.transform import from_origin

from geonp.io.validity import alpha_values, finish_block, plan_output_validity


def rgba(path: Path) -> Path:
    with rasterio.open(path, "w", driver="GTiff", width=4, height=4, count=4, dtype="uint8",
                       crs="EPSG:32621", transform=from_origin(0, 0, 30, 30)) as dst:
        dst.write(np.full((4, 4, 4), 9, "uint8"))
        dst.colorinterp = [ColorInterp.red, ColorInterp.green, ColorInterp.blue, ColorInterp.alpha]
    return path


def test_plan_skips_the_alpha_band_and_keeps_it_in_the_output(tmp_path: Path) -> None:
    with rasterio.open(rgba(tmp_path / "a.tif")) as src:
        plan = plan_output_validity(src, None, nodata=None)
        chosen = plan_output_validity(src, [1, 2], nodata=None)
    assert plan.bands == (1, 2, 3) and plan.alpha_band == 4 and plan.count == 4
    assert not plan.write_mask
    assert chosen.bands == (1, 2) and chosen.alpha_band is None and chosen.write_mask


def test_prediction_equal_to_nodata_moves_one_step_toward_its_mean(tmp_path: Path) -> None:
    with rasterio.open(rgba(tmp_path / "a.tif")) as src:
        plan = plan_output_validity(src, [1], nodata=100)
    out = np.array([[[100, 100, 5, 7]]], dtype="uint8")
    observed = np.array([[[False, False, True, False]]])
    filled = np.array([[[True, True, False, False]]])
    mean = np.array([[[100.3, 99.6, np.nan, np.nan]]])
    out, valid = finish_block(out, observed=observed, filled=filled, mean=mean, plan=plan)
    np.testing.assert_array_equal(out, [[[101, 99, 5, 100]]])  # the unfilled pixel reads nodata
    np.testing.assert_array_equal(valid, [[True, True, True, False]])


def test_nodata_at_the_top_of_the_range_and_float_nodata(tmp_path: Path) -> None:
    with rasterio.open(rgba(tmp_path / "a.tif")) as src:
        plan = plan_output_validity(src, [1], nodata=255)
    out, _ = finish_block(np.array([[[255]]], "uint8"), observed=np.array([[[False]]]),
                          filled=np.array([[[True]]]), mean=np.array([[[255.2]]]), plan=plan)
    assert int(out[0, 0, 0]) == 254
    from dataclasses import replace

    fplan = replace(plan, dtype="float32", nodata=0.0)
    out, _ = finish_block(np.array([[[0.0, 3.0]]], "float32"), observed=np.array([[[False, False]]]),
                          filled=np.array([[[True, False]]]), mean=None, plan=fplan)
    assert out[0, 0, 0] != 0.0 and abs(float(out[0, 0, 0])) < 1e-30 and out[0, 0, 1] == 0.0


def test_no_nodata_float_gets_nan_and_a_mask(tmp_path: Path) -> None:
    with rasterio.open(rgba(tmp_path / "a.tif")) as src:
        plan = plan_output_validity(src, [1], nodata=None)
    from dataclasses import replace

    plan = replace(plan, dtype="float32")
    out, valid = finish_block(np.array([[[1.0, 2.0]]], "float32"), observed=np.array([[[True, False]]]),
                              filled=np.array([[[False, False]]]), mean=None, plan=plan)
    assert plan.write_mask and np.isnan(out[0, 0, 1]) and out[0, 0, 0] == 1.0
    np.testing.assert_array_equal(valid, [[True, False]])


def test_alpha_values() -> None:
    valid = np.array([[True, True, False]])
    np.testing.assert_array_equal(alpha_values(valid, np.array([[128, 0, 0]]), "uint8"), [[128, 255, 0]])
    assert alpha_values(valid, np.zeros((1, 3)), "uint16").max() == 65535
