"""The Dataset of ``geonp.fill``: ``filled`` in the input's type with nodata and CRS, ``uncertainty``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import rasterio
import rioxarray
import xarray as xr

from geonp.filling.xarray_result import build_result
from tests.conftest import write_raster


def _input(tmp_path: Path, *, nodata=0, dtype="uint16") -> xr.DataArray:
    arr = np.full((2, 4, 5), 1000, dtype=dtype)
    arr[:, 1, 1] = nodata if nodata is not None else 0
    path = write_raster(tmp_path / "in.tif", arr, nodata=nodata, descriptions=["B2", "B3"])
    with rasterio.open(path, "r+") as dst:
        dst.scales, dst.units = (2.75e-5, 2.75e-5), ("reflectance", "reflectance")
    return rioxarray.open_rasterio(path, mask_and_scale=False)


def test_filled_keeps_type_nodata_crs_and_writes_back(tmp_path: Path) -> None:
    da = _input(tmp_path)
    filled = da.values.astype("float64")
    filled[:, 1, 1] = [1234.6, 70000.0]  # rounded; clipped to uint16, never wrapped
    filled[:, 2, 2] = np.nan  # left unfilled
    std = np.zeros(filled.shape)
    std[:, 1, 1], std[:, 2, 2] = 12.5, np.nan
    ds = build_result(filled, std, da, nodata=0)
    assert set(ds.data_vars) == {"filled", "uncertainty"}
    assert ds.filled.dtype == np.uint16 and ds.uncertainty.dtype == np.float32
    assert ds.filled.rio.nodata == 0 and ds.filled.rio.crs.to_epsg() == 32621
    assert ds.rio.crs.to_epsg() == 32621
    np.testing.assert_array_equal(ds.filled.values[:, 1, 1], [1235, 65535])
    np.testing.assert_array_equal(ds.filled.values[:, 2, 2], [0, 0])
    assert np.isnan(ds.uncertainty.rio.nodata) and ds.uncertainty.attrs["units"] == ("reflectance", "reflectance")
    assert ds.uncertainty.attrs["scale_factor"] == 2.75e-5 and "add_offset" not in ds.uncertainty.attrs
    assert callable(ds.std) and ds["uncertainty"] is not None  # ds.std is the method; no clash
    out = tmp_path / "out.tif"
    ds.filled.rio.to_raster(out)
    with rasterio.open(out) as src:
        assert src.dtypes[0] == "uint16" and src.nodata == 0 and src.crs.to_epsg() == 32621
        assert int(src.read(1)[1, 1]) == 1235


def test_integer_without_nodata_gets_the_type_maximum_for_unfilled(tmp_path: Path) -> None:
    da = _input(tmp_path, nodata=None)
    filled = da.values.astype("float64")
    filled[:, 2, 2] = np.nan
    ds = build_result(filled, np.zeros(filled.shape), da, nodata=None)
    assert ds.filled.rio.nodata == 65535 and int(ds.filled.values[0, 2, 2]) == 65535


def test_lazy_input_stays_lazy(tmp_path: Path) -> None:
    dask = pytest.importorskip("dask.array")
    da = _input(tmp_path).chunk({"x": 2})
    filled = dask.from_array(da.values.astype("float64"), chunks=(2, 4, 2))
    ds = build_result(filled, dask.zeros(filled.shape, chunks=(2, 4, 2)), da, nodata=0)
    assert ds.filled.chunks is not None and ds.filled.dtype == np.uint16
    np.testing.assert_array_equal(ds.filled.values, da.values)


def test_accessor_and_api_fill_return_typed_filled(tmp_path: Path, tiny_model) -> None:
    import geonp
    import geonp.filling.xarray_result

    arr = np.full((1, 32, 32), 1000, "uint16")
    arr[0] += (np.arange(32) * 10).astype("uint16")[None, :]
    arr[0, 10:15, 10:15] = 0
    path = write_raster(tmp_path / "in.tif", arr, nodata=0)
    da = rioxarray.open_rasterio(path)
    ds = da.geonp.fill(model=str(tiny_model), device="cpu")
    ref = geonp.fill(da, model=str(tiny_model), device="cpu")
    assert ds.filled.dtype == np.uint16 and ds.filled.rio.nodata == 0 and ds.rio.crs.to_epsg() == 32621
    np.testing.assert_array_equal(ds.filled.values, ref.filled.values)
    assert (ds.filled.values[0, 10:15, 10:15] > 0).all() and (ds.uncertainty.values[0, 10:15, 10:15] > 0).all()
    assert (ds.uncertainty.values[0, :10] == 0).all()


def test_api_and_cli_agree_on_gaps_at_the_raster_edge(tmp_path: Path, tiny_model) -> None:
    """Pixels outside the raster are never queries: a block's halo over the edge changes nothing."""
    import geonp
    from geonp.data.gap_shapes import cloud_mask
    from tests.conftest import smooth_field

    arr = np.stack([smooth_field((64, 64), seed=s) for s in range(2)]).astype("uint16")
    gap = cloud_mask((64, 64), coverage=0.3, rng=3)
    gap[:, :3] = True  # gaps along the left edge too
    arr[:, gap] = 0
    path = write_raster(tmp_path / "in.tif", arr, nodata=0)
    geonp.fill_raster(path, tmp_path / "cli.tif", model=str(tiny_model), device="cpu", block_size=32,
                      fill_outside=True)
    ds = geonp.fill(rioxarray.open_rasterio(path), model=str(tiny_model), device="cpu")
    with rasterio.open(tmp_path / "cli.tif") as src:
        np.testing.assert_array_equal(ds.filled.values, src.read())
