from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest
import rasterio
import rasterio.errors
import rasterio.shutil
from affine import Affine
from rasterio.enums import ColorInterp
from rasterio.windows import Window

from geonp.errors import ConfigError, InputRasterError
from geonp.io.raster import (
    RasterInfo,
    check_nodata_in_range,
    open_raster,
    raster_info,
    select_bands,
)
from geonp.io.windows import read_band_masks, read_window
from tests.shared_data import needs, shared_raster

LANDSAT7 = shared_raster("landsat7_slcoff_225078_20110306_b1.tif")
TRANSFORM = Affine(30.0, 0.0, 300000.0, 0.0, -30.0, 5000020.0)


def write_tif(path: Path, data: np.ndarray, **kwargs) -> Path:
    profile = {
        "driver": "GTiff",
        "width": data.shape[2],
        "height": data.shape[1],
        "count": data.shape[0],
        "dtype": data.dtype.name,
        "crs": "EPSG:32621",
        "transform": TRANSFORM,
    }
    profile.update(kwargs)
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(data)
    return path


def ramp(bands: int, height: int, width: int, dtype: str = "float32") -> np.ndarray:
    return np.arange(bands * height * width, dtype="float64").reshape(bands, height, width).astype(
        dtype
    )


# ---------------------------------------------------------------------------------------- open


def test_open_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.tif"
    with pytest.raises(InputRasterError, match="does not exist; check the path") as info:
        open_raster(path)
    assert str(path) in str(info.value)


def test_open_directory(tmp_path: Path) -> None:
    with pytest.raises(InputRasterError, match="is a directory") as info:
        open_raster(tmp_path)
    assert str(tmp_path) in str(info.value)


def test_open_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.tif"
    path.write_bytes(b"")
    with pytest.raises(InputRasterError, match=r"empty file \(0 bytes\)"):
        open_raster(path)


def test_open_text_file(tmp_path: Path) -> None:
    path = tmp_path / "notes.tif"
    path.write_text("these are not pixels\n")
    with pytest.raises(InputRasterError, match="not a raster GDAL can read") as info:
        open_raster(path)
    assert isinstance(info.value.__cause__, rasterio.errors.RasterioIOError)
    assert "\n" not in str(info.value)


def test_open_truncated_file(tmp_path: Path) -> None:
    path = write_tif(tmp_path / "full.tif", ramp(1, 64, 64))
    data = path.read_bytes()
    cut = tmp_path / "cut.tif"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputRasterError, match="is truncated or corrupt") as info:
        open_raster(cut)
    assert str(cut) in str(info.value)
    assert "\n" not in str(info.value)


def test_open_truncated_pixels_fail_at_open(tmp_path: Path) -> None:
    # A COG keeps its header at the front: GDAL opens the truncated file, the probe read fails.
    rng = np.random.default_rng(0)
    plain = write_tif(tmp_path / "plain.tif", rng.random((1, 300, 300)).astype("float32"))
    cog = tmp_path / "cog.tif"
    rasterio.shutil.copy(plain, cog, driver="COG", COMPRESS="NONE", OVERVIEWS="NONE")
    data = cog.read_bytes()
    cut = tmp_path / "cut_cog.tif"
    cut.write_bytes(data[: len(data) - 20000])
    with rasterio.open(cut) as src:  # GDAL itself opens it fine
        assert src.width == 300
    pattern = "truncated or corrupt: reading its pixels failed"
    with pytest.raises(InputRasterError, match=pattern) as info:
        open_raster(cut)
    assert "See previous exception" not in str(info.value)


def test_open_valid_file_is_readable(tmp_path: Path) -> None:
    data = ramp(2, 20, 30)
    path = write_tif(tmp_path / "ok.tif", data)
    with open_raster(os.fspath(path)) as src:
        assert src.mode == "r"
        np.testing.assert_array_equal(src.read(), data)


# ---------------------------------------------------------------------------------------- info


def test_raster_info_fields(tmp_path: Path) -> None:
    path = tmp_path / "info.tif"
    with rasterio.open(
        path, "w", driver="GTiff", width=40, height=30, count=3, dtype="int16",
        crs="EPSG:32621", transform=TRANSFORM, nodata=-9999,
    ) as dst:
        dst.write(np.ones((3, 30, 40), dtype="int16"))
        dst.set_band_description(1, "blue")
        dst.set_band_description(3, "red")
        dst.update_tags(SENSOR="ETM+", DATE="2011-03-06")
        dst.update_tags(2, WAVELENGTH="0.56")
    with open_raster(path) as src:
        info = raster_info(src)
    assert isinstance(info, RasterInfo)
    assert (info.width, info.height, info.count) == (40, 30, 3)
    assert info.dtype == "int16"
    assert info.nodata == -9999.0
    assert rasterio.crs.CRS.from_wkt(info.crs).to_epsg() == 32621
    assert info.transform == TRANSFORM
    assert info.profile["dtype"] == "int16" and info.profile["count"] == 3
    assert info.descriptions == ("blue", None, "red")
    assert info.tags["SENSOR"] == "ETM+" and info.tags["DATE"] == "2011-03-06"
    assert info.band_tags[1] == {"WAVELENGTH": "0.56"}
    assert info.band_tags[0] == {} and len(info.band_tags) == 3
    assert info.has_internal_mask is False
    assert info.path.endswith("info.tif")


def test_raster_info_without_crs_or_nodata(tmp_path: Path) -> None:
    path = tmp_path / "bare.tif"
    with rasterio.open(
        path, "w", driver="GTiff", width=8, height=8, count=1, dtype="uint8"
    ) as dst:
        dst.write(np.zeros((1, 8, 8), dtype="uint8"))
    with open_raster(path) as src:
        info = raster_info(src)
    assert info.crs is None
    assert info.nodata is None


@needs(LANDSAT7)
def test_landsat7_file() -> None:
    with open_raster(LANDSAT7) as src:
        info = raster_info(src)
        data = read_window(src, Window(0, 0, info.width, info.height), [1])
    assert info.dtype == "float64"
    assert info.nodata == 32768.0
    assert (info.width, info.height, info.count) == (168, 168, 1)
    missing = np.isnan(data)
    assert 0 < missing.sum() < data.size
    assert not np.any(data[~missing] == 32768.0)  # the nodata tag matches no pixel
    assert info.has_internal_mask is False


# ---------------------------------------------------------------------------------------- bands


def test_select_bands(tmp_path: Path) -> None:
    with open_raster(write_tif(tmp_path / "b.tif", ramp(3, 4, 4))) as src:
        info = raster_info(src)
    assert select_bands(info, None) == [1, 2, 3]
    assert select_bands(info, [3, 1]) == [3, 1]
    with pytest.raises(ConfigError, match=r"--band 5 is out of range: .* has 3 bands \(1\.\.3\)"):
        select_bands(info, [1, 5])
    with pytest.raises(ConfigError, match="--band 0 is out of range"):
        select_bands(info, [0])
    with pytest.raises(ConfigError, match="--band 2 is given more than once"):
        select_bands(info, [2, 2])
    with pytest.raises(ConfigError, match="No band selected"):
        select_bands(info, [])


# ---------------------------------------------------------------------------------------- windows


def test_read_window_inside(tmp_path: Path) -> None:
    data = ramp(2, 10, 12, "uint16")
    with open_raster(write_tif(tmp_path / "w.tif", data)) as src:
        out = read_window(src, Window(2, 3, 5, 4), [2])
    assert out.dtype == np.float64
    assert out.shape == (1, 4, 5)
    np.testing.assert_array_equal(out[0], data[1, 3:7, 2:7].astype("float64"))


def test_read_window_pads_with_nan_off_the_edge(tmp_path: Path) -> None:
    data = ramp(2, 10, 12)
    with open_raster(write_tif(tmp_path / "w.tif", data)) as src:
        top_left = read_window(src, Window(-3, -2, 6, 5), [1, 2])
        bottom_right = read_window(src, Window(9, 8, 6, 5), [2, 1])
        outside = read_window(src, Window(20, 20, 4, 3), [1])
    assert top_left.shape == (2, 5, 6)
    assert np.isnan(top_left[:, :2, :]).all() and np.isnan(top_left[:, :, :3]).all()
    np.testing.assert_array_equal(top_left[:, 2:, 3:], data[:, :3, :3])
    assert bottom_right.shape == (2, 5, 6)
    np.testing.assert_array_equal(bottom_right[0, :2, :3], data[1, 8:10, 9:12])
    np.testing.assert_array_equal(bottom_right[1, :2, :3], data[0, 8:10, 9:12])
    assert np.isnan(bottom_right[:, 2:, :]).all() and np.isnan(bottom_right[:, :, 3:]).all()
    assert outside.shape == (1, 3, 4) and np.isnan(outside).all()


def test_read_window_rejects_fractional_window(tmp_path: Path) -> None:
    with open_raster(write_tif(tmp_path / "w.tif", ramp(1, 4, 4))) as src, pytest.raises(ValueError, match="integer"):
        read_window(src, Window(0.5, 0, 2, 2), [1])


# ---------------------------------------------------------------------------------------- masks


def test_internal_mask_read_as_valid_and_invalid(tmp_path: Path) -> None:
    path = tmp_path / "masked.tif"
    data = ramp(2, 8, 10)
    mask = np.full((8, 10), 255, dtype="uint8")
    mask[2:5, 3:7] = 0
    with rasterio.Env(GDAL_TIFF_INTERNAL_MASK=True), rasterio.open(
        path, "w", driver="GTiff", width=10, height=8, count=2, dtype="float32",
        crs="EPSG:32621", transform=TRANSFORM,
    ) as dst:
        dst.write(data)
        dst.write_mask(mask)
    with open_raster(path) as src:
        info = raster_info(src)
        valid = read_band_masks(src, Window(-1, 0, 12, 8), [1, 2])
    assert info.has_internal_mask is True
    assert valid.dtype == bool and valid.shape == (2, 8, 12)
    expected = mask != 0
    for b in range(2):
        np.testing.assert_array_equal(valid[b, :, 1:11], expected)
    assert not valid[:, :, 0].any() and not valid[:, :, 11].any()  # padding is invalid


def test_alpha_band_counts_as_internal_mask(tmp_path: Path) -> None:
    path = tmp_path / "alpha.tif"
    alpha = np.full((6, 6), 255, dtype="uint8")
    alpha[0, :] = 0
    with rasterio.open(
        path, "w", driver="GTiff", width=6, height=6, count=2, dtype="uint8",
        crs="EPSG:32621", transform=TRANSFORM,
    ) as dst:
        dst.write(np.full((6, 6), 7, dtype="uint8"), 1)
        dst.write(alpha, 2)
        dst.colorinterp = [ColorInterp.gray, ColorInterp.alpha]
    with open_raster(path) as src:
        info = raster_info(src)
        valid = read_band_masks(src, Window(0, 0, 6, 6), [1])
    assert info.has_internal_mask is True
    np.testing.assert_array_equal(valid[0], alpha != 0)


def test_band_masks_without_internal_mask_ignore_nodata(tmp_path: Path) -> None:
    data = np.zeros((1, 5, 5), dtype="uint8")
    path = write_tif(tmp_path / "nd.tif", data, nodata=0)
    with open_raster(path) as src:
        valid = read_band_masks(src, Window(0, 0, 6, 5), [1])
    assert valid[0, :, :5].all()  # nodata is masks.py's job, not the internal mask's
    assert not valid[0, :, 5].any()


# ---------------------------------------------------------------------------------------- nodata


@pytest.mark.parametrize(
    ("nodata", "dtype", "pattern"),
    [
        (-1, "uint8", r"nodata -1 is out of range for a uint8 raster \(valid range 0\.\.255\)"),
        (256, "uint8", r"valid range 0\.\.255"),
        (70000, "uint16", r"70000 is out of range for a uint16 raster \(valid range 0\.\.65535\)"),
        (1.5, "int16", r"nodata 1\.5 cannot be stored in a int16 raster: .* -32768\.\.32767"),
        (math.nan, "int32", r"whole number in -2147483648\.\.2147483647"),
        (1e39, "float32", r"out of range for a float32 raster"),
    ],
)
def test_nodata_out_of_range(nodata: float, dtype: str, pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern) as info:
        check_nodata_in_range(nodata, dtype)
    assert "--nodata" in str(info.value)


@pytest.mark.parametrize(
    ("nodata", "dtype"),
    [(0, "uint8"), (255, "uint8"), (65535, "uint16"), (-32768, "int16"), (-9999.9, "float32"),
     (math.nan, "float32"), (-math.inf, "float32"), (1e300, "float64"), (32768.0, "float64")],
)
def test_nodata_in_range_passes(nodata: float, dtype: str) -> None:
    assert check_nodata_in_range(nodata, dtype) is None

