"""In-memory fills keep the input's shape, type and nodata, as ``geonp fill`` keeps the file's.

Issue 25, red team items 1 and 11: ``geonp.fill`` invented nodata 65535 for a uint16 DataArray
without one, which masked every valid saturated pixel once written with ``rio.to_raster``;
``fill_array`` turned a ``[h, w]`` input into ``(1, h, w)`` float64.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import rasterio
import rioxarray
import xarray as xr

import geonp
from geonp.filling.xarray_result import build_result, unused_integer
from tests.conftest import smooth_field, write_raster


def _field(dtype: str = "float32") -> tuple[np.ndarray, np.ndarray]:
    """A smooth 40 x 40 band and a square gap in it."""
    values = smooth_field((40, 40), seed=1).astype(dtype)
    gap = np.zeros((40, 40), bool)
    gap[12:24, 12:24] = True
    return values, gap


def test_fill_array_of_one_band_gives_one_band_in_its_type(tiny_model) -> None:
    values, gap = _field("float32")
    filled, std = geonp.fill_array(values, ~gap, model=str(tiny_model), device="cpu")
    assert filled.shape == std.shape == (40, 40)
    assert filled.dtype == np.float32 and std.dtype == np.float32
    np.testing.assert_array_equal(filled[~gap], values[~gap])  # bit for bit
    assert np.isfinite(filled[gap]).all() and (std[gap] > 0).all() and (std[~gap] == 0).all()
    stacked, _ = geonp.fill_array(values[None], ~gap, model=str(tiny_model), device="cpu")
    assert stacked.shape == (1, 40, 40)
    np.testing.assert_array_equal(stacked[0], filled)


def test_fill_array_of_integers_rounds_keeps_nodata_and_marks_unfilled_pixels(tiny_model) -> None:
    values, gap = _field("uint16")
    values[gap] = 0
    filled, std = geonp.fill_array(values, np.ones_like(gap), model=str(tiny_model), device="cpu", nodata=0,
                                   max_distance=3)
    far = np.zeros_like(gap)
    far[15:21, 15:21] = True  # more than 3 px from an observed pixel
    assert filled.dtype == np.uint16 and filled.shape == (40, 40)
    assert (filled[far] == 0).all() and np.isnan(std[far]).all()  # unfilled: nodata, std NaN
    near = gap & ~far
    assert (filled[near] > 0).all() and (std[near] > 0).all()
    np.testing.assert_array_equal(filled[~gap], values[~gap])
    # without nodata an unfilled pixel keeps its value (as geonp fill keeps it under its mask); std NaN marks it
    kept, kept_std = geonp.fill_array(values, ~gap, model=str(tiny_model), device="cpu", max_distance=3)
    assert (kept[far] == 0).all() and np.isnan(kept_std[far]).all() and (kept[near] > 0).all()


def test_fill_of_uint16_without_nodata_invents_none(tmp_path: Path, tiny_model) -> None:
    """The red team's case: 25 saturated pixels are valid data and must stay valid once written."""
    arr = smooth_field((32, 32), seed=2).astype("uint16")[None]
    arr[0, 5:10, 5:10] = 65535  # saturated, valid
    path = write_raster(tmp_path / "in.tif", arr)
    ds = geonp.fill(rioxarray.open_rasterio(path), model=str(tiny_model), device="cpu")
    assert ds.filled.rio.nodata is None and ds.filled.rio.encoded_nodata is None
    ds.filled.rio.to_raster(tmp_path / "api.tif")
    geonp.fill_raster(path, tmp_path / "cli.tif", model=str(tiny_model), device="cpu")
    for name in ("api.tif", "cli.tif"):
        with rasterio.open(tmp_path / name) as out:
            assert out.nodata is None and out.dtypes[0] == "uint16"
            assert (out.read_masks(1) == 255).all()  # no pixel masked
            assert int((out.read(1) == 65535).sum()) == 25
            np.testing.assert_array_equal(out.read(), arr)


def _da(values: np.ndarray) -> xr.DataArray:
    return xr.DataArray(values, dims=("band", "y", "x"),
                        coords={"band": [1], "y": np.arange(values.shape[1]), "x": np.arange(values.shape[2])})


def test_build_result_moves_a_prediction_off_nodata_as_the_file_fill_does() -> None:
    da = _da(np.array([[[0, 7, 0, 3]]], dtype="uint8"))
    filled = np.array([[[0.3, 7.0, np.nan, 3.0]]])  # a prediction rounding to nodata 0; one unfilled
    std = np.array([[[1.5, 0.0, np.nan, 0.0]]])
    ds = build_result(filled, std, da, nodata=0)
    np.testing.assert_array_equal(ds.filled.values, [[[1, 7, 0, 3]]])
    assert ds.filled.rio.nodata == 0


def test_build_result_of_integers_without_nodata_picks_a_value_the_data_lacks() -> None:
    values = np.array([[[65535, 65534, 0, 9]]], dtype="uint16")  # the type's maximum and minimum are data
    filled = np.array([[[65535.0, 65534.0, 0.0, np.nan]]])
    ds = build_result(filled, np.array([[[0, 0, 0, np.nan]]]), _da(values), nodata=None)
    assert ds.filled.rio.nodata == 65533 and ds.filled.values[0, 0, 3] == 65533
    assert unused_integer(np.array([0, 255, 3]), np.dtype("uint8")) == 254
    assert unused_integer(np.arange(256), np.dtype("uint8")) is None
    lazy = build_result(xr.DataArray(filled).chunk().data, np.zeros((1, 1, 4)), _da(values), nodata=None)
    assert lazy.filled.rio.nodata is None  # a lazy array: its input value stays, std NaN marks it
    np.testing.assert_array_equal(lazy.filled.values, values)


def test_fill_array_leaves_a_swath_collar_unfilled_as_fill_raster_does(tmp_path: Path, tiny_model) -> None:
    """fill_raster's footprint rule: nodata beyond a tilted swath edge is no gap; a cloud inside is one."""
    rows, cols = np.mgrid[0:64, 0:64] + 0.5
    theta = np.deg2rad(35)
    collar = (cols - 32) * np.cos(theta) + (rows - 32) * np.sin(theta) > 18
    cloud = np.zeros((64, 64), bool)
    cloud[20:28, 10:20] = True
    values = np.where(collar | cloud, 0, smooth_field((64, 64), seed=3)).astype("uint16")
    kw = {"model": str(tiny_model), "device": "cpu", "nodata": 0}
    filled, std = geonp.fill_array(values, values != 0, **kw)
    assert (filled[collar] == 0).all() and np.isnan(std[collar]).all()
    assert (filled[cloud] > 0).all() and (std[cloud] > 0).all()
    path = write_raster(tmp_path / "swath.tif", values, nodata=0)
    geonp.fill_raster(path, tmp_path / "out.tif", workers=1, **kw)
    with rasterio.open(tmp_path / "out.tif") as out, rasterio.open(tmp_path / "out_std.tif") as out_std:
        np.testing.assert_array_equal(out.read(1), filled)
        np.testing.assert_array_equal(np.isnan(out_std.read(1)), np.isnan(std))
    everywhere, _ = geonp.fill_array(values, values != 0, fill_outside=True, **kw)
    assert (everywhere[collar] > 0).all()
