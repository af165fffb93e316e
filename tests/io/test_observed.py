"""One rule for a missing pixel: full-resolution windows and display overviews agree."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import rasterio
from rasterio.enums import ColorInterp
from rasterio.transform import from_origin
from rasterio.windows import Window

from geonp.io.observed import read_observed, read_observed_overview
from geonp.io.raster import raster_info


def _write(path: Path, arr: np.ndarray, *, nodata=None, mask=None, alpha=None) -> Path:
    count = arr.shape[0] + (alpha is not None)
    profile = {"driver": "GTiff", "width": arr.shape[2], "height": arr.shape[1], "count": count,
               "dtype": str(arr.dtype), "nodata": nodata, "crs": "EPSG:32633",
               "transform": from_origin(500000, 7000000, 30, 30),
               **({"photometric": "RGB", "alpha": "YES"} if alpha is not None else {})}
    with rasterio.Env(GDAL_TIFF_INTERNAL_MASK=True), rasterio.open(path, "w", **profile) as dst:
        dst.write(arr, indexes=list(range(1, arr.shape[0] + 1)))
        if alpha is not None:
            dst.write(alpha, indexes=count)
        if mask is not None:
            dst.write_mask(mask)
    return path


def _field(bands=2, size=24) -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.integers(1, 1000, (bands, size, size)).astype("uint16")


def _both(path: Path, max_side: int, nodata):
    with rasterio.open(path) as src:
        info = raster_info(src)
        full = read_observed(src, Window(0, 0, src.width, src.height), [1, 2], info=info, nodata=nodata)
        small = read_observed_overview(src, [1, 2], max_side=max_side, nodata=nodata)
    return full, small


def test_overview_at_full_size_equals_read_observed_with_an_internal_mask(tmp_path):
    arr = _field()
    arr[0, 0, 0] = 0  # nodata
    mask = np.full((24, 24), 255, "uint8")
    mask[5:9, 3:7] = 0  # masked although the values look valid
    path = _write(tmp_path / "m.tif", arr, nodata=0, mask=mask)
    (values, valid), (small, small_valid) = _both(path, 24, 0.0)
    np.testing.assert_array_equal(small, values)
    np.testing.assert_array_equal(small_valid, valid)
    assert not small_valid[:, 5:9, 3:7].any() and not small_valid[0, 0, 0] and small_valid[1, 0, 0]
    assert small_valid.sum() == 2 * 24 * 24 - 2 * 16 - 1


def test_overview_sees_the_alpha_band_and_decimates_by_a_whole_step(tmp_path):
    arr = (_field(bands=3) % 250).astype("uint8")
    alpha = np.full((24, 24), 255, "uint8")
    alpha[:, 12:] = 0
    path = _write(tmp_path / "a.tif", arr, alpha=alpha)
    with rasterio.open(path) as src:
        assert src.colorinterp[-1] == ColorInterp.alpha
    (values, valid), (small, small_valid) = _both(path, 12, None)
    assert not valid[:, :, 12:].any()
    assert small.shape == (2, 12, 12)
    np.testing.assert_array_equal(small, values[:, 1::2, 1::2])  # nearest: the centre pixel
    np.testing.assert_array_equal(small_valid, valid[:, 1::2, 1::2])
    assert small_valid[:, :, :6].all() and not small_valid[:, :, 6:].any()
