"""Red-team items 4, 6-11 of issue 25: masks that miss the raster, outputs named for another format,
a std path that is the input, a bad model card, projected GeoJSON, huge dry runs, and the frictions
of help(geonp), ``geonp models``, the quicklook and the ``mkdir -p`` hint."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import rasterio
from click.testing import CliRunner
from geonp_cli.main import cli
from rasterio.transform import from_origin
from rasterio.windows import Window

from tests.conftest import smooth_field, write_raster
from tests.hardening._helpers import assert_refused, checksums, invoke, listing, scene

# scene() grids: 30 m pixels from (500000, 7000000) in EPSG:32621, 32 px a side (x 500000..500960).


def _mask_raster(path: Path, *, x0: float, size: int = 32, res: float = 30.0, gap=None) -> Path:
    """A uint8 0/1 mask on its own grid (another origin: resampled onto the input's grid)."""
    arr = np.zeros((size, size), "uint8")
    if gap is not None:
        arr[gap] = 1
    profile = {"driver": "GTiff", "width": size, "height": size, "count": 1, "dtype": "uint8",
               "crs": "EPSG:32621", "transform": from_origin(x0, 7000000, res, res)}
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(arr[None])
    return path


def _polygon(path: Path, x0: float, y0: float, x1: float, y1: float, crs: str | None = None) -> Path:
    ring = [[x0, y0], [x1, y0], [x1, y1], [x0, y1], [x0, y0]]
    doc: dict = {"type": "FeatureCollection",
                 "features": [{"type": "Feature", "properties": {},
                               "geometry": {"type": "Polygon", "coordinates": [ring]}}]}
    if crs is not None:
        doc["crs"] = {"type": "name", "properties": {"name": crs}}
    path.write_text(json.dumps(doc))
    return path


# ------------------------------------------------------------------- 4: masks that miss the raster


@pytest.mark.parametrize("how", ["mask", "qa", "geojson"])
def test_mask_or_qa_that_misses_the_input_is_refused(tmp_path, tiny_model, how):
    src = scene(tmp_path / "in.tif")
    if how == "geojson":
        far = _polygon(tmp_path / "far.geojson", 900000, 6999500, 900300, 6999800, crs="EPSG:32621")
        extra = ["--mask", far]
    else:
        far = _mask_raster(tmp_path / "far.tif", x0=900000, gap=(slice(0, 10), slice(0, 10)))
        extra = ["--mask", far] if how == "mask" else ["--qa", far, "--qa-kind", "fmask"]
    before = listing(tmp_path)
    res = invoke(["fill", src, tmp_path / "out.tif", "--model", tiny_model, *extra])
    line = assert_refused(res, ["far.", "does not overlap the input", "in.tif", "of the same place"])
    assert "900000" in line or "900300" in line  # the bounds that show where the file lies
    assert listing(tmp_path) == before


def test_a_mask_that_overlaps_part_of_the_input_still_adds_its_gaps(tmp_path, tiny_model):
    import geonp

    src = scene(tmp_path / "in.tif")  # nodata gap rows/cols 8..15: 64 px
    # A mask shifted 16 px east: its columns 0..3 at rows 0..3 cover input columns 16..19.
    mask = _mask_raster(tmp_path / "half.tif", x0=500000 + 16 * 30, gap=(slice(0, 4), slice(0, 4)))
    report = geonp.fill_raster(src, tmp_path / "out.tif", gaps=geonp.Gaps(mask=mask), model=str(tiny_model), device="cpu",
                               fill_outside=True)
    assert report.gap_pixels == 64 + 16


# ------------------------------------------------------------- 6: outputs named for another format


def _uint16_scene(path: Path) -> Path:
    arr = np.clip(smooth_field((32, 32)), 1, 65535).astype("uint16")
    arr[8:16, 8:16] = 0
    return write_raster(path, arr, nodata=0)


def test_png_output_gets_a_geotiff_std_as_the_readme_shows(tmp_path, tiny_model):
    src = _uint16_scene(tmp_path / "scene.tif")
    res = CliRunner().invoke(cli, ["fill", str(src), str(tmp_path / "filled.png"), "--model", str(tiny_model)])
    assert res.exit_code == 0, res.output
    with rasterio.open(tmp_path / "filled.png") as out, rasterio.open(tmp_path / "filled_std.tif") as std:
        assert (out.driver, out.dtypes[0]) == ("PNG", "uint16")
        assert (std.driver, std.dtypes[0]) == ("GTiff", "float32")
        filled, sd = out.read(1), std.read(1)
    assert (filled[8:16, 8:16] > 0).all() and (sd[8:16, 8:16] > 0).all()
    assert (sd[:8] == 0).all()
    assert not (tmp_path / "filled_std.png").exists()


@pytest.mark.parametrize(("output", "fmt", "expected"), [
    ("a/filled.tif", None, "a/filled_std.tif"),
    ("a/filled.png", None, "a/filled_std.tif"),
    ("a/filled.jpg", None, "a/filled_std.tif"),
    ("a/filled.nc", None, "a/filled_std.nc"),  # netCDF holds float32: the std keeps the format
    ("a/filled.img", None, "a/filled_std.img"),
    ("a/filled", None, "a/filled_std.tif"),
    ("a/filled.dat", "PNG", "a/filled_std.tif"),
])
def test_default_std_path_is_a_geotiff_unless_the_format_holds_float32(output, fmt, expected):
    import geonp

    assert geonp.default_uncertainty_path(output, fmt) == Path(expected)


@pytest.mark.parametrize(("args", "words"), [
    (["{tmp}/out.png", "--cog"], ["--cog", "OUTPUT", "out.png", "is named .png", "name it out.tif"]),
    (["{tmp}/out.tif", "--cog", "--uncertainty", "{tmp}/std.png"],
     ["--cog", "--uncertainty", "std.png", "is named .png"]),
    (["{tmp}/out.tif", "--cog", "-f", "PNG"], ["--cog", "-f/--format asks for PNG", "drop one of them"]),
])
def test_cog_with_another_format_is_refused(tmp_path, tiny_model, args, words):
    (tmp_path / "in").mkdir()
    src = _uint16_scene(tmp_path / "in" / "scene.tif")
    before = listing(tmp_path)
    res = invoke(["fill", src, *[a.format(tmp=tmp_path) for a in args], "--model", tiny_model])
    assert_refused(res, words)
    assert listing(tmp_path) == before


# ------------------------------------------------------------------- 7: a std path that is the input


def test_default_std_path_that_is_the_input_says_so(tmp_path, tiny_model):
    src = scene(tmp_path / "victim_std.tif")
    protected = checksums([src])
    res = invoke(["fill", src, tmp_path / "victim.tif", "--model", tiny_model])
    line = assert_refused(res, ["default path", "victim_std.tif", "is the input",
                                "would overwrite the input", "--uncertainty PATH"])
    assert "interrupted" not in line and "--overwrite" not in line
    assert checksums([src]) == protected and listing(tmp_path) == ["victim_std.tif"]


def test_uncertainty_that_is_the_input_says_so(tmp_path, tiny_model):
    src = scene(tmp_path / "in.tif")
    res = invoke(["fill", src, tmp_path / "out.tif", "--uncertainty", src, "--model", tiny_model])
    line = assert_refused(res, ["--uncertainty", "in.tif", "is the input", "would overwrite the input",
                                "--uncertainty PATH"])
    assert "OUTPUT" not in line
    assert listing(tmp_path) == ["in.tif"]


# ------------------------------------------------------------------------ 8: a bad model config


@pytest.mark.parametrize(("key", "value"), [("core_size", 0), ("max_context", -3), ("search_radius", 10**9)])
def test_model_card_task_shape_out_of_range_names_the_field(tmp_path, tiny_model, key, value):
    model = shutil.copytree(tiny_model, tmp_path / "model")
    meta = json.loads((model / "config.json").read_text())
    meta.setdefault("card", {})["task_shape"] = {"core_size": 48, "max_context": 64, key: value}
    (model / "config.json").write_text(json.dumps(meta))
    src = scene(tmp_path / "in.tif")
    res = invoke(["fill", src, tmp_path / "out.tif", "--model", model])
    line = assert_refused(res, [f"card.task_shape.{key}={value}", "whole number in", "retrain"])
    assert "bug in geonp" not in res.output and "config.json" in line


# ------------------------------------------------------------- 9: GeoJSON in projected coordinates


def test_projected_geojson_without_crs_says_geojson_is_lon_lat(tmp_path, tiny_model):
    src = scene(tmp_path / "in.tif")
    gj = _polygon(tmp_path / "clouds.geojson", 500300, 6999400, 500600, 6999700)  # UTM, no crs member
    res = invoke(["fill", src, tmp_path / "out.tif", "--model", tiny_model, "--mask", gj])
    line = assert_refused(res, ["clouds.geojson", "RFC 7946", "longitude/latitude", "not degrees",
                                "ogr2ogr -t_srs EPSG:4326", '"crs"'])
    assert "PROJ" not in line and "500300" in line


def test_projected_geojson_with_a_crs_member_masks_its_pixels(tmp_path, tiny_model):
    import geonp

    src = scene(tmp_path / "in.tif")
    # columns 20..23, rows 20..23 (pixel centres 500615..500705, 6999295..6999385)
    gj = _polygon(tmp_path / "clouds.geojson", 500600, 6999280, 500720, 6999400, crs="EPSG:32621")
    report = geonp.fill_raster(src, tmp_path / "out.tif", gaps=geonp.Gaps(mask=gj), model=str(tiny_model), device="cpu",
                               fill_outside=True)
    assert report.gap_pixels == 64 + 16


# --------------------------------------------------------------------------------- 10: dry runs


def test_dry_run_halo_is_clipped_to_the_raster(tmp_path, tiny_model):
    src = scene(tmp_path / "in.tif", size=40)
    res = invoke(["fill", src, tmp_path / "out.tif", "--model", tiny_model, "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "block_pixels_with_halo: 40x40" in res.output
    assert "counts:" not in res.output  # a small raster is counted exactly


def _sparse_raster(path: Path, size: int, data: tuple[slice, slice], gap: tuple[slice, slice]) -> Path:
    """A tiled, sparse uint16 raster (nodata 0) with data in one area and a gap inside it."""
    rows, cols = data
    h, w = rows.stop - rows.start, cols.stop - cols.start
    arr = np.clip(smooth_field((h, w)), 1, 65535).astype("uint16")
    arr[gap[0].start - rows.start:gap[0].stop - rows.start, gap[1].start - cols.start:gap[1].stop - cols.start] = 0
    profile = {"driver": "GTiff", "width": size, "height": size, "count": 1, "dtype": "uint16", "nodata": 0,
               "crs": "EPSG:32621", "transform": from_origin(500000, 7000000, 30, 30), "tiled": True,
               "blockxsize": 256, "blockysize": 256, "SPARSE_OK": "TRUE", "compress": "deflate"}
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(arr[None], window=Window(cols.start, rows.start, w, h))
    return path


def _counts(path: Path, rows=None):
    from geonp.filling import pool, survey
    from geonp.io.gap_sources import Gaps, build_gap_sources
    from geonp.io.raster import open_raster, raster_info

    with open_raster(path) as src:
        info = raster_info(src)
        sources = build_gap_sources(src, Gaps(), bands=[1], nodata=0.0, fill_outside=True)
        outside = [0]
        reader = survey.GapReader(src, info, [1], 0.0, sources.extra_gaps, sources.fillable)
        if rows is None:
            counts = survey.count_gaps(reader, pool.plan_blocks(info.height, info.width, 512), 16, outside)
        else:
            counts = survey.estimate_gaps(reader, rows, 16, outside)
    return (*counts, outside[0]), info


def test_huge_raster_counts_are_estimated_from_rows(tmp_path):
    from geonp.filling import survey

    path = _sparse_raster(tmp_path / "big.tif", 2000, (slice(500, 1500), slice(200, 1800)),
                          (slice(700, 1100), slice(400, 900)))
    exact, info = _counts(path)
    assert exact[:2] == (2000 * 2000 - 1000 * 1600 + 400 * 500, 1000 * 1600 - 400 * 500)
    assert survey.sample_rows(info) is None  # 4 Mpx: counted exactly by default
    rows = survey.sample_rows(info, exact_pixels=10**6, sample_pixels=100 * 2000)
    assert rows is not None and len(rows) == 100 and rows[0] == 10 and rows[-1] == 1990
    estimate, _ = _counts(path, rows)
    for got, want in zip(estimate, exact, strict=True):
        assert abs(got - want) <= 0.03 * want, (estimate, exact)


def test_estimate_falls_back_to_counting_when_the_sample_sees_no_data(tmp_path):
    from geonp.filling import survey

    # data only in rows 3..6, between the sampled rows 10, 30, 50...
    path = _sparse_raster(tmp_path / "thin.tif", 2000, (slice(3, 7), slice(0, 2000)), (slice(4, 5), slice(0, 10)))
    exact, info = _counts(path)
    rows = survey.sample_rows(info, exact_pixels=10**6, sample_pixels=100 * 2000)
    assert 3 not in rows and 6 not in rows
    estimate, _ = _counts(path, rows)
    assert estimate == exact and exact[1] == 4 * 2000 - 10


def test_plan_says_when_counts_are_estimated(tmp_path):
    import dataclasses

    from geonp.filling import pool, survey
    from geonp.filling.tile_tasks import TileOptions
    from geonp.io.raster import open_raster, raster_info
    from geonp.tasks.context import ContextSpec

    with open_raster(scene(tmp_path / "in.tif")) as src:
        info = dataclasses.replace(raster_info(src), width=100_000, height=100_000)
    blocks = pool.plan_blocks(info.height, info.width, 512)
    opts = TileOptions(tile_size=48, overlap=16, context=ContextSpec(search_radius=512))
    plan = survey.plan(info, [1], blocks, opts, 2500, 4, 1, sampled_rows=335)
    assert plan["counts"].startswith("estimated from 335 evenly spaced rows of 100000")
    halo = 512 + 2 * 16 + 48
    assert plan["block_pixels_with_halo"] == f"{512 + 2 * halo}x{512 + 2 * halo}"  # inner blocks: the whole halo
    assert "counts" not in survey.plan(info, [1], blocks, opts, 2500, 4, 1)


# -------------------------------------------------------------------------------- 11: frictions


def test_dir_and_help_list_the_public_api_without_importing_torch():
    code = ("import sys, geonp; names = dir(geonp); "
            "print(','.join(n for n in names if not n.startswith('_'))); "
            "print('torch' in sys.modules, 'rasterio' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    names, imported = out.splitlines()
    assert {"fill_raster", "fill", "fill_array", "load_model", "train", "evaluate", "FillConfig"} <= set(
        names.split(","))
    assert "importlib" not in names.split(",") and imported == "False False"
    import pydoc

    import geonp

    text = pydoc.render_doc(geonp, renderer=pydoc.plaintext)
    assert "fill_raster(input" in text and "load_model(name_or_path" in text


def test_models_prints_scores_as_short_lines_and_tables():
    import geonp

    res = CliRunner().invoke(cli, ["models"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    start = lines.index("  scores (geonp models --json prints every field):")
    scores = lines[start + 1:lines.index(next(ln for ln in lines[start:] if not ln.startswith("  ")))]
    assert scores and max(len(ln) for ln in scores) <= 100
    assert not any('{"' in ln for ln in lines)
    card = next(c for c in geonp.list_models() if c["name"] == "default")
    cloud = next(ln.split() for ln in scores if ln.split()[:1] == ["cloud"])
    header = next(ln.split() for ln in scores if ln.split()[:1] == ["rmse"])
    assert float(cloud[1 + header.index("rmse")]) == pytest.approx(card["scores"]["masks"]["cloud"]["rmse"], rel=1e-3)


def test_quicklook_of_a_raster_with_a_collar_warns_nothing(tmp_path, tiny_model):
    import geonp
    from geonp.io.quicklook import _mean_over_bands, write_quicklook

    arr = smooth_field((48, 48)).astype("float32")
    r, c = np.mgrid[0:48, 0:48]
    arr[c < 10 + r // 4] = -9999  # the collar: a straight swath edge
    arr[20:26, 30:36] = -9999
    src = write_raster(tmp_path / "collar.tif", arr, nodata=-9999)
    geonp.fill_raster(src, tmp_path / "out.tif", model=str(tiny_model), device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        write_quicklook(tmp_path / "q.png", src, tmp_path / "out.tif", tmp_path / "out_std.tif", bands=[1],
                        nodata=-9999.0)
    assert (tmp_path / "q.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    sd = np.array([[[np.nan, 1.0, 0.0]], [[np.nan, np.nan, 2.0]]])
    np.testing.assert_array_equal(_mean_over_bands(sd), [[np.nan, 1.0, 1.0]])


def test_mkdir_hint_is_shell_quoted(tmp_path, tiny_model):
    src = scene(tmp_path / "in.tif")
    missing = tmp_path / "my results" / "june"
    res = invoke(["fill", src, missing / "out.tif", "--model", tiny_model])
    line = assert_refused(res, ["does not exist"])
    assert f"(mkdir -p '{missing}')" in line
