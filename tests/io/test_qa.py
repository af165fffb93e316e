"""QA bands and generic masks become gaps; masks on other grids are resampled onto the input's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import rasterio
from rasterio.transform import from_origin
from rasterio.windows import Window

from geonp.errors import ConfigError, InputRasterError
from geonp.io.masks import read_mask_file
from geonp.io.qa import decode_gaps, parse_int_list, resolve_classes
from geonp.io.raster import open_raster, raster_info

X0, Y0 = 500000.0, 7000000.0


def write(path: Path, arr: np.ndarray, *, res: float = 30.0, crs: str = "EPSG:32621", nodata=None,
          x0: float = X0, y0: float = Y0) -> Path:
    arr = np.asarray(arr)
    with rasterio.open(path, "w", driver="GTiff", width=arr.shape[1], height=arr.shape[0], count=1,
                       dtype=arr.dtype, crs=crs, transform=from_origin(x0, y0, res, res), nodata=nodata) as dst:
        dst.write(arr[None])
    return path


def info_of(path: Path):
    with open_raster(path) as src:
        return raster_info(src)


def test_landsat_qa_pixel_default_classes() -> None:
    # Real QA_PIXEL codes: 21824 clear land, 21952 water, 22280 high-conf cloud (bits 3, 8, 9),
    # 23888 shadow (bit 4), 1 fill, 21826 dilated cloud (bit 1), 54596 and 55052 cirrus (bit 2).
    codes = np.array([21824, 21952, 22280, 23888, 1, 21826, 54596, 55052], dtype="float64")
    gaps = decode_gaps(codes, kind="landsat-c2")
    np.testing.assert_array_equal(gaps, [False, False, True, True, True, True, True, True])
    only_cloud = decode_gaps(codes, kind="landsat-c2", classes=["cloud"])
    np.testing.assert_array_equal(only_cloud, [False, False, True, False, False, False, False, True])
    snow = decode_gaps(np.array([1 << 5, 1 << 7], float), kind="landsat-c2", classes=["snow"])
    np.testing.assert_array_equal(snow, [True, False])


def test_scl_and_fmask_classes() -> None:
    scl = np.arange(12, dtype="float64")
    np.testing.assert_array_equal(np.flatnonzero(decode_gaps(scl, kind="sentinel2-scl")), [0, 1, 3, 8, 9, 10])
    np.testing.assert_array_equal(
        np.flatnonzero(decode_gaps(scl, kind="sentinel2-scl", classes="cloud,shadow,cirrus")), [3, 8, 9, 10])
    fmask = np.array([0, 1, 2, 3, 4, 255], dtype="float64")
    np.testing.assert_array_equal(decode_gaps(fmask, kind="fmask"), [False, False, True, False, True, True])


def test_generic_values_and_bits() -> None:
    v = np.array([0, 1, 2, 8, 9, np.nan])
    np.testing.assert_array_equal(decode_gaps(v, mask_values=[8, 9]), [0, 0, 0, 1, 1, 0])
    np.testing.assert_array_equal(decode_gaps(v, mask_bits=[0]), [0, 1, 0, 0, 1, 0])
    assert parse_int_list("3, 4", option="--mask-bits", high=63) == (3, 4)
    with pytest.raises(ConfigError, match="--mask-bits 'x' is not a whole number"):
        parse_int_list("x", option="--mask-bits")
    with pytest.raises(ConfigError, match=r"--mask-bits 64 is out of range \(0\.\.63\)"):
        parse_int_list("64", option="--mask-bits", high=63)


def test_unknown_kind_and_class_list_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match=r"qa_kind='modis' is not one of \['landsat-c2', 'sentinel2-scl', 'fmask'\]"):
        resolve_classes("modis", None)
    with pytest.raises(ConfigError, match="'clouds' is not a class of landsat-c2; valid classes: fill,"):
        resolve_classes("landsat-c2", "clouds")


def test_qa_band_read_through_read_mask_file(tmp_path: Path) -> None:
    image = write(tmp_path / "img.tif", np.ones((4, 4), "float32"))
    qa = np.full((4, 4), 21824, "uint16")
    qa[1, 1], qa[2, 3], qa[0, 0] = 22280, 23888, 21952
    path = write(tmp_path / "qa.tif", qa)
    gaps = read_mask_file(path, like=info_of(image), window=Window(0, 0, 4, 4), qa_kind="landsat-c2")
    expect = np.zeros((4, 4), bool)
    expect[1, 1] = expect[2, 3] = True
    np.testing.assert_array_equal(gaps, expect)


def test_mask_with_other_values_hints_at_the_options(tmp_path: Path) -> None:
    image = write(tmp_path / "img.tif", np.ones((4, 4), "float32"))
    path = write(tmp_path / "qa.tif", np.full((4, 4), 21824, "uint16"))
    with pytest.raises(InputRasterError) as info:
        read_mask_file(path, like=info_of(image), window=Window(0, 0, 4, 4))
    text = str(info.value)
    assert "21824" in text and "--qa FILE --qa-kind" in text and "--mask-values" in text
    assert "--mask-bits" in text and "\n" not in text


def test_coarser_mask_covers_every_finer_pixel_under_it(tmp_path: Path) -> None:
    image = write(tmp_path / "img.tif", np.ones((8, 8), "float32"))
    coarse = np.zeros((4, 4), "uint8")
    coarse[1, 2] = 1  # a 60 m gap pixel = 30 m rows 2..3, columns 4..5
    path = write(tmp_path / "mask60.tif", coarse, res=60.0)
    gaps = read_mask_file(path, like=info_of(image), window=Window(0, 0, 8, 8))
    expect = np.zeros((8, 8), bool)
    expect[2:4, 4:6] = True
    np.testing.assert_array_equal(gaps, expect)


def test_scl_at_20m_on_a_30m_grid_any_covering_pixel(tmp_path: Path) -> None:
    image = write(tmp_path / "img.tif", np.ones((4, 6), "float32"))
    scl = np.full((6, 9), 4, "uint8")  # vegetation
    scl[2, 4] = 9  # one 20 m cloud pixel: x 80..100 m, y 40..60 m from the origin
    path = write(tmp_path / "scl.tif", scl, res=20.0)
    gaps = read_mask_file(path, like=info_of(image), window=Window(0, 0, 6, 4), qa_kind="sentinel2-scl")
    # 30 m pixels touched by it: columns 2 (60..90) and 3 (90..120), rows 1 (30..60) only.
    expect = np.zeros((4, 6), bool)
    expect[1, 2:4] = True
    np.testing.assert_array_equal(gaps, expect)


def test_mask_in_another_crs_is_reprojected(tmp_path: Path) -> None:
    image = write(tmp_path / "img.tif", np.ones((8, 8), "float32"))
    # The same area in Web Mercator would need a transform; use UTM 21S (same metres, +10 000 km N).
    mask = np.zeros((8, 8), "uint8")
    mask[3:5, 3:5] = 1
    path = write(tmp_path / "m.tif", mask, crs="EPSG:32721", y0=Y0 + 10_000_000.0)
    gaps = read_mask_file(path, like=info_of(image), window=Window(0, 0, 8, 8))
    assert gaps[3:5, 3:5].all() and gaps.sum() <= 16


def test_geojson_mask(tmp_path: Path) -> None:
    image = write(tmp_path / "img.tif", np.ones((8, 8), "float32"))
    ring = [[X0 + 60, Y0 - 60], [X0 + 150, Y0 - 60], [X0 + 150, Y0 - 120], [X0 + 60, Y0 - 120], [X0 + 60, Y0 - 60]]
    doc = {"type": "Feature", "properties": {}, "geometry": {"type": "Polygon", "coordinates": [ring]},
           "crs": {"type": "name", "properties": {"name": "EPSG:32621"}}}
    path = tmp_path / "clouds.geojson"
    path.write_text(json.dumps(doc))
    gaps = read_mask_file(path, like=info_of(image), window=Window(0, 0, 8, 8))
    expect = np.zeros((8, 8), bool)
    expect[2:4, 2:5] = True
    np.testing.assert_array_equal(gaps, expect)


def test_geojson_without_polygons_is_refused(tmp_path: Path) -> None:
    image = write(tmp_path / "img.tif", np.ones((8, 8), "float32"))
    path = tmp_path / "pts.geojson"
    path.write_text(json.dumps({"type": "Point", "coordinates": [X0, Y0]}))
    with pytest.raises(InputRasterError, match="holds no Polygon or MultiPolygon"):
        read_mask_file(path, like=info_of(image), window=Window(0, 0, 8, 8))
