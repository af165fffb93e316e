import functools
import math

import numpy as np
import pytest

from geonp.data.synthetic import gp_grid_field, gp_posterior
from geonp.evaluation.metrics import (
    DEFAULT_LEVELS,
    METRICS,
    binned_scores,
    calibration_curve,
    calibration_error,
    crps_gaussian,
    gaussian_nll,
    interval_coverage,
    interval_z,
    pool_binned,
    score,
)

_trapezoid = getattr(np, "trapezoid", None) or np.trapz  # numpy < 2 has only trapz

NOISE = 0.05  # small observation noise: without it the exact posterior std is only jitter
# E[NLL] - NLL has sd ~ sqrt(0.5 / n_hidden) ~ 0.03 for ~690 hidden pixels; 0.1 is > 3 sd
NLL_TOLERANCE = 0.1


@functools.cache
def _gp_task(seed: int):
    """48x48 RBF field (lengthscale 6) with noise; 30 % random pixels hidden; exact posterior."""
    rng = np.random.default_rng(seed)
    field = gp_grid_field((48, 48), kernel="rbf", lengthscale=6.0, rng=rng)
    y = field + NOISE * rng.standard_normal(field.shape)
    hidden = rng.random((48, 48)) < 0.3
    xc = np.argwhere(~hidden).astype(float)
    xt = np.argwhere(hidden).astype(float)
    mu, sd = gp_posterior(xc, y[~hidden], xt, kernel="rbf", lengthscale=6.0, noise=NOISE)
    return y[hidden], mu, sd


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_gp_posterior_scores_as_theory_says(seed):
    y, mu, sd = _gp_task(seed)
    s = score(y, mu, sd)
    assert s["n"] == y.size > 600
    assert 0.90 <= s["coverage95"] <= 0.99
    assert 0.84 <= s["coverage90"] <= 0.96
    assert s["calibration_error"] < 0.05
    expected_nll = float(np.mean(0.5 * np.log(2 * np.pi * sd**2) + 0.5))
    assert abs(s["nll"] - expected_nll) < NLL_TOLERANCE
    # the posterior is far better than the prior mean 0
    assert s["rmse"] < 0.25 * float(np.std(y))
    assert s["r2"] > 0.9


@pytest.mark.parametrize("seed", [0, 1])
def test_over_confident_predictor_is_flagged(seed):
    y, mu, sd = _gp_task(seed)
    honest = score(y, mu, sd)
    over = score(y, mu, sd / 4)
    assert over["coverage95"] < 0.6
    assert over["calibration_error"] > 0.2
    assert over["nll"] > honest["nll"] + 1.0
    # same means: the point scores do not change
    assert over["rmse"] == honest["rmse"] and over["mae"] == honest["mae"]


def _crps_by_integral(y: float, mu: float, sigma: float) -> float:
    def cdf(x):
        return 0.5 * (1 + np.vectorize(math.erf)((x - mu) / (sigma * math.sqrt(2))))

    lo, hi = min(y, mu) - 12 * sigma, max(y, mu) + 12 * sigma
    left = np.linspace(lo, y, 200_001)
    right = np.linspace(y, hi, 200_001)
    return float(_trapezoid(cdf(left) ** 2, left) + _trapezoid((cdf(right) - 1) ** 2, right))


@pytest.mark.parametrize(
    "y,mu,sigma", [(0.0, 0.0, 1.0), (1.3, -0.2, 0.7), (-5.0, 2.0, 3.0), (10.0, 10.5, 0.05), (7.0, 1.0, 0.5)]
)
def test_crps_matches_numerical_integral(y, mu, sigma):
    expected = _crps_by_integral(y, mu, sigma)
    assert crps_gaussian([y], [mu], [sigma]) == pytest.approx(expected, rel=1e-5, abs=1e-8)


def test_crps_known_values():
    # CRPS(N(0,1), 0) = (sqrt 2 - 1) / sqrt pi; with a tiny sigma CRPS -> |y - mu|
    assert crps_gaussian([0.0], [0.0], [1.0]) == pytest.approx((math.sqrt(2) - 1) / math.sqrt(math.pi), rel=1e-6)
    assert crps_gaussian([3.0], [1.0], [1e-9]) == pytest.approx(2.0, rel=1e-6)
    # the mean over pixels
    assert crps_gaussian([0.0, 3.0], [0.0, 1.0], [1.0, 1e-9]) == pytest.approx(
        0.5 * ((math.sqrt(2) - 1) / math.sqrt(math.pi) + 2.0), rel=1e-6
    )


def test_nll_closed_form():
    assert gaussian_nll([1.0], [0.0], [2.0]) == pytest.approx(0.5 * math.log(2 * math.pi * 4) + 0.5 * 0.25)


def test_interval_coverage_and_curve_on_standard_normal():
    rng = np.random.default_rng(0)
    y = rng.standard_normal(200_000)
    zero, one = np.zeros_like(y), np.ones_like(y)
    assert interval_z(0.95) == pytest.approx(1.959964, abs=1e-6)
    assert interval_coverage(y, zero, one, 0.95) == pytest.approx(0.95, abs=0.003)
    assert interval_coverage([0.0, 1.0, 3.0], [0.0] * 3, [1.0] * 3, 0.9) == pytest.approx(2 / 3)
    expected, observed = calibration_curve(y, zero, one)
    np.testing.assert_allclose(expected, DEFAULT_LEVELS)
    np.testing.assert_allclose(observed, expected, atol=0.005)
    assert calibration_error(y, zero, one) < 0.005
    # an under-confident std is flagged too
    assert calibration_error(y, zero, 3 * one) > 0.2


def test_score_without_std_has_no_made_up_numbers():
    y = np.array([1.0, 2.0, 3.0, 4.0])
    mu = np.array([1.5, 2.0, 2.5, 4.0])
    s = score(y, mu)
    assert set(s) == {"n", *METRICS}
    assert s["n"] == 4
    assert s["rmse"] == pytest.approx(math.sqrt(0.5 / 4))
    assert s["mae"] == pytest.approx(0.25)
    assert s["r2"] == pytest.approx(1 - 0.5 / 5.0)
    for key in ("nll", "crps", "coverage90", "coverage95", "calibration_error", "mean_std"):
        assert s[key] is None


def test_score_edge_cases():
    empty = score([], [], [])
    assert empty["n"] == 0 and all(empty[k] is None for k in METRICS)
    assert score([2.0, 2.0], [1.0, 3.0], [1.0, 1.0])["r2"] is None  # constant truth
    with pytest.raises(ValueError, match="sigma must be positive"):
        score([1.0], [1.0], [0.0])
    with pytest.raises(ValueError, match="mu has"):
        score([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="level"):
        interval_z(1.0)


def test_pooled_bins_equal_the_bins_of_all_pixels_together():
    rng = np.random.default_rng(3)
    edges = [0.0, 1.0, 4.0, 16.0, None]
    parts = []
    for n in (300, 50, 0):  # an empty part counts for nothing
        y, mu = rng.normal(size=n), rng.normal(size=n)
        parts.append((y, mu, rng.uniform(0.5, 2.0, n), rng.uniform(0, 30, n)))
    together = binned_scores(*(np.concatenate(a) for a in zip(*parts, strict=True)), edges)
    pooled = pool_binned([binned_scores(*p, edges) for p in parts])
    assert [(r["lo"], r["hi"], r["n"]) for r in pooled] == [(r["lo"], r["hi"], r["n"]) for r in together]
    for a, b in zip(pooled, together, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            assert (a[key] is None and b[key] is None) or a[key] == pytest.approx(b[key], rel=1e-9), key
    no_std = pool_binned([binned_scores(p[0], p[1], None, p[3], edges) for p in parts])
    assert "coverage95" not in no_std[0] and no_std[0]["rmse"] == pytest.approx(together[0]["rmse"])
    with pytest.raises(ValueError, match="bins differ"):
        pool_binned([binned_scores(*parts[0], edges), binned_scores(*parts[0], [0.0, 2.0, 4.0, 16.0, None])])
    assert pool_binned([]) == []
