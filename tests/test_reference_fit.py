"""The reference regression of multi-date fills (geonp.filling.references): lines, their order, the prior."""

import dataclasses

import numpy as np
import pytest

from geonp.filling.references import (
    MIN_SHARED_PIXELS,
    LineStats,
    ReferenceLines,
    fit_regression,
)
from geonp.filling.similar_pixels import (
    ESTIMATE_REACH,
    RESIDUAL_RADIUS,
    residual_correction,
    similar_pixel_correction,
)


def _field(rng, shape=(2, 40, 50)):
    return rng.normal(1000.0, 200.0, shape)


def _rmse(estimate, truth, where):
    return np.sqrt(np.mean((estimate[where] - truth[where]) ** 2))


def test_lines_recover_each_bands_slope_intercept_and_residual_scale():
    rng = np.random.default_rng(0)
    x = _field(rng)
    noise = rng.normal(0, 5.0, x.shape)
    y = np.stack([0.8 * x[0] + 300.0, 1.5 * x[1] - 200.0]) + noise
    ok = np.ones(x.shape, dtype=bool)
    stats = LineStats.empty(1, 2)
    stats.add(y, ok, [(x, ok)])
    lines = stats.lines()
    assert lines is not None and lines.order == (0,)
    assert lines.slope[0] == pytest.approx((0.8, 1.5), abs=0.005)
    assert lines.intercept[0] == pytest.approx((300.0, -200.0), abs=6.0)
    assert lines.residual_std[0] == pytest.approx((5.0, 5.0), rel=0.05)
    assert lines.shared == ((2000, 2000),)


def test_lines_summed_block_by_block_equal_lines_fitted_at_once():
    rng = np.random.default_rng(1)
    x, y = _field(rng), _field(rng)
    y[0] = np.minimum(y[0], 1100.0)  # a ceiling many pixels share, in some blocks only
    y_ok = rng.random(y.shape[1:]) > 0.3
    x_ok = rng.random(y.shape[1:]) > 0.2
    obs, ref_ok = np.broadcast_to(y_ok, y.shape), np.broadcast_to(x_ok, y.shape)
    whole = LineStats.empty(1, 2)
    whole.add(y, obs, [(x, ref_ok)])
    blocks = LineStats.empty(1, 2)
    for rows in (slice(0, 13), slice(13, 40)):
        for cols in (slice(0, 31), slice(31, 50)):
            blocks.add(y[:, rows, cols], obs[:, rows, cols], [(x[:, rows, cols], ref_ok[:, rows, cols])])
    np.testing.assert_allclose(blocks.sums, whole.sums, rtol=1e-12)
    np.testing.assert_allclose(blocks.gram, whole.gram, rtol=1e-12)
    assert blocks.sums[0, 0, 0] == blocks.gram[0, 0, 0] == (y_ok & x_ok).sum()
    np.testing.assert_array_equal(blocks.extremes, whole.extremes)
    assert blocks.extremes[0, 2, 1] == (y[0][y_ok] == 1100.0).sum() > 100
    by_blocks, at_once = blocks.lines(), whole.lines()
    assert by_blocks.saturated == at_once.saturated == ((-np.inf, 1100.0), (-np.inf, np.inf))
    np.testing.assert_allclose(by_blocks.band_coef, at_once.band_coef, rtol=1e-9)
    np.testing.assert_allclose(by_blocks.slope, at_once.slope, rtol=1e-9)


def test_band_lines_read_a_target_band_off_the_reference_band_that_carries_it():
    rng = np.random.default_rng(5)
    x = _field(rng)
    ok = np.ones(x.shape, dtype=bool)
    # the target's first band follows the reference's second band, not its own
    y = np.stack([0.5 * x[1] + 0.1 * x[0] + 100.0, 2.0 * x[1] - 300.0]) + rng.normal(0, 5.0, x.shape)
    lines = fit_regression(y, ok, [(x, ok)])
    coef = np.asarray(lines.band_coef[0])
    assert coef.shape == (2, 3)
    # slopes shrunk a little towards the own band's line (ridge 0.1 on standardised bands)
    assert coef[0, 2] == pytest.approx(0.5, rel=0.12) and abs(coef[0, 1]) < 0.15
    assert coef[1, 2] == pytest.approx(2.0, rel=0.01) and abs(coef[1, 1]) < 0.01
    assert lines.band_std[0][0] < 0.2 * lines.residual_std[0][0]  # the own band's line misses what band 2 says
    own = lines.line(0, x)
    np.testing.assert_allclose(lines.band_line(0, x)[1], own[1], atol=0.1 * lines.residual_std[0][1])
    # with one band, the band line is the own band's line exactly (the ridge shrinks towards it)
    one = fit_regression(y[:1], ok[:1], [(x[1:], ok[1:])])
    np.testing.assert_allclose(one.band_line(0, x[1:]), one.line(0, x[1:]), rtol=1e-9)


def test_a_reference_with_a_constant_band_or_too_few_pixels_observed_in_every_band_has_no_band_lines():
    rng = np.random.default_rng(6)
    x = _field(rng)
    x[1] = 7.0
    ok = np.ones(x.shape, dtype=bool)
    lines = fit_regression(x * 2.0, ok, [(x, ok)])
    assert lines.band_coef == ((),) and lines.band_line(0, x) is None
    patchy = ok.copy()
    patchy[0, ::2] = False
    patchy[1, 1::2] = False  # every pixel misses a band
    lines = fit_regression(_field(rng), ok, [(_field(rng), patchy)])
    assert lines.order == (0,) and lines.band_coef == ((),)


def test_the_best_fitting_reference_comes_first_and_others_fill_where_it_is_missing():
    rng = np.random.default_rng(2)
    truth = _field(rng)
    ok = np.ones(truth.shape, dtype=bool)
    good, poor = truth * 0.5 + 10.0, truth + rng.normal(0, 80.0, truth.shape)
    good_ok = ok.copy()
    good_ok[:, :10] = False  # the good reference is cloudy in the first 10 rows
    stats = LineStats.empty(2, 2)
    stats.add(truth, ok, [(poor, ok), (good, good_ok)])
    lines = stats.lines()
    assert lines.order == (1, 0)  # best fit first, whatever the order given
    prior, has = lines.predict([(poor, ok), (good, good_ok)])
    assert has.all()
    np.testing.assert_allclose(prior[:, 10:], truth[:, 10:], atol=1e-6)  # the good line, exactly
    first = (lines.intercept[0][0] + lines.slope[0][0] * poor[0, :10])
    np.testing.assert_allclose(prior[0, :10], first)  # the poor one's line where the good one is missing
    assert "reference 2: " in lines.describe().split(";")[0]


def test_pixels_no_reference_sees_have_no_prior_and_too_few_shared_pixels_give_no_line():
    rng = np.random.default_rng(3)
    truth = _field(rng, (1, 20, 20))
    ok = np.ones(truth.shape, dtype=bool)
    seen = np.zeros(truth.shape, dtype=bool)
    seen[:, :5] = True  # 100 shared pixels
    stats = LineStats.empty(2, 1)
    few = np.zeros(truth.shape, dtype=bool)
    few.flat[: MIN_SHARED_PIXELS - 1] = True
    stats.add(truth, ok, [(truth, seen), (truth, few)])
    lines = stats.lines()
    assert lines.order == (0,)  # the second shares too few pixels to be used
    prior, has = lines.predict([(truth, seen), (truth, few)])
    assert has.sum() == 100 and np.isnan(prior[~has]).all()
    only_few = LineStats.empty(1, 1)
    only_few.add(truth, ok, [(truth, few)])
    assert only_few.lines() is None


def test_reference_lines_survive_pickling_for_the_workers():
    import pickle

    lines = ReferenceLines(slope=((1.0,),), intercept=((0.0,),), order=(0,), residual_std=((2.0,),), shared=((50,),),
                           reference_std=((1.0,),))
    assert pickle.loads(pickle.dumps(lines)) == lines


def _classes(rng, shape=(40, 50)):
    """Three land covers in patches of 5x5 pixels, each with its own reference value and change."""
    cover = rng.integers(0, 3, (shape[0] // 5 + 1, shape[1] // 5 + 1)).repeat(5, 0).repeat(5, 1)[:shape[0], :shape[1]]
    reference = np.array([1000.0, 1500.0, 2000.0])[cover]
    target = np.array([1500.0, 900.0, 1800.0])[cover]  # not a line of the reference
    return np.stack([reference, 0.5 * reference]), np.stack([target, target + 100.0])


def _lines_of(target, ok, references):
    return fit_regression(target, ok, references)


def test_similar_pixels_recover_a_change_that_differs_by_land_cover_where_a_line_cannot():
    rng = np.random.default_rng(4)
    reference, target = _classes(rng)
    ok = np.ones(target.shape, dtype=bool)
    ok[:, 10:25, 10:30] = False  # a cloud on the target date
    ref_ok = np.ones(target.shape, dtype=bool)
    lines = _lines_of(target, ok, [(reference, ref_ok)])
    line, _ = lines.predict([(reference, ref_ok)])
    estimate, std, has = lines.estimate(target, ok, [(reference, ref_ok)], ~ok.all(axis=0))
    gap = ~ok
    np.testing.assert_array_equal(has, gap)
    assert np.sqrt(np.mean((line[gap] - target[gap]) ** 2)) > 200  # one line per band cannot follow three covers
    np.testing.assert_allclose(estimate[gap], target[gap], atol=1e-6)  # each cover's own change, from its look-alikes
    assert std[gap].max() < 1e-6  # its look-alikes agree
    assert np.isnan(estimate[ok]).all() and np.isnan(std[ok]).all()


def test_the_std_is_the_spread_of_the_similar_pixels_errors():
    rng = np.random.default_rng(7)
    reference = np.full((1, 60, 60), 1000.0)  # every pixel looks alike: the nearest ones are chosen
    target = 2.0 * reference + rng.normal(0.0, 50.0, reference.shape)
    ok = np.ones(target.shape, dtype=bool)
    ok[:, 20:40, 20:40] = False
    lines = _lines_of(target, ok, [(reference, ok | True)])
    estimate, std, _ = lines.estimate(target, ok, [(reference, ok | True)], ~ok[0])
    gap = ~ok
    assert np.median(std[gap]) == pytest.approx(50.0, rel=0.25)
    assert np.abs(estimate[gap] - 2000.0).max() < 3 * 50.0  # the mean of 20 errors of std 50
    z = (target[gap] - estimate[gap]) / std[gap]
    assert 0.9 < np.mean(np.abs(z) < 1.96) <= 1.0


def test_every_reference_observing_a_pixel_gives_an_estimate_weighed_by_its_inverse_variance():
    rng = np.random.default_rng(8)
    truth = rng.normal(1000.0, 100.0, (1, 60, 60))
    ok = np.ones(truth.shape, dtype=bool)
    ok[:, 20:40, 20:40] = False
    gap = ~ok
    sharp, blurred, other = (truth + rng.normal(0.0, sd, truth.shape) for sd in (30.0, 150.0, 30.0))
    seen, unseen = ok | True, ok & False
    cloudy = seen.copy()
    cloudy[:, 20:30] = False  # the sharp reference is cloudy over the gap's top half

    def fill(*references):
        return fit_regression(truth, ok, list(references)).estimate(truth, ok, list(references), gap[0])

    def rmse(estimate, where=gap):
        return _rmse(estimate, truth, where)

    sharp_alone, sharp_std, _ = fill((sharp, seen), (blurred, unseen))
    blurred_alone, blurred_std, _ = fill((sharp, unseen), (blurred, seen))
    both, both_std, has = fill((sharp, seen), (blurred, seen))
    np.testing.assert_array_equal(has, gap)
    # the blurred reference's estimates spread 3x wider, so they weigh about 1/9 of the sharp one's
    assert np.median(blurred_std[gap]) > 2.5 * np.median(sharp_std[gap])
    assert rmse(both) < 1.05 * rmse(sharp_alone) and rmse(both) < 0.5 * rmse(blurred_alone)
    assert np.all((both_std[gap] >= sharp_std[gap] - 1e-9) & (both_std[gap] <= blurred_std[gap] + 1e-9))
    # two equally sharp references with independent errors: their weighted mean beats either
    other_alone, _, _ = fill((sharp, unseen), (other, seen))
    pair, _, _ = fill((sharp, seen), (other, seen))
    assert rmse(pair) < 0.85 * min(rmse(sharp_alone), rmse(other_alone))
    # where one reference is cloudy, the other's estimate alone, std and all
    part, part_std, part_has = fill((sharp, cloudy), (blurred, seen))
    np.testing.assert_array_equal(part_has, gap)
    top = np.zeros(gap.shape, dtype=bool)
    top[:, 20:30, 20:40] = True
    np.testing.assert_allclose(part[top], blurred_alone[top], rtol=1e-12)
    np.testing.assert_allclose(part_std[top], blurred_std[top], rtol=1e-12)
    assert rmse(part, gap & ~top) < 0.6 * rmse(blurred_alone, gap & ~top)


def test_the_estimate_averages_the_own_band_line_and_the_band_line_each_corrected():
    rng = np.random.default_rng(9)
    reference = rng.normal(1000.0, 200.0, (2, 60, 60))
    # the target's first band is the reference's second, plus a change the lines cannot know
    truth = np.stack([reference[1], reference[1] * 0.8]) + rng.normal(0.0, 20.0, (2, 60, 60))
    truth[0] += 0.3 * (reference[0] - 1000.0)
    ok = np.ones(truth.shape, dtype=bool)
    ok[:, 20:40, 20:40] = False
    gap, seen = ~ok[0], np.ones(truth.shape, dtype=bool)
    lines = fit_regression(truth, ok, [(reference, seen)])
    own_only = dataclasses.replace(lines, band_coef=(), band_std=())
    both, both_std, has = lines.estimate(truth, ok, [(reference, seen)], gap)
    own, own_std, _ = own_only.estimate(truth, ok, [(reference, seen)], gap)
    np.testing.assert_array_equal(has[0], gap)
    error = {name: _rmse(e[0], truth[0], gap) for name, e in (("both", both), ("own", own))}
    # the own band's line sees band 1 only; the band line carries band 2 (and its std is small)
    assert lines.band_std[0][0] < 0.2 * lines.residual_std[0][0]
    # the similar pixels (looked up on both bands) mend much of the own band's line; the average gets
    # closer to the noise the target adds (std 20)
    assert error["both"] < 0.85 * error["own"] and error["both"] < 1.25 * 20.0
    assert np.median(both_std[0][gap]) < np.median(own_std[0][gap])


def test_estimates_stay_within_a_saturated_bands_ceiling_and_floor():
    rng = np.random.default_rng(10)
    reference = rng.normal(1000.0, 300.0, (2, 60, 60))
    line = 10.0 * reference  # the second band's target, unsaturated, reaches past 12,000
    truth = np.stack([np.clip(line[0], 7000.0, 12000.0), line[1]])  # a sensor that stops at 7,000 and 12,000
    ok = np.ones(truth.shape, dtype=bool)
    ok[:, 20:40, 20:40] = False
    gap, seen = ~ok[0], np.ones(truth.shape, dtype=bool)
    lines = fit_regression(truth, ok, [(reference, seen)])
    assert lines.saturated == ((7000.0, 12000.0), (-np.inf, np.inf))
    assert lines.describe().endswith("; band 1 saturated: estimates kept within 7000 to 12000")
    estimate, _, has = lines.estimate(truth, ok, [(reference, seen)], gap)
    assert has[:, gap].all()
    assert estimate[0][gap].max() == 12000.0 and estimate[0][gap].min() == 7000.0
    # the unsaturated band has no ceiling (it reaches past the other band's)
    assert estimate[1][gap].max() > 15000.0
    unclipped, _, _ = dataclasses.replace(lines, saturated=()).estimate(truth, ok, [(reference, seen)], gap)
    np.testing.assert_array_equal(estimate[1], unclipped[1])
    np.testing.assert_array_equal(estimate[0], np.clip(unclipped[0], 7000.0, 12000.0))
    assert _rmse(estimate[0], truth[0], gap) < 0.8 * _rmse(unclipped[0], truth[0], gap)


def test_a_pixel_is_never_its_own_similar_pixel():
    rng = np.random.default_rng(5)
    reference = rng.normal(1000.0, 100.0, (1, 30, 30))
    target = 2.0 * reference
    target[0, 15, 15] += 500.0  # this pixel alone departs from the line
    ok = np.ones(target.shape, dtype=bool)
    lines = _lines_of(target, ok, [(reference, ok)])
    estimate, _, _ = lines.estimate(target, ok, [(reference, ok)], np.ones((30, 30), dtype=bool))
    line, _ = lines.predict([(reference, ok)])
    # its estimate is the line plus its look-alikes' small errors, not its own value
    assert abs(estimate[0, 15, 15] - target[0, 15, 15]) > 400
    assert abs(estimate[0, 15, 15] - line[0, 15, 15]) < 50


def test_an_estimate_depends_only_on_pixels_within_its_reach():
    rng = np.random.default_rng(6)
    reference, target = _classes(rng, (290, 300))
    target = target + rng.normal(0.0, 20.0, target.shape)
    ok = rng.random(target.shape[1:]) > 0.3
    ok[100:220, 100:230] = False  # a wide cloud: its middle has no similar pixel within 30 px
    ok = np.broadcast_to(ok, target.shape)
    ref_ok = np.broadcast_to(rng.random(target.shape[1:]) > 0.1, target.shape)
    lines = _lines_of(target, ok, [(reference, ref_ok)])
    at = np.zeros(target.shape[1:], dtype=bool)
    at[::3, ::3] = True
    at[150:170, 155:175] = True  # the cloud's middle, every pixel
    whole, whole_std, has = lines.estimate(target, ok, [(reference, ref_ok)], at)
    r0, c0 = 20, 15  # a crop; its pixels farther than the reach from its cut edges see all they need
    crop = (slice(None), slice(r0, None), slice(c0, None))
    part, part_std, part_has = lines.estimate(target[crop], ok[crop], [(reference[crop], ref_ok[crop])],
                                              at[crop[1:]], origin=(r0, c0))
    inner = (slice(None), slice(ESTIMATE_REACH, None), slice(ESTIMATE_REACH, None))
    np.testing.assert_array_equal(part_has, has[crop])
    np.testing.assert_allclose(part[inner], whole[crop][inner], rtol=1e-12)
    np.testing.assert_allclose(part_std[inner], whole_std[crop][inner], rtol=1e-9)
    assert np.abs(part - whole[crop])[has[crop]].max() > 1.0  # near the cut the search was truncated
    middle = np.zeros(target.shape, dtype=bool)
    middle[:, 150:170, 155:175] = True
    middle &= ref_ok
    assert np.isfinite(whole[middle]).all() and np.isfinite(whole_std[middle]).all()
    # the middle of the cloud found its land cover's change farther away: the line alone is far off
    line, _ = lines.predict([(reference, ref_ok)])
    err, line_err = np.abs(whole[middle] - target[middle]), np.abs(line[middle] - target[middle])
    assert np.sqrt(np.mean(err ** 2)) < 0.2 * np.sqrt(np.mean(line_err ** 2))


def test_the_search_grows_where_few_pixels_are_near_and_gives_up_beyond_its_reach():
    spectra = np.zeros((1, 5, 300))
    error = np.full((1, 5, 300), np.nan)
    error[0, :, :21] = 7.0  # known errors in the first 21 columns
    error[0, 0, 200:202] = 1.0  # and two pixels far from them
    at = np.zeros((5, 300), dtype=bool)
    for col in (2, 60, 201, 299):
        at[2, col] = True
    correction, spread = similar_pixel_correction(spectra, error, at)
    assert correction[0, 2, 2] == pytest.approx(7.0) and spread[0, 2, 2] == pytest.approx(0.0)
    assert correction[0, 2, 60] == pytest.approx(7.0)  # none within 30 px: found within 120
    assert np.isnan(correction[0, 2, 201]) and np.isnan(spread[0, 2, 201])  # only two within reach
    assert np.isnan(correction[0, 2, 299])  # none within reach: the line alone
    assert np.isnan(correction[0, ~at]).all()


def test_a_clear_pixel_alone_in_a_wide_cloud_draws_no_halo_around_it():
    rng = np.random.default_rng(12)
    reference, target = _classes(rng, (150, 150))  # each cover changed its own way: no line follows
    ok = np.ones(target.shape, dtype=bool)
    ok[:, 20:130, 20:130] = False
    ok[:, 75, 75] = True  # one clear pixel, with no other within 30 px
    refs = [(reference, ok | True)]
    lines = fit_regression(target, ok, refs)
    line, _ = lines.predict(refs)
    assert np.abs(line[:, 75, 75] - target[:, 75, 75]).max() > 100  # the line alone errs there
    estimate, _, _ = lines.estimate(target, ok, refs, ~ok[0])
    # its similar pixels, like its neighbours', are searched as far as 120 px: no error to spread
    near = np.zeros(target.shape, dtype=bool)
    near[:, 67:84, 67:84] = True
    near &= ~ok
    np.testing.assert_allclose(estimate[near], target[near], atol=1e-6)


def test_the_residual_correction_is_whole_at_a_gaps_edge_and_fades_to_nothing_inside():
    residual = np.full((1, 5, 40), np.nan)
    residual[0, :, :10] = 10.0  # the estimates on observed pixels are 10 too low
    correction = residual_correction(residual)[0, 2]
    inside = correction[10:]  # the gap, from its edge inwards
    assert inside[0] > 9.0  # beside the observed pixels: nearly all of it
    assert 4.0 < inside[3] < 8.0  # 2 sigma in: a part
    assert np.all(np.diff(inside[:RESIDUAL_RADIUS]) < 0)
    np.testing.assert_array_equal(inside[RESIDUAL_RADIUS:], 0.0)  # beyond its radius: nothing


def test_an_anomaly_beside_a_gap_carries_into_its_edge_where_similar_pixels_alone_miss_it():
    rng = np.random.default_rng(11)
    reference = rng.uniform(900.0, 1100.0, (1, 40, 60))
    target = 2.0 * reference
    target[:, :, 20:40] += 300.0  # a field that changed more, straddling the gap's edge
    ok = np.ones(target.shape, dtype=bool)
    ok[:, :, 30:50] = False
    refs = [(reference, ok | True)]
    lines = fit_regression(target, ok, refs)
    corrected, corrected_std, has = lines.estimate(target, ok, refs, ~ok[0])
    alone, alone_std, alone_has = lines.estimate(target, ok, refs, ~ok[0], residual=False)
    np.testing.assert_array_equal(has, alone_has)
    np.testing.assert_array_equal(corrected_std, alone_std)  # the correction leaves the std alone
    edge, deep = (slice(None), slice(None), 30), (slice(None), slice(None), slice(38, 42))
    corrected_error = np.abs(corrected[edge] - target[edge]).mean()  # 91 when written
    alone_error = np.abs(alone[edge] - target[edge]).mean()  # 152
    assert alone_error > 0.4 * 300
    # the observed pixels' sparser search (_RING_SEARCHES) finds more of the field close by than
    # the gap pixels' does, so their errors show only part of what the gap pixels miss: 29 with
    # the same search as the gap pixels, 91 with the sparser one
    assert corrected_error < 0.7 * alone_error
    np.testing.assert_array_equal(corrected[deep], alone[deep])  # 9 px or more from both edges: nothing
