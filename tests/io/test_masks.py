from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import rasterio
from affine import Affine
from rasterio.windows import Window

from geonp.errors import ConfigError, InputRasterError
from geonp.io.masks import read_mask_file, resolve_nodata, valid_mask
from geonp.io.raster import open_raster, raster_info
from geonp.io.windows import read_window
from tests.shared_data import needs, shared_raster

TRANSFORM = Affine(30.0, 0.0, 300000.0, 0.0, -30.0, 5000020.0)
LANDSAT7 = shared_raster("landsat7_slcoff_225078_20110306_b1.tif")


def write_tif(path: Path, data: np.ndarray, *, crs: str | None = "EPSG:32621",
              transform: Affine = TRANSFORM, **kwargs) -> Path:
    if data.ndim == 2:
        data = data[None]
    profile = {
        "driver": "GTiff", "width": data.shape[2], "height": data.shape[1],
        "count": data.shape[0], "dtype": data.dtype.name, "transform": transform,
    }
    if crs:
        profile["crs"] = crs
    profile.update(kwargs)
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(data)
    return path


def info_of(path: Path):
    with open_raster(path) as src:
        return raster_info(src)


# ---------------------------------------------------------------------------------- valid_mask


@pytest.mark.parametrize(
    ("dtype", "nodata"),
    [("uint8", 0), ("uint8", 255), ("uint16", 65535), ("int16", -9999), ("float32", -9999.0)],
)
def test_valid_mask_nodata_in_native_dtype(dtype: str, nodata: float) -> None:
    arr = np.array([[1, 2, nodata], [nodata, 5, 6]], dtype=dtype)
    valid = valid_mask(arr, nodata=nodata)
    np.testing.assert_array_equal(valid, [[True, True, False], [False, True, True]])


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "int16", "float32"])
def test_valid_mask_after_widening_to_float64(dtype: str) -> None:
    nodata = 200 if dtype != "int16" else -200
    native = np.array([1, nodata, 3, nodata], dtype=dtype)
    widened = native.astype("float64")
    widened[2] = np.nan  # padding or missing
    valid = valid_mask(widened, nodata=nodata, source_dtype=dtype)
    np.testing.assert_array_equal(valid, [True, False, False, False])


def test_valid_mask_float32_nodata_survives_widening() -> None:
    nodata = -9999.9  # not exactly representable: float32(-9999.9) != -9999.9 in float64
    widened = np.array([-9999.9, 1.0], dtype="float32").astype("float64")
    assert widened[0] != nodata
    np.testing.assert_array_equal(
        valid_mask(widened, nodata=nodata, source_dtype="float32"), [False, True]
    )


def test_valid_mask_nan_and_inf_always_invalid() -> None:
    arr = np.array([1.0, np.nan, np.inf, -np.inf, 0.0], dtype="float32")
    np.testing.assert_array_equal(valid_mask(arr, nodata=None), [True, False, False, False, True])
    np.testing.assert_array_equal(
        valid_mask(arr, nodata=math.nan), [True, False, False, False, True]
    )
    np.testing.assert_array_equal(valid_mask(arr, nodata=0.0), [True, False, False, False, False])


def test_valid_mask_unrepresentable_nodata_matches_nothing() -> None:
    arr = np.array([0, 255, 44], dtype="uint8")
    # -1 wrapped to uint8 would be 255; it must not mask 255.
    np.testing.assert_array_equal(valid_mask(arr, nodata=-1), [True, True, True])
    np.testing.assert_array_equal(valid_mask(arr, nodata=44.5), [True, True, True])


def test_valid_mask_ands_internal_mask() -> None:
    arr = np.array([[1, 0], [3, 4]], dtype="uint16")
    internal = np.array([[True, True], [False, True]])
    np.testing.assert_array_equal(
        valid_mask(arr, nodata=0, internal_valid=internal), [[True, False], [False, True]]
    )


@needs(LANDSAT7)
def test_valid_mask_landsat7_nodata_tag_does_not_match() -> None:
    with open_raster(LANDSAT7) as src:
        info = raster_info(src)
        data = read_window(src, Window(0, 0, info.width, info.height), [1])
    valid = valid_mask(data, nodata=info.nodata, source_dtype=info.dtype)
    np.testing.assert_array_equal(valid, ~np.isnan(data))
    assert 0 < valid.sum() < valid.size


# ---------------------------------------------------------------------------------- mask file


def test_read_mask_file_zero_one(tmp_path: Path) -> None:
    image = write_tif(tmp_path / "img.tif", np.ones((6, 8), dtype="float32"))
    gaps = np.zeros((6, 8), dtype="uint8")
    gaps[1:3, 2:5] = 1
    mask = write_tif(tmp_path / "mask.tif", gaps)
    is_gap = read_mask_file(mask, like=info_of(image), window=Window(0, 0, 8, 6))
    assert is_gap.dtype == bool
    np.testing.assert_array_equal(is_gap, gaps != 0)


def test_read_mask_file_gdal_255_and_padding(tmp_path: Path) -> None:
    image = write_tif(tmp_path / "img.tif", np.ones((6, 8), dtype="uint16"))
    gaps = np.zeros((6, 8), dtype="uint8")
    gaps[4:, :] = 255
    mask = write_tif(tmp_path / "mask.tif", gaps)
    is_gap = read_mask_file(mask, like=info_of(image), window=Window(6, 2, 4, 6))
    assert is_gap.shape == (6, 4)
    np.testing.assert_array_equal(is_gap[:4, :2], gaps[2:6, 6:8] != 0)
    assert is_gap[4:, :].all() and is_gap[:, 2:].all()  # outside the raster


def test_read_mask_file_nodata_counts_as_observed(tmp_path: Path) -> None:
    image = write_tif(tmp_path / "img.tif", np.ones((4, 4), dtype="float32"))
    gaps = np.array([[0, 1, 9, 9], [0, 0, 1, 9], [0, 0, 0, 0], [1, 1, 1, 1]], dtype="uint8")
    mask = write_tif(tmp_path / "mask.tif", gaps, nodata=9)
    is_gap = read_mask_file(mask, like=info_of(image), window=Window(0, 0, 4, 4))
    np.testing.assert_array_equal(is_gap, (gaps == 1))


def test_read_mask_file_other_values_listed(tmp_path: Path) -> None:
    image = write_tif(tmp_path / "img.tif", np.ones((4, 4), dtype="float32"))
    gaps = np.zeros((4, 4), dtype="uint8")
    gaps[0, 0], gaps[1, 1], gaps[2, 2] = 1, 7, 7
    mask = write_tif(tmp_path / "mask.tif", gaps)
    with pytest.raises(InputRasterError, match=r"values other than 0 and 1 .*: 7; ") as info:
        read_mask_file(mask, like=info_of(image), window=Window(0, 0, 4, 4))
    assert str(mask) in str(info.value)


def test_read_mask_file_lists_at_most_five_values(tmp_path: Path) -> None:
    image = write_tif(tmp_path / "img.tif", np.ones((3, 4), dtype="float32"))
    gaps = np.arange(12, dtype="uint8").reshape(3, 4) + 2
    mask = write_tif(tmp_path / "mask.tif", gaps)
    with pytest.raises(InputRasterError) as info:
        read_mask_file(mask, like=info_of(image), window=Window(0, 0, 4, 3))
    assert ": 2, 3, 4, 5, 6; if it is a quality band" in str(info.value)


def test_read_mask_file_other_grid_without_crs_is_refused(tmp_path: Path) -> None:
    image = write_tif(tmp_path / "img.tif", np.ones((6, 8), dtype="float32"))
    mask = write_tif(tmp_path / "mask.tif", np.zeros((6, 9), dtype="uint8"), crs=None)
    with pytest.raises(InputRasterError) as info:
        read_mask_file(mask, like=info_of(image), window=Window(0, 0, 8, 6))
    text = str(info.value)
    assert "is on another grid than the input" in text and "has no CRS" in text and "gdalwarp" in text
    assert "\n" not in text


def test_read_mask_file_without_crs_is_accepted(tmp_path: Path) -> None:
    image = write_tif(tmp_path / "img.tif", np.ones((2, 3), dtype="float32"))
    mask = write_tif(tmp_path / "mask.tif", np.array([[0, 1, 0], [1, 0, 0]], dtype="uint8"),
                     crs=None)
    is_gap = read_mask_file(mask, like=info_of(image), window=Window(0, 0, 3, 2))
    np.testing.assert_array_equal(is_gap, [[False, True, False], [True, False, False]])


def test_read_mask_file_missing(tmp_path: Path) -> None:
    image = write_tif(tmp_path / "img.tif", np.ones((2, 3), dtype="float32"))
    with pytest.raises(InputRasterError, match="does not exist"):
        read_mask_file(tmp_path / "nomask.tif", like=info_of(image), window=Window(0, 0, 3, 2))


# ---------------------------------------------------------------------------------- nodata


def test_resolve_nodata(tmp_path: Path) -> None:
    tagged = info_of(write_tif(tmp_path / "a.tif", np.ones((2, 2), dtype="uint16"), nodata=0))
    untagged = info_of(write_tif(tmp_path / "b.tif", np.ones((2, 2), dtype="uint16")))
    assert resolve_nodata(tagged, None) == 0.0
    assert resolve_nodata(untagged, None) is None
    assert resolve_nodata(tagged, 65535) == 65535.0
    with pytest.raises(ConfigError, match=r"valid range 0\.\.65535"):
        resolve_nodata(untagged, -1)
