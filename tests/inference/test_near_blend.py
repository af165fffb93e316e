"""The near blend: the fill pulled toward GDAL FillNodata's next to data, per cell of gap pixels."""

import dataclasses
import json

import numpy as np
import pytest
from rasterio.fill import fillnodata

from geonp.errors import ConfigError
from geonp.evaluation.near_fit import fit_near_blend_on_validation
from geonp.filling.arrays import fill_array
from geonp.filling.calibration import distance_to_observed
from geonp.filling.near_blend import (
    NEAR_ESTIMATE_REACH,
    NEAR_ESTIMATES,
    NearPixels,
    apply_near_blend,
    fit_near_blend,
    near_estimates,
    observed_neighbours,
)
from geonp.model_files.calibration import Calibration, NearBlend
from geonp.model_files.registry import load_model
from tests.conftest import smooth_field, write_raster

EDGES, NEIGHBOURS = (0.0, 1.5, 3.0, 6.0, 12.0), (0, 3, 5, 7, 9)


def _blend(weights: tuple[float, ...], factor: float, names: tuple[str, ...] = NEAR_ESTIMATES) -> NearBlend:
    return NearBlend(names, EDGES, NEIGHBOURS, ((weights,) * 4,) * 4, ((factor,) * 4,) * 4)


def _ring_mean_by_loop(values, observed, d2):
    h, w = values.shape
    out = np.full((h, w), np.nan)
    for r in range(h):
        for c in range(w):
            around = [values[r + dr, c + dc] for dr in range(-4, 5) for dc in range(-4, 5)
                      if dr * dr + dc * dc == d2 and 0 <= r + dr < h and 0 <= c + dc < w and observed[r + dr, c + dc]]
            if around:
                out[r, c] = np.mean(around)
    return out


def _neighbours_by_loop(observed):
    h, w = observed.shape
    out = np.zeros((h, w), int)
    for r in range(h):
        for c in range(w):
            out[r, c] = sum(observed[r + dr, c + dc] for dr in (-1, 0, 1) for dc in (-1, 0, 1)
                            if (dr or dc) and 0 <= r + dr < h and 0 <= c + dc < w)
    return out


def test_observed_neighbours_counts_the_eight_around_each_pixel():
    observed = np.random.default_rng(0).random((2, 13, 17)) < 0.6
    counts = observed_neighbours(observed)
    for b in range(2):
        np.testing.assert_array_equal(counts[b], _neighbours_by_loop(observed[b]))


def test_near_estimates_are_gdal_fillnodata_and_ring_means():
    rng = np.random.default_rng(1)
    values = smooth_field((80, 90), seed=1)[None]
    observed = rng.random(values.shape) < 0.7
    observed[0, 20:60, 10:80] = False  # a 40 px hole: its middle lies within GDAL's reach
    est = near_estimates(values, observed)
    assert est.shape == (len(NEAR_ESTIMATES), 1, 80, 90)
    centre = values[0][observed[0]].mean()
    gdal = fillnodata(np.where(observed[0], values[0] - centre, np.nan).astype(np.float32),
                      mask=observed[0].astype(np.uint8), max_search_distance=float(NEAR_ESTIMATE_REACH),
                      smoothing_iterations=0).astype(np.float64) + centre
    np.testing.assert_allclose(est[0, 0][~observed[0]], gdal[~observed[0]], rtol=0, atol=1e-3)
    np.testing.assert_array_equal(est[0, 0][observed[0]], values[0][observed[0]])
    for k, name in enumerate(NEAR_ESTIMATES[1:], 1):
        np.testing.assert_allclose(est[k, 0], _ring_mean_by_loop(values[0], observed[0], int(name[4:])),
                                   rtol=1e-6, equal_nan=True)
    assert np.isnan(est[1, 0, 40, 45]) and np.isfinite(est[1, 0, 20, 10:80]).mean() > 0.5  # ring 1: none deep in
    # a region's estimates read the pixels around it: those of the whole array, cut
    part = near_estimates(values, observed, region=(15, 70, 5, 40))
    np.testing.assert_allclose(part, est[:, :, 15:70, 5:40], rtol=0, atol=1e-3, equal_nan=True)
    # farther than the reach from any observed pixel: GDAL does not estimate
    far = np.zeros((1, 100, 100), bool)
    far[0, :, :3] = True
    est = near_estimates(np.ones((1, 100, 100)), far, ("gdal",))
    assert np.isnan(est[0, 0, :, 60:]).all() and np.allclose(est[0, 0, :, 3:20], 1.0)
    with pytest.raises(ConfigError, match="near blend estimate 'kriging' is unknown; this geonp knows"):
        near_estimates(values, observed, ("kriging",))


def test_fit_recovers_the_weights_of_a_known_mixture_per_cell():
    rng = np.random.default_rng(2)
    n = 40_000
    mean = rng.normal(size=n)
    estimates = rng.normal(size=(2, n))
    estimates[1, rng.random(n) < 0.2] = np.nan  # no value: adds nothing
    distance = rng.choice([1.0, 2.0, 4.0, 8.0, 20.0], size=n)
    neighbours = np.where(distance < 1.5, rng.integers(0, 9, n), 0)
    truth = np.stack([np.where(distance < 1.5, 0.4, np.where(distance < 3, 0.1, 0.0)),
                      np.where(distance < 1.5, -0.7, 0.0)])
    y = mean + np.sum(truth * np.nan_to_num(estimates - mean), axis=0) + rng.normal(scale=0.05, size=n)
    blend = fit_near_blend(NearPixels(y, mean, np.full(n, 0.05), estimates, distance, neighbours),
                           names=("gdal", "ring1"), min_pixels=500)
    w = np.asarray(blend.weights)
    np.testing.assert_allclose(w[0, :, 0], 0.4, atol=0.01)  # every neighbour bin of the first distance bin
    np.testing.assert_allclose(w[0, :, 1], -0.7, atol=0.01)
    np.testing.assert_allclose(w[1, 0], [0.1, 0.0], atol=0.01)
    np.testing.assert_allclose(w[2:, 0], 0.0, atol=0.01)
    # the std factor puts 95 % of the corrected errors within 1.96 std: 1 for an exact std
    np.testing.assert_allclose(np.asarray(blend.std_factors)[:, 0], 1.0, atol=0.05)
    # cells without pixels (a pixel 1.5 px away has no 8-neighbour) keep weights 0 and factor 1
    assert blend.pixels[1][3] == 0 and blend.weights[1][3] == (0.0, 0.0) and blend.std_factors[1][3] == 1.0
    assert sum(map(sum, blend.pixels)) == int((distance < 12).sum())  # 20 px: beyond the last edge


def test_near_blend_round_trips_and_refuses_bad_tables():
    cal = Calibration(std_scale=(1.1,), near_blend=_blend((0.25, -1.0, 2.0, 0.0, 0.0, 0.0, 0.5), 1.5))
    again = Calibration.from_dict(json.loads(json.dumps(cal.to_dict())))
    assert again == cal and again.needs_distance and not again.is_identity
    bad = cal.to_dict()
    bad["near_blend"]["weights"][0][0] = [1.0, 2.0]
    with pytest.raises(ConfigError, match=r"near_blend.weights=.*4 rows of 4 lists of 7 weights \(one per estimate\)"):
        Calibration.from_dict(bad)
    bad = cal.to_dict()
    bad["near_blend"]["std_factors"] = [[1.0]]
    with pytest.raises(ConfigError, match="near_blend.std_factors=.*4 rows of 4 positive factors"):
        Calibration.from_dict(bad)


def test_apply_changes_only_filled_pixels_within_the_last_edge():
    rng = np.random.default_rng(3)
    raw = smooth_field((60, 60), seed=3)[None]
    observed = np.ones((1, 60, 60), bool)
    observed[0, 10:50, 10:50] = False
    region = (5, 55, 5, 55)
    dist = distance_to_observed(observed)[:, 5:55, 5:55]
    mean = np.where(observed[:, 5:55, 5:55], np.nan, 4000.0 + rng.normal(size=(1, 50, 50)))
    std = np.where(np.isfinite(mean), 10.0, np.nan)
    out_mean, out_std = apply_near_blend(mean, std, raw, observed, region, dist, _blend((1.0,), 2.0, ("gdal",)))
    est = near_estimates(raw, observed, ("gdal",))[0, :, 5:55, 5:55]
    near = np.isfinite(mean) & (dist < 12)
    np.testing.assert_allclose(out_mean[near], est[near])
    np.testing.assert_array_equal(out_std[near], 20.0)
    far = np.isfinite(mean) & (dist >= 12)
    assert far.sum() > 100
    np.testing.assert_array_equal(out_mean[far], mean[far])
    np.testing.assert_array_equal(out_std[far], 10.0)
    assert np.isnan(out_mean[~np.isfinite(mean)]).all()


def test_a_fill_applies_the_models_near_blend():
    lm = load_model("default")
    plain = dataclasses.replace(lm, calibration=dataclasses.replace(lm.calibration, near_blend=None))
    # weights 1 on ring 1 and 0.5 on GDAL, -0.5 on ring 2: next to data the fill is ring 1's mean
    # plus half the difference of GDAL's and ring 2's (where ring 2 has no value, half GDAL's step)
    gdal = dataclasses.replace(lm, calibration=dataclasses.replace(
        lm.calibration, near_blend=_blend((0.5, 1.0, -0.5), 3.0, ("gdal", "ring1", "ring2"))))
    values = smooth_field((64, 64), seed=4)[None]
    valid = np.ones(values.shape, bool)
    valid[0, 16:48, 8:56] = False
    m0, s0 = fill_array(values, valid, model=plain)
    m1, s1 = fill_array(values, valid, model=gdal)
    dist = distance_to_observed(valid)
    near, far = ~valid & (dist < 12), ~valid & (dist >= 12)
    est = near_estimates(values, valid, ("gdal", "ring1", "ring2"))
    step = np.nan_to_num(est - m0[None])
    np.testing.assert_allclose(m1[near], (m0 + 0.5 * step[0] + step[1] - 0.5 * step[2])[near], rtol=0, atol=1e-6)
    edge = near & (dist < 1.5) & np.isfinite(est[2])
    np.testing.assert_allclose(m1[edge], (0.5 * est[0] + est[1] - 0.5 * est[2])[edge], rtol=0, atol=1e-6)
    np.testing.assert_allclose(s1[near], 3.0 * s0[near], rtol=1e-5)
    np.testing.assert_array_equal(m1[far], m0[far])
    np.testing.assert_array_equal(s1[far], s0[far])
    np.testing.assert_array_equal(m1[valid], values[valid])


def test_fit_on_validation_stores_the_blend_and_keeps_the_std_calibration(tmp_path):
    import shutil

    from geonp.model_files.registry import PRETRAINED

    model = shutil.copytree(PRETRAINED / "default", tmp_path / "model")
    before = load_model(model).calibration
    rng = np.random.default_rng(5)
    field = np.stack([smooth_field((96, 96), seed=s) + rng.normal(scale=30, size=(96, 96)) for s in (5, 6)])
    raster = write_raster(tmp_path / "clear.tif", field.astype(np.uint16), nodata=0)
    blend = fit_near_blend_on_validation(model, raster, window=(0, 0, 96, 96), nodata=0, bands=None, seeds=(0,))
    after = load_model(model).calibration
    assert after.near_blend == blend and blend.pixels is not None and sum(map(sum, blend.pixels)) > 5000
    assert after.std_scale == before.std_scale and after.distance_bins == before.distance_bins
    assert np.isfinite(np.asarray(blend.weights)).all() and np.asarray(blend.weights).shape == (4, 4, 7)
    assert "near blend fitted on" in after.fitted_on


def test_blending_in_chunks_of_pixels_changes_nothing(monkeypatch):
    from geonp.filling import near_blend

    rng = np.random.default_rng(6)
    raw = np.stack([smooth_field((70, 80), seed=s) for s in (6, 7)])
    observed = rng.random(raw.shape) < 0.6
    region = (6, 64, 3, 77)
    dist = distance_to_observed(observed)[:, 6:64, 3:77]
    mean = np.where(observed[:, 6:64, 3:77], np.nan, 4000.0 + rng.normal(size=dist.shape))
    std = np.where(np.isfinite(mean), 10.0, np.nan)
    blend = _blend((0.3, 0.8, -0.4, 0.1, -0.1, 0.2, -0.05), 1.5)
    whole = apply_near_blend(mean, std, raw, observed, region, dist, blend)
    monkeypatch.setattr(near_blend, "_CHUNK", 97)
    chunks = apply_near_blend(mean, std, raw, observed, region, dist, blend)
    # GDAL works in float32 about each box's own mean: 1e-3 DN apart at most
    np.testing.assert_allclose(chunks[0], whole[0], rtol=0, atol=1e-3, equal_nan=True)
    np.testing.assert_array_equal(chunks[1], whole[1])
    assert np.isfinite(whole[0]).sum() == np.isfinite(mean).sum()
    est = near_estimates(raw, observed, region=region)
    weights, factor = blend.weights_and_factor(dist, observed_neighbours(observed)[:, 6:64, 3:77])
    np.testing.assert_array_equal(whole[1], std * factor)
    expect = mean + np.sum(weights * np.nan_to_num(est - mean[None]), axis=0)
    np.testing.assert_allclose(whole[0], expect, rtol=0, atol=1e-3, equal_nan=True)
