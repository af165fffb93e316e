import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import rasterio
from affine import Affine
from rasterio.windows import Window

from geonp.data.synthetic import gp_grid_field
from geonp.errors import ConfigError, MissingDependencyError
from geonp.evaluation import evaluate, simulate_masks
from geonp.evaluation.baselines import fillnodata_baseline, kriging_baseline
from geonp.evaluation.metrics import METRICS

SAMPLE = Path(__file__).resolve().parents[1] / "sample_data" / "landsat8_clean.tif"
ROW_KEYS = {"method", "mask", "band", "n", "unfilled", "seconds", *METRICS}
STD_METRICS = ("nll", "crps", "coverage90", "coverage95", "calibration_error", "mean_std")
NODATA = -9999.0


def _write(path, arr, nodata=NODATA):
    arr = np.asarray(arr, dtype="float32")
    if arr.ndim == 2:
        arr = arr[None]
    with rasterio.open(path, "w", driver="GTiff", width=arr.shape[2], height=arr.shape[1], count=arr.shape[0],
                       dtype="float32", crs="EPSG:32621", transform=Affine(30, 0, 736545, 0, -30, -2796195),
                       nodata=nodata) as dst:
        dst.write(arr)
    return path


@pytest.fixture(scope="module")
def smooth_tif(tmp_path_factory):
    """40x40, 2 bands: smooth GP fields (lengthscale 8) in DN-like units; 6 pixels of band 1 nodata."""
    fields = np.stack([1000 + 100 * gp_grid_field((40, 40), kernel="rbf", lengthscale=8.0, rng=s) for s in (1, 2)])
    fields[0, 5, 5:11] = NODATA
    return _write(tmp_path_factory.mktemp("data") / "smooth.tif", fields)


def _mean_fill_rmse(path, kind, *, coverage, seed):
    with rasterio.open(path) as src:
        values = src.read().astype(float)
    valid = values != NODATA
    (_, is_gap), = simulate_masks(values.shape[1:], [kind], coverage=coverage, seed=seed)
    sq = []
    for b in range(values.shape[0]):
        hidden, context = is_gap & valid[b], ~is_gap & valid[b]
        sq.append((values[b][hidden] - values[b][context].mean()) ** 2)
    return float(np.sqrt(np.mean(np.concatenate(sq))))


def _scores(report):
    return [{k: v for k, v in r.items() if k != "seconds"} for r in report.rows]


def test_simulate_masks_reproducible_from_seed():
    a = simulate_masks((40, 40), ["cloud", "stripe", "random", "mixed"], coverage=0.3, seed=5)
    b = simulate_masks((40, 40), ["cloud", "stripe", "random", "mixed"], coverage=0.3, seed=5)
    c = simulate_masks((40, 40), ["cloud", "stripe", "random", "mixed"], coverage=0.3, seed=6)
    assert [k for k, _ in a] == ["cloud", "stripe", "random", "mixed"]
    for (_, ma), (_, mb), (_, mc) in zip(a, b, c, strict=True):
        np.testing.assert_array_equal(ma, mb)
        assert (ma != mc).any()
        assert abs(ma.mean() - 0.3) < 0.05
    # a kind's mask does not depend on the other kinds asked for
    (_, cloud_alone), = simulate_masks((40, 40), ["cloud"], coverage=0.3, seed=5)
    np.testing.assert_array_equal(cloud_alone, a[0][1])
    with pytest.raises(ConfigError, match="mask_file"):
        simulate_masks((40, 40), ["borrowed"], coverage=0.3, seed=0)


def test_evaluate_is_reproducible_and_excludes_own_nodata(smooth_tif):
    kw = {"models": (), "masks": ("cloud", "random"), "coverage": 0.3}
    r1 = evaluate(smooth_tif, seed=3, **kw)
    r2 = evaluate(smooth_tif, seed=3, **kw)
    r3 = evaluate(smooth_tif, seed=4, **kw)
    assert _scores(r1) == _scores(r2)
    assert _scores(r1) != _scores(r3)
    assert r1.masks == r2.masks
    # hidden pixels = mask & valid: the 6 nodata pixels of band 1 are never scored
    masks = dict(simulate_masks((40, 40), ["cloud", "random"], coverage=0.3, seed=3))
    nodata_px = np.zeros((40, 40), bool)
    nodata_px[5, 5:11] = True
    for m in r1.masks:
        expected = int((masks[m["name"]] & ~nodata_px).sum() + masks[m["name"]].sum())
        assert m["hidden_pixels"] == expected
        band1 = next(r for r in r1.rows if r["mask"] == m["name"] and r["band"] == 1)
        band2 = next(r for r in r1.rows if r["mask"] == m["name"] and r["band"] == 2)
        assert band1["n"] == int((masks[m["name"]] & ~nodata_px).sum())
        assert band2["n"] == int(masks[m["name"]].sum())
        assert band1["rmse"] < 50  # a nodata value (-9999) leaking in would be ~1e4


def test_json_has_every_metric_for_every_row(smooth_tif, tiny_model, tmp_path):
    out, png = tmp_path / "scores.json", tmp_path / "scores.png"
    report = evaluate(smooth_tif, models=(str(tiny_model),), masks=("random",), bands=(2,), kriging=True,
                      device="cpu", json_path=out, plot=png)
    data = json.loads(out.read_text())
    assert data["metrics"] == list(METRICS)
    assert data["methods"] == ["geonp:tiny", "fillnodata", "kriging"]
    assert len(data["rows"]) == 3 * 2  # 3 methods x (band 2 + pooled)
    for row in data["rows"]:
        assert set(row) == ROW_KEYS, row
        assert row["n"] > 100 and row["rmse"] is not None and row["seconds"] >= 0
        if row["method"] == "fillnodata":
            assert all(row[k] is None for k in STD_METRICS)
        else:
            assert all(isinstance(row[k], float) for k in STD_METRICS)
            assert 0 <= row["coverage95"] <= 1
    assert {r["band"] for r in data["rows"]} == {2, "all"}
    assert set(data["calibration_curves"]) == {"geonp:tiny", "kriging"}
    assert len(data["calibration_curves"]["kriging"]["observed"]) == 19
    assert data["masks"][0]["name"] == "random" and data["scored_on"] == "all hidden pixels"
    assert report.rows == data["rows"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    table = report.format_table()
    assert "cal.err" in table.splitlines()[0] and "geonp:tiny" in table
    assert "lowest RMSE" in report.summary()


def test_baselines_beat_mean_fill_on_smooth_field(smooth_tif):
    report = evaluate(smooth_tif, models=(), masks=("cloud", "random"), kriging=True, seed=1)
    for mask in ("cloud", "random"):
        mean_fill = _mean_fill_rmse(smooth_tif, mask, coverage=0.3, seed=1)
        for method in ("fillnodata", "kriging"):
            row = next(r for r in report.rows if r["method"] == method and r["mask"] == mask and r["band"] == "all")
            assert row["rmse"] < 0.5 * mean_fill, (method, mask, row["rmse"], mean_fill)
            assert row["unfilled"] == 0


def test_baselines_run_on_real_landsat_window():
    window = (100, 60, 48, 48)
    report = evaluate(SAMPLE, models=(), masks=("cloud",), window=window, kriging=True, seed=2)
    with rasterio.open(SAMPLE) as src:
        truth = src.read(window=Window(*window)).astype(float)
    (_, is_gap), = simulate_masks((48, 48), ["cloud"], coverage=0.3, seed=2)
    assert report.bands == [1, 2, 3] and report.nodata == 0
    for method in ("fillnodata", "kriging"):
        rows = [r for r in report.rows if r["method"] == method]
        assert [r["band"] for r in rows] == [1, 2, 3, "all"]
        for b, row in enumerate(rows[:3]):
            hidden = truth[b][is_gap]
            mean_fill = float(np.sqrt(np.mean((hidden - truth[b][~is_gap].mean()) ** 2)))
            assert row["n"] == int(is_gap.sum())
            assert row["rmse"] < mean_fill, (method, b, row["rmse"], mean_fill)
    krig = next(r for r in report.rows if r["method"] == "kriging" and r["band"] == "all")
    assert 0.0 <= krig["coverage95"] <= 1.0 and krig["crps"] > 0


def test_baseline_functions_directly():
    field = 50 + 10 * gp_grid_field((32, 32), kernel="rbf", lengthscale=6.0, rng=0)
    valid = np.ones((1, 32, 32), bool)
    valid[0, 10:20, 10:20] = False
    values = np.where(valid, field[None], np.nan)
    fill = fillnodata_baseline(values, valid)
    assert fill.std is None and not fill.unfilled.any()
    np.testing.assert_array_equal(fill.mean[valid], field[None][valid])  # observed kept exactly
    assert np.isfinite(fill.mean).all()
    krig = kriging_baseline(values, valid, window=8, max_points=100)
    assert np.isfinite(krig.mean).all() and (krig.std[~valid] > 0).all() and (krig.std[valid] == 0).all()
    gap = ~valid
    assert np.sqrt(np.mean((krig.mean[gap] - field[None][gap]) ** 2)) < np.std(field[None][gap])


def test_calibrate_writes_std_scale_and_helps(smooth_tif, tiny_model, tmp_path):
    from geonp.filling.arrays import fill_array
    from geonp.model_files.registry import load_model

    model_dir = tmp_path / "tiny_copy"
    shutil.copytree(tiny_model, model_dir)
    report = evaluate(smooth_tif, models=(str(model_dir),), masks=("random",), bands=(2,), fillnodata=False,
                      calibrate=True, device="cpu", seed=0)
    meta = json.loads((model_dir / "config.json").read_text())
    cal = meta["calibration"]
    assert set(cal) == {"std_scale", "fitted_on", "distance_bins"}
    assert len(cal["std_scale"]) == 1 and cal["std_scale"][0] > 0
    bins = cal["distance_bins"]
    assert bins["edges"][0] == 0.0 and bins["edges"][-1] is None and len(bins["factors"]) == len(bins["edges"]) - 1
    fit = report.calibration["geonp:tiny"]
    assert sum(bins["pixels"]) == fit.n_fit
    assert fit.calibration.to_dict() == cal  # what the report holds is what the model file got
    assert "random half" in cal["fitted_on"] and "smooth.tif" in cal["fitted_on"]
    assert json.loads(report.to_json())["calibration"]["geonp:tiny"] == {
        "path": fit.path, **cal, "previous_std_scale": [1.0], "factor": fit.factor, "n_fit": fit.n_fit}
    assert report.methods == ["geonp:tiny", "geonp:tiny+cal"]
    assert "held-out half" in report.scored_on
    base = next(r for r in report.rows if r["method"] == "geonp:tiny" and r["band"] == "all")
    calibrated = next(r for r in report.rows if r["method"] == "geonp:tiny+cal" and r["band"] == "all")
    n_hidden = report.masks[0]["hidden_pixels"]
    assert base["n"] == calibrated["n"] and 0.35 * n_hidden < base["n"] < 0.65 * n_hidden
    assert calibrated["nll"] <= base["nll"] + 1e-12
    assert calibrated["rmse"] == base["rmse"]
    assert calibrated["calibration_error"] < base["calibration_error"] or calibrated["calibration_error"] < 0.05
    # scores by distance to data: every scored pixel falls in one bin
    by_dist = report.binned["geonp:tiny+cal"]["random"]
    assert sum(b["n"] for b in by_dist) == calibrated["n"]
    assert all(b["coverage95"] is None or 0.0 <= b["coverage95"] <= 1.0 for b in by_dist)
    # geonp fill now multiplies its std by the stored scale (the engine applies the distance bins
    # with geonp.filling.calibration.apply_std_calibration; fill_array does not yet)
    assert list(load_model(model_dir).calibration.std_scale) == cal["std_scale"]
    with rasterio.open(smooth_tif) as src:
        values = src.read([2]).astype(float)
    valid = np.ones_like(values, bool)
    valid[0, 10:20, 10:20] = False
    _, std_before = fill_array(values, valid, model=load_model(tiny_model), device="cpu")
    _, std_after = fill_array(values, valid, model=load_model(model_dir), device="cpu")
    gap = ~valid
    np.testing.assert_allclose(std_after[gap], std_before[gap] * cal["std_scale"][0], rtol=1e-5)


def test_calibrate_refuses_builtin_model(smooth_tif, tiny_model, tmp_path, monkeypatch):
    from geonp.model_files import registry

    shutil.copytree(tiny_model, tmp_path / "pretrained" / "mini")
    monkeypatch.setattr(registry, "PRETRAINED", tmp_path / "pretrained")
    with pytest.raises(ConfigError, match="cp -r"):
        evaluate(smooth_tif, models=("mini",), masks=("random",), calibrate=True)
    assert json.loads((tmp_path / "pretrained" / "mini" / "config.json").read_text())["calibration"] is None


def test_window_checks(smooth_tif):
    with pytest.raises(ConfigError, match="--window"):
        evaluate(smooth_tif, models=(), masks=("random",), max_pixels=100)
    with pytest.raises(ConfigError, match="inside"):
        evaluate(smooth_tif, models=(), masks=("random",), window=(30, 0, 20, 20))
    report = evaluate(smooth_tif, models=(), masks=("random",), window=(10, 5, 20, 15), max_pixels=300)
    assert report.window == (10, 5, 20, 15)
    assert report.masks[0]["hidden_pixels"] <= 2 * 300


def test_mask_file_is_scored(smooth_tif, tmp_path):
    gap = np.zeros((40, 40), "float32")
    gap[20:30, 8:30] = 1
    mask = _write(tmp_path / "mask.tif", gap, nodata=None)
    report = evaluate(smooth_tif, models=(), masks=(), mask_file=mask, bands=(2,))
    assert [m["name"] for m in report.masks] == ["file"]
    assert report.masks[0]["hidden_pixels"] == 220
    assert report.rows[0]["n"] == 220


def test_option_errors(smooth_tif, monkeypatch):
    with pytest.raises(ConfigError, match="no method"):
        evaluate(smooth_tif, models=(), fillnodata=False)
    with pytest.raises(ConfigError, match="coverage"):
        evaluate(smooth_tif, models=(), coverage=1.0)
    with pytest.raises(ConfigError, match="no mask"):
        evaluate(smooth_tif, models=(), masks=())
    monkeypatch.setitem(sys.modules, "pykrige", None)
    monkeypatch.setitem(sys.modules, "pykrige.ok", None)
    with pytest.raises(MissingDependencyError, match=r"geonp\[krige\]"):
        evaluate(smooth_tif, models=(), kriging=True)


def test_public_api_geonp_evaluate_stays_callable(smooth_tif):
    import geonp
    import geonp.evaluation

    first = geonp.evaluate(smooth_tif, models=(), masks=("random",), seed=9)
    second = geonp.evaluate(smooth_tif, models=(), masks=("random",), seed=9)
    assert _scores(first) == _scores(second) and first.rows[0]["method"] == "fillnodata"


def test_evaluate_takes_a_config_object_and_keywords_replace_its_fields(smooth_tif):
    from geonp.evaluation import EvaluationConfig

    cfg = EvaluationConfig(models=(), masks=("random",), seed=9)
    by_config = evaluate(smooth_tif, cfg)
    by_keywords = evaluate(smooth_tif, models=(), masks=("random",), seed=9)
    assert _scores(by_config) == _scores(by_keywords)
    other_seed = evaluate(smooth_tif, cfg, seed=10)
    assert other_seed.seed == 10 and _scores(other_seed) != _scores(by_config)
    with pytest.raises(ConfigError, match=r"unknown evaluate option\(s\) modle; valid: models, masks"):
        evaluate(smooth_tif, cfg, modle="default")
    with pytest.raises(ConfigError, match="coverage=1.5 must be between 0 and 1"):
        EvaluationConfig(coverage=1.5)


@pytest.mark.parametrize("calibration,bands,expected", [
    (None, 3, [1.0, 1.0, 1.0]),
    ({"std_scale": [2.0]}, 3, [2.0, 2.0, 2.0]),
    ({"std_scale": [2.0, 3.0, 4.0]}, 3, [2.0, 3.0, 4.0]),
    ({"std_scale": [2.0, 3.0]}, 3, [2.0, 2.0, 2.0]),  # calibrated on other bands: the first factor
    ({"std_scale": [1.5, 2.5]}, 1, [1.5]),
])
def test_calibration_starts_from_the_scale_fill_applies(calibration, bands, expected):
    from types import SimpleNamespace

    from geonp.evaluation.scoring import refitted_scale
    from geonp.model_files.calibration import Calibration

    cal = None if calibration is None else Calibration.from_dict(calibration)
    assert (cal or Calibration()).band_scales(bands) == expected
    ones = [np.full(10, 1.959963984540054**2)] * bands  # |z| = 1.96 everywhere: a factor of 1
    assert refitted_scale(SimpleNamespace(calibration=cal), ones)[1:] == (expected, expected)


def test_draws_score_each_mask_draw_apart_and_calibrate_pools_them(smooth_tif, tiny_model, tmp_path):
    one = evaluate(smooth_tif, models=(), masks=("cloud", "random"), seed=3)
    two = evaluate(smooth_tif, models=(), masks=("cloud", "random"), seed=3, draws=2)
    next_seed = evaluate(smooth_tif, models=(), masks=("cloud", "random"), seed=4)
    assert [m["name"] for m in two.masks] == ["cloud", "random", "cloud#2", "random#2"]
    assert [m["kind"] for m in two.masks] == ["cloud", "random", "cloud", "random"]
    # the first draw is the one-draw run's, the second the next seed's, row for row
    rows = {(r["mask"], r["band"]): r["rmse"] for r in two.rows}
    assert all(rows[(r["mask"], r["band"])] == r["rmse"] for r in one.rows)
    assert all(rows[(r["mask"] + "#2", r["band"])] == r["rmse"] for r in next_seed.rows)
    fits = []
    for draws in (1, 2):
        model_dir = tmp_path / f"tiny{draws}"
        shutil.copytree(tiny_model, model_dir)
        report = evaluate(smooth_tif, models=(str(model_dir),), masks=("random",), bands=(2,), fillnodata=False,
                          calibrate=True, device="cpu", seed=0, draws=draws)
        (fit,) = report.calibration.values()
        fits.append(fit)
    assert fits[1].n_fit > 1.6 * fits[0].n_fit  # both draws' fit halves
    assert "masks random, random#2 at" in fits[1].calibration.fitted_on
    with pytest.raises(ConfigError, match="draws=0"):
        evaluate(smooth_tif, models=(), masks=("random",), draws=0)
