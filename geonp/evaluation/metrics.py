"""Scores of a gap fill and of its uncertainty, computed on the hidden pixels.

A fill is good when its values are close (RMSE, MAE, R²) and its std is honest: a Gaussian with
the predicted mean and std should make the truth look like a draw from it. Proper scoring rules
(Gaussian NLL, CRPS) reward both at once; interval coverage and the calibration error check the
std alone, since an over-confident method's 95 % intervals hold far fewer than 95 % of the truths.

All functions take arrays of the true values ``y``, predicted means ``mu`` and predicted stds
``sigma`` (any matching shapes; flattened) and return means over the pixels. Numpy only.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from statistics import NormalDist
from typing import Any

import numpy as np

__all__ = [
    "DEFAULT_LEVELS",
    "METRICS",
    "binned_scores",
    "calibration_curve",
    "calibration_error",
    "crps_gaussian",
    "gaussian_nll",
    "interval_coverage",
    "interval_z",
    "pool_binned",
    "score",
]

#: Central-interval levels of the calibration curve and the calibration error: 5 %, 10 %, ... 95 %.
DEFAULT_LEVELS: tuple[float, ...] = tuple(round(0.05 * i, 2) for i in range(1, 20))

#: Keys of :func:`score`'s result besides ``n``, in table order. The last six need a std.
METRICS: tuple[str, ...] = (
    "rmse",
    "mae",
    "r2",
    "nll",
    "crps",
    "coverage90",
    "coverage95",
    "calibration_error",
    "mean_std",
)

_LOG_2PI = math.log(2.0 * math.pi)
_INV_SQRT_PI = 1.0 / math.sqrt(math.pi)


def _flat(y: Any, mu: Any, sigma: Any | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Flatten to float64 1-D arrays; check sizes and that stds are positive and finite."""
    y_ = np.asarray(y, dtype=np.float64).reshape(-1)
    mu_ = np.asarray(mu, dtype=np.float64).reshape(-1)
    if y_.shape != mu_.shape:
        raise ValueError(f"y has {y_.size} values but mu has {mu_.size}; score matching pixels")
    if sigma is None:
        return y_, mu_, None
    s_ = np.asarray(sigma, dtype=np.float64).reshape(-1)
    if s_.shape != y_.shape:
        raise ValueError(f"y has {y_.size} values but sigma has {s_.size}; score matching pixels")
    if s_.size and not (np.all(np.isfinite(s_)) and s_.min() > 0):
        raise ValueError(
            f"sigma must be positive and finite (min {np.nanmin(s_):.3g}); floor zero stds before "
            "scoring, a zero std makes the likelihood of any error infinite"
        )
    return y_, mu_, s_


def _normal_cdf(x: np.ndarray) -> np.ndarray:
    """Standard normal CDF through erfc (Chebyshev fit, fractional error < 1.2e-7).

    Numerical Recipes' ``erfcc``: numpy has no erf, and this is accurate far beyond what a
    score needs, with no scipy import.
    """
    a = np.abs(x) / math.sqrt(2.0)
    t = 1.0 / (1.0 + 0.5 * a)
    poly = -1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
        -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (
            -0.82215223 + t * 0.17087277))))))))
    erfc = t * np.exp(-a * a + poly)  # erfc(|x| / sqrt 2)
    return np.where(x >= 0, 1.0 - 0.5 * erfc, 0.5 * erfc)


def interval_z(level: float) -> float:
    """Half-width, in stds, of the central Gaussian interval holding ``level`` of the mass.

    Args:
        level: in (0, 1), e.g. 0.95 (gives 1.96).

    Returns:
        ``Phi^-1((1 + level) / 2)``.
    """
    if not 0.0 < float(level) < 1.0:
        raise ValueError(f"interval level {level!r} must be in (0, 1), e.g. 0.95")
    return NormalDist().inv_cdf(0.5 + 0.5 * float(level))


def gaussian_nll(y: Any, mu: Any, sigma: Any) -> float:
    """Mean negative log-likelihood of ``y`` under ``N(mu, sigma²)`` (nats per pixel).

    Args:
        y: true values.
        mu: predicted means, same size.
        sigma: predicted stds (> 0), same size, in the units of ``y``.

    Returns:
        ``mean(0.5 log(2 pi sigma²) + 0.5 ((y - mu) / sigma)²)``; NaN for no pixels.
    """
    y_, mu_, s_ = _flat(y, mu, sigma)
    assert s_ is not None, "sigma was given"
    if not y_.size:
        return float("nan")
    z = (y_ - mu_) / s_
    return float(np.mean(0.5 * _LOG_2PI + np.log(s_) + 0.5 * z * z))


def crps_gaussian(y: Any, mu: Any, sigma: Any) -> float:
    """Mean continuous ranked probability score of ``N(mu, sigma²)`` forecasts (closed form).

    ``CRPS = integral (F(x) - 1{x >= y})² dx = sigma (z (2 Phi(z) - 1) + 2 phi(z) - 1/sqrt(pi))``
    with ``z = (y - mu) / sigma`` (Gneiting and Raftery 2007). It is in the units of ``y`` and
    equals the absolute error when ``sigma -> 0``, so it compares with MAE.

    Args:
        y: true values.
        mu: predicted means, same size.
        sigma: predicted stds (> 0), same size.

    Returns:
        The mean CRPS; NaN for no pixels.
    """
    y_, mu_, s_ = _flat(y, mu, sigma)
    assert s_ is not None, "sigma was given"
    if not y_.size:
        return float("nan")
    z = (y_ - mu_) / s_
    pdf = np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    crps = s_ * (z * (2.0 * _normal_cdf(z) - 1.0) + 2.0 * pdf - _INV_SQRT_PI)
    return float(np.mean(crps))


def interval_coverage(y: Any, mu: Any, sigma: Any, level: float) -> float:
    """Fraction of ``y`` inside the central ``level`` interval ``mu ± z(level) sigma``.

    A calibrated std gives about ``level``; an over-confident one much less.

    Args:
        y: true values.
        mu: predicted means.
        sigma: predicted stds (> 0).
        level: interval level in (0, 1), e.g. 0.95.

    Returns:
        The observed coverage in [0, 1]; NaN for no pixels.
    """
    y_, mu_, s_ = _flat(y, mu, sigma)
    assert s_ is not None, "sigma was given"
    if not y_.size:
        return float("nan")
    return float(np.mean(np.abs(y_ - mu_) <= interval_z(level) * s_))


def calibration_curve(
    y: Any, mu: Any, sigma: Any, levels: Sequence[float] = DEFAULT_LEVELS
) -> tuple[np.ndarray, np.ndarray]:
    """Expected against observed coverage of central intervals, one point per level.

    Args:
        y: true values.
        mu: predicted means.
        sigma: predicted stds (> 0).
        levels: interval levels in (0, 1).

    Returns:
        ``(expected, observed)``, float64 ``[len(levels)]`` each; observed is NaN for no pixels.
    """
    y_, mu_, s_ = _flat(y, mu, sigma)
    assert s_ is not None, "sigma was given"
    expected = np.asarray([float(p) for p in levels], dtype=np.float64)
    if not y_.size:
        return expected, np.full(expected.shape, np.nan)
    abs_z = np.abs(y_ - mu_) / s_
    observed = np.asarray([np.mean(abs_z <= interval_z(p)) for p in expected], dtype=np.float64)
    return expected, observed


def calibration_error(
    y: Any, mu: Any, sigma: Any, levels: Sequence[float] = DEFAULT_LEVELS
) -> float:
    """Mean absolute gap between expected and observed coverage over interval levels.

    0 is perfect; an over-confident std (too small) or an under-confident one both raise it.

    Args:
        y: true values.
        mu: predicted means.
        sigma: predicted stds (> 0).
        levels: interval levels in (0, 1); default 0.05, 0.10, ..., 0.95.

    Returns:
        ``mean |observed - expected|``; NaN for no pixels.
    """
    expected, observed = calibration_curve(y, mu, sigma, levels)
    return float(np.mean(np.abs(observed - expected)))


def _none_if_nan(value: float) -> float | None:
    return None if not math.isfinite(value) else float(value)


def score(
    y: Any, mu: Any, sigma: Any | None = None, *, levels: Sequence[float] = DEFAULT_LEVELS
) -> dict[str, Any]:
    """Every metric of a prediction at once.

    Args:
        y: true values.
        mu: predicted means.
        sigma: predicted stds (> 0), or None for a method without uncertainty (GDAL
            FillNodata): then the std-based metrics are None, never made-up numbers.
        levels: interval levels of the calibration error.

    Returns:
        ``{"n", "rmse", "mae", "r2", "nll", "crps", "coverage90", "coverage95",
        "calibration_error", "mean_std"}``. A metric that is undefined (no pixels; R² of
        constant truths) is None.
    """
    y_, mu_, s_ = _flat(y, mu, sigma)
    out: dict[str, Any] = {"n": int(y_.size), **{k: None for k in METRICS}}
    if not y_.size:
        return out
    err = y_ - mu_
    out["rmse"] = float(np.sqrt(np.mean(err * err)))
    out["mae"] = float(np.mean(np.abs(err)))
    sst = float(np.sum((y_ - y_.mean()) ** 2))
    if y_.size > 1 and sst > 0:
        out["r2"] = 1.0 - float(np.sum(err * err)) / sst
    if s_ is not None:
        out["nll"] = _none_if_nan(gaussian_nll(y_, mu_, s_))
        out["crps"] = _none_if_nan(crps_gaussian(y_, mu_, s_))
        out["coverage90"] = interval_coverage(y_, mu_, s_, 0.90)
        out["coverage95"] = interval_coverage(y_, mu_, s_, 0.95)
        out["calibration_error"] = calibration_error(y_, mu_, s_, levels)
        out["mean_std"] = float(np.mean(s_))
    return out


def binned_scores(
    y: Any, mu: Any, sigma: Any | None, distance: Any, edges: Sequence[float]
) -> list[dict[str, Any]]:
    """Scores per bin of distance to the nearest observed pixel.

    An honest std grows with the distance from data as the error does: a 95 % interval must cover
    about 95 % of the pixels in every bin, not only on average (a std right on average can be far
    too wide next to data and far too narrow deep in a large gap).

    Args:
        y: true values.
        mu: predicted means.
        sigma: predicted stds (> 0), or None (then only ``n``, ``rmse`` and ``mean_abs_error``).
        distance: each pixel's distance (pixels) to its nearest observed pixel.
        edges: increasing bin edges; a pixel is in bin ``i`` when ``edges[i] <= d < edges[i+1]``
            (``inf`` or None as the last edge for an open bin).

    Returns:
        One dict per bin: ``lo``, ``hi`` (None = open), ``n``, ``rmse``, ``mean_abs_error``,
        and with a std ``mean_std``, ``rms_std``, ``nll``, ``coverage90``, ``coverage95``; None
        where a bin is empty.
    """
    y_, mu_, s_ = _flat(y, mu, sigma)
    d = np.asarray(distance, dtype=np.float64).ravel()
    if d.shape != y_.shape:
        raise ValueError(f"distance has {d.size} values for {y_.size} pixels")
    e = [math.inf if v is None else float(v) for v in edges]
    out = []
    for lo, hi in itertools.pairwise(e):
        inside = (d >= lo) & (d < hi)
        n = int(inside.sum())
        row: dict[str, Any] = {"lo": lo, "hi": None if math.isinf(hi) else hi, "n": n, "rmse": None,
                               "mean_abs_error": None}
        if s_ is not None:
            row.update(mean_std=None, rms_std=None, nll=None, coverage90=None, coverage95=None)
        if n:
            err = y_[inside] - mu_[inside]
            row["rmse"] = float(np.sqrt(np.mean(err * err)))
            row["mean_abs_error"] = float(np.mean(np.abs(err)))
            if s_ is not None:
                s = s_[inside]
                row["mean_std"] = float(np.mean(s))
                row["rms_std"] = float(np.sqrt(np.mean(s * s)))
                row["nll"] = _none_if_nan(gaussian_nll(y_[inside], mu_[inside], s))
                row["coverage90"] = interval_coverage(y_[inside], mu_[inside], s, 0.90)
                row["coverage95"] = interval_coverage(y_[inside], mu_[inside], s, 0.95)
        out.append(row)
    return out


#: Per-bin statistics of :func:`binned_scores` that are root mean squares (pooled as squares).
_RMS_KEYS = ("rmse", "rms_std")


def pool_binned(parts: Sequence[Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Pool :func:`binned_scores` results of several parts (dates, masks) with the same edges.

    Means are weighted by each bin's pixel count and root mean squares are pooled as squares, so
    the result equals :func:`binned_scores` on all the parts' pixels together.

    Args:
        parts: one :func:`binned_scores` result per part, each with the same bins.

    Returns:
        One dict per bin, with the keys of the parts' rows (None where no part has a value).

    Raises:
        ValueError: parts with different bins.
    """
    if not parts:
        return []
    out = []
    for rows in zip(*parts, strict=True):
        lo, hi = rows[0]["lo"], rows[0]["hi"]
        if any((r["lo"], r["hi"]) != (lo, hi) for r in rows):
            raise ValueError(f"bins differ between the parts: {[(r['lo'], r['hi']) for r in rows]}")
        pooled: dict[str, Any] = {"lo": lo, "hi": hi, "n": int(sum(r["n"] for r in rows))}
        for key in rows[0]:
            if key in pooled:
                continue
            weighted = [(r["n"], float(r[key])) for r in rows if r["n"] and r.get(key) is not None]
            total = sum(n for n, _ in weighted)
            if not total:
                pooled[key] = None
            elif key in _RMS_KEYS:
                pooled[key] = math.sqrt(sum(n * v * v for n, v in weighted) / total)
            else:
                pooled[key] = sum(n * v for n, v in weighted) / total
        out.append(pooled)
    return out
