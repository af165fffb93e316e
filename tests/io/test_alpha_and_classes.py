"""A data band tagged alpha is filled as data; class rasters are refused or filled by nearest class.

Issue 25: a 4-band uint8 image (red, green, blue, near infrared) whose NIR band carries the alpha
colour interpretation lost its NIR band (gaps set to 255, a 3-band std raster); a paletted class
raster lost its colour table and had its classes blended as continuous values.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import rasterio
from rasterio.enums import ColorInterp
from rasterio.transform import from_origin
from rasterio.windows import Window

import geonp
from geonp.errors import ConfigError, InputRasterError
from geonp.io.alpha import SAMPLE_GRID, SAMPLE_SIDE, looks_like_alpha, sample_band, tagged_alpha
from geonp.io.raster import open_raster, raster_info
from geonp.io.validity import plan_output_validity
from geonp.io.windows import read_band_masks

RGBA = [ColorInterp.red, ColorInterp.green, ColorInterp.blue, ColorInterp.alpha]


def _write(path: Path, arr: np.ndarray, *, nodata=None, interp=None, **profile) -> Path:
    with rasterio.open(path, "w", driver="GTiff", width=arr.shape[2], height=arr.shape[1], count=arr.shape[0],
                       dtype=arr.dtype, nodata=nodata, crs="EPSG:32621",
                       transform=from_origin(500000, 7000000, 30, 30), **profile) as dst:
        dst.write(arr)
        if interp is not None:
            dst.colorinterp = interp
    return path


def _rgbn(size: int = 48, seed: int = 0) -> np.ndarray:
    """Red, green, blue, NIR: 237 distinct values in 1..237, like the issue's NIR band."""
    return np.random.default_rng(seed).integers(1, 238, (4, size, size)).astype("uint8")


# ------------------------------------------------------------------------- the alpha decision


def test_looks_like_alpha_on_masks_and_on_data() -> None:
    two = np.array([0, 255, 255, 0])
    assert looks_like_alpha(two) and looks_like_alpha(np.full(9, 255)) and looks_like_alpha(np.array([0, 128, 255]))
    edges = np.r_[np.zeros(300), np.full(2000, 255), np.arange(1, 60)]  # anti-aliased: 61 values, 97 % opaque
    assert looks_like_alpha(edges)
    assert looks_like_alpha(np.array([0.0, 1.0, np.nan]))  # a float alpha in 0..1
    assert not looks_like_alpha(np.arange(0, 237))  # a NIR band: 237 values
    assert not looks_like_alpha(np.r_[np.zeros(5000), np.arange(1, 40)])  # data beside a big collar of zeros


def test_a_large_band_is_decided_from_a_sample(tmp_path: Path) -> None:
    arr = _rgbn(2048)
    path = _write(tmp_path / "big.tif", arr, interp=RGBA, tiled=True, blockxsize=256, blockysize=256)
    with open_raster(path) as src:
        sample = sample_band(src, 4)
        decided = tagged_alpha(src)
    assert sample.size == SAMPLE_GRID * SAMPLE_GRID * SAMPLE_SIDE**2  # 65,536 of 4,194,304 pixels
    assert decided is not None and decided.band == 4 and not decided.is_mask and decided.distinct == 237


def test_a_real_alpha_band_stays_a_mask(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    arr = _rgbn()
    arr[3] = 255
    arr[3, :, :5] = 0  # transparent collar
    path = _write(tmp_path / "rgba.tif", arr, interp=RGBA)
    with caplog.at_level(logging.WARNING), open_raster(path) as src:
        plan = plan_output_validity(src, None, nodata=None)
        info = raster_info(src)
        valid = read_band_masks(src, Window(0, 0, 48, 48), [1])
    assert plan.bands == (1, 2, 3) and plan.alpha_band == 4 and plan.hints == ()
    assert info.has_internal_mask and not valid[0, :, :5].any() and valid[0, :, 5:].all()
    assert "tagged as alpha" not in caplog.text


def test_zeros_of_a_data_band_tagged_alpha_mask_nothing(tmp_path: Path) -> None:
    arr = _rgbn()
    arr[3, 10:20, 10:20] = 0  # GDAL would read these as transparent pixels of bands 1-3
    path = _write(tmp_path / "rgbn.tif", arr, interp=RGBA)
    with open_raster(path) as src:
        assert src.mask_flag_enums[0] == [rasterio.enums.MaskFlags.per_dataset, rasterio.enums.MaskFlags.alpha]
        info = raster_info(src)
        valid = read_band_masks(src, Window(0, 0, 48, 48), [1, 2, 3])
        plan = plan_output_validity(src, None, nodata=None)
    assert info.has_internal_mask is False and valid.all()
    assert plan.bands == (1, 2, 3, 4) and plan.alpha_band is None and plan.count == 4 and plan.write_mask


# ------------------------------------------------------------------------- the fill


def test_nir_band_tagged_alpha_is_filled_like_any_band(tmp_path: Path, tiny_model,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    arr = _rgbn()
    arr[:, 10:20, 10:20] = 0  # a cloud, tagged nodata, in every band
    path = _write(tmp_path / "rgbn.tif", arr, nodata=0, interp=RGBA)
    out = tmp_path / "out.tif"
    with caplog.at_level(logging.WARNING):
        report = geonp.fill_raster(path, out, model=str(tiny_model), device="cpu", workers=1)
    gap = np.zeros((48, 48), bool)
    gap[10:20, 10:20] = True
    with rasterio.open(out) as res, rasterio.open(tmp_path / "out_std.tif") as std:
        filled, sd = res.read(), std.read()
        interp = res.colorinterp
        assert (res.count, std.count) == (4, 4)
    assert report.gap_pixels == report.filled_pixels == 4 * 100
    nir = filled[3][gap]
    assert (nir != 0).all() and (nir != 255).all()  # filled, not rewritten as opaque alpha
    assert abs(float(nir.mean()) - float(arr[3][~gap].mean())) < 40  # near the band's values
    assert (sd[3][gap] > 0).all() and (sd[3][~gap] == 0).all()
    np.testing.assert_array_equal(filled[:, ~gap], arr[:, ~gap])  # observed pixels bit for bit
    assert interp == (ColorInterp.red, ColorInterp.green, ColorInterp.blue, ColorInterp.undefined)
    hint = "band 4 of " + str(path) + " is tagged as alpha but holds 238 distinct values"  # 237 and the gaps' 0
    assert any(h.startswith(hint) and "gdal_edit.py -colorinterp_4 undefined" in h for h in report.hints)
    assert hint in caplog.text


# ------------------------------------------------------------------------- class rasters

PALETTE = {i: (40 * (i % 7), 255 - 30 * (i % 9), 17 * (i % 15), 255) for i in range(256)}


def _classes(path: Path, *, gap: tuple[slice, slice] = (slice(15, 25), slice(15, 25))) -> tuple[Path, np.ndarray]:
    """A 40 x 40 uint8 land-cover raster: four quadrants of classes 1-4 with a gap (nodata 255)."""
    cls = np.ones((40, 40), "uint8")
    cls[:, 20:] = 3
    cls[:20] += 1
    cls[30:, 30:] = 9  # a fifth class in a corner
    truth = cls.copy()
    cls[gap] = 255
    with rasterio.open(path, "w", driver="GTiff", width=40, height=40, count=1, dtype="uint8", nodata=255,
                       crs="EPSG:32621", transform=from_origin(500000, 7000000, 30, 30)) as dst:
        dst.write_colormap(1, PALETTE)
        dst.write(cls[None])
        dst.set_band_description(1, "land cover")
        dst.update_tags(SCHEME="CORINE", CLASS_1="forest")
        dst.update_tags(1, LEGEND="1=forest,2=crop,3=water,4=urban,9=ice")
        dst.update_tags(ns="LANDCOVER", VERSION="2018")
    return path, truth


def _nearest_classes(cls: np.ndarray, observed: np.ndarray, r: int, c: int) -> set[int]:
    """Every class at the smallest distance from pixel (r, c) (brute force: the oracle)."""
    rows, cols = np.nonzero(observed)
    d2 = (rows - r) ** 2 + (cols - c) ** 2
    near = d2 == d2.min()
    return set(cls[rows[near], cols[near]].tolist())


def test_a_raster_with_a_colour_table_is_refused_with_the_way_forward(tmp_path: Path, tiny_model) -> None:
    path, _ = _classes(tmp_path / "lc.tif")
    with pytest.raises(InputRasterError) as err:
        geonp.fill_raster(path, tmp_path / "out.tif", model=str(tiny_model), device="cpu")
    msg = str(err.value)
    assert "has a colour table (band 1), so its values are classes" in msg and "\n" not in msg
    assert "--categorical nearest" in msg and "--categorical continuous" in msg
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lc.tif"]  # nothing written


@pytest.mark.parametrize("block_size", [16, 512])
def test_nearest_class_fill_keeps_classes_colour_table_and_metadata(tmp_path: Path, tiny_model,
                                                                     block_size: int) -> None:
    path, truth = _classes(tmp_path / "lc.tif")
    out = tmp_path / "out.tif"
    report = geonp.fill_raster(path, out, model=str(tiny_model), device="cpu", categorical="nearest",
                               block_size=block_size, workers=1)
    with rasterio.open(path) as src:
        cls, table = src.read(1), src.colormap(1)
    assert table[9] == PALETTE[9]  # (GDAL makes the nodata entry 255 transparent)
    observed = cls != 255
    with rasterio.open(out) as res, rasterio.open(tmp_path / "out_std.tif") as std:
        filled, sd = res.read(1), std.read(1)
        assert res.colormap(1) == table and res.colorinterp == (ColorInterp.palette,)
        assert res.nodata == 255 and res.descriptions == ("land cover",)
        assert res.tags()["SCHEME"] == "CORINE" and res.tags()["CLASS_1"] == "forest"
        assert res.tags(1)["LEGEND"] == "1=forest,2=crop,3=water,4=urban,9=ice"
        assert res.tags(ns="LANDCOVER") == {"VERSION": "2018"}
        assert res.tags()["GEONP_FILL_METHOD"].startswith("nearest class") and "GEONP_MODEL" not in res.tags()
        assert std.tags()["GEONP_CONTENT"].startswith("class fill: no predictive std exists")
    assert report.model == "nearest class" and report.gap_pixels == report.filled_pixels == 100
    assert set(np.unique(filled[~observed]).tolist()) <= {1, 2, 3, 4}  # classes only, none invented
    for r, c in zip(*np.nonzero(~observed), strict=True):
        assert filled[r, c] in _nearest_classes(cls, observed, r, c)
    assert (filled == truth).mean() > 0.99  # ties along the quadrant borders aside
    np.testing.assert_array_equal(filled[observed], cls[observed])
    assert (sd == 0).all()  # class fills: 0, and the tag says they have no std


def test_nearest_class_fill_stops_at_max_distance(tmp_path: Path, tiny_model) -> None:
    path, _ = _classes(tmp_path / "lc.tif", gap=(slice(10, 30), slice(10, 30)))
    geonp.fill_raster(path, tmp_path / "out.tif", model=str(tiny_model), categorical="nearest", max_distance=4,
                      workers=1)
    with rasterio.open(tmp_path / "out.tif") as res, rasterio.open(tmp_path / "out_std.tif") as std:
        filled, sd = res.read(1), std.read(1)
    r, c = np.mgrid[0:40, 0:40]
    depth = np.minimum.reduce([r - 9, 30 - r, c - 9, 30 - c])  # distance (pixels) to the gap's edge
    far = (depth > 4) & (r >= 10) & (r < 30) & (c >= 10) & (c < 30)
    assert (filled[far] == 255).all() and np.isnan(sd[far]).all()  # left nodata, no std
    near = ~far & (r >= 10) & (r < 30) & (c >= 10) & (c < 30)
    assert (filled[near] != 255).all() and (sd[near] == 0).all()


def test_continuous_fills_a_paletted_raster_with_the_model_and_keeps_its_table(tmp_path: Path, tiny_model) -> None:
    path, _ = _classes(tmp_path / "lc.tif")
    report = geonp.fill_raster(path, tmp_path / "out.tif", model=str(tiny_model), device="cpu",
                               categorical="continuous", workers=1)
    with rasterio.open(tmp_path / "out.tif") as res, rasterio.open(tmp_path / "out_std.tif") as std:
        assert res.colormap(1)[9] == PALETTE[9] and res.tags()["GEONP_MODEL"] == "tiny"
        assert (std.read(1)[15:25, 15:25] > 0).all()  # a model's std
    assert report.model == "tiny" and report.filled_pixels == 100


def test_categorical_option_is_checked_and_takes_no_references(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--categorical 'classes' must be auto, nearest or continuous"):
        geonp.FillConfig(categorical="classes")
    path, _ = _classes(tmp_path / "lc.tif")
    with pytest.raises(ConfigError, match="takes no --reference"):
        geonp.fill_raster(path, tmp_path / "out.tif", categorical="nearest", references=[path])


def test_fill_array_and_fill_nearest_class_match_the_file_fill(tmp_path: Path, tiny_model) -> None:
    import rioxarray

    path, _ = _classes(tmp_path / "lc.tif")
    geonp.fill_raster(path, tmp_path / "out.tif", categorical="nearest", model=str(tiny_model), workers=1)
    with rasterio.open(tmp_path / "out.tif") as res, rasterio.open(path) as src:
        from_file, cls = res.read(1), src.read(1)
    filled, std = geonp.fill_array(cls, cls != 255, categorical="nearest", fill_outside=True)
    assert filled.shape == (40, 40) and filled.dtype == np.uint8 and std.dtype == np.float32
    np.testing.assert_array_equal(filled, from_file)
    assert (std == 0).all()
    lazy = rioxarray.open_rasterio(path, chunks={"x": 16, "y": 16})
    ds = geonp.fill(lazy, categorical="nearest", search_radius=30)
    np.testing.assert_array_equal(ds.filled.values[0], from_file)
    assert ds.filled.dtype == np.uint8 and ds.filled.rio.nodata == 255
