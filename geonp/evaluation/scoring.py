"""Score one method's fill on one mask: collect the scored pixels, compute rows, curves and bins.

Every method is scored on the same hidden pixels; a target a method could not reach is scored
as the band's observed mean (and std) and counted as ``unfilled``. Stds are floored at a tiny
fraction of the band's spread (a zero std would make the likelihood of any error infinite).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from geonp.evaluation.metrics import DEFAULT_LEVELS, binned_scores, calibration_curve, score
from geonp.filling.calibration import DISTANCE_BIN_EDGES, std_factor
from geonp.model_files.calibration import Calibration, DistanceBins

__all__ = [
    "Scored",
    "band_stats",
    "binned",
    "collect",
    "curves_and_scatter",
    "fallback",
    "refitted_scale",
    "scaled",
    "score_rows",
]


#: Largest number of (|error|, std) pairs kept per method for the error-vs-std scatter.
_SCATTER_POINTS = 4000
#: Stds are floored at this fraction of the band's spread before scoring (a zero std would make
#: the likelihood of any error infinite; kriging variances can round to 0).
_STD_FLOOR = 1e-6


@dataclass
class Scored:
    """One method on one mask: per band the truths, means and stds at the scored pixels."""

    y: list[np.ndarray]
    mu: list[np.ndarray]
    sigma: list[np.ndarray] | None
    unfilled: list[int]
    seconds: float
    fit_z2: list[np.ndarray] | None = None  # per band z² on the calibration half (geonp only)
    dist: list[np.ndarray] | None = None  # per band distance to data of the scored pixels
    fit_dist: list[np.ndarray] | None = None  # ... and of the calibration half


def fallback(
    mean: np.ndarray, std: np.ndarray | None, targets: np.ndarray, stats: list[tuple[float, float]]
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """Put the band's observed mean (and std) on targets a method left without a value."""
    unfilled = targets & ~np.isfinite(mean)
    if std is not None:
        unfilled |= targets & ~np.isfinite(std)
    if unfilled.any():
        mean = mean.copy()
        std = None if std is None else std.copy()
        for b, (mu_b, sd_b) in enumerate(stats):
            mean[b][unfilled[b]] = mu_b
            if std is not None:
                std[b][unfilled[b]] = sd_b
    return mean, std, unfilled


def band_stats(values: np.ndarray, context: np.ndarray) -> list[tuple[float, float]]:
    """Per band the mean and std of the context (std 1 where it would be 0)."""
    stats = []
    for b in range(values.shape[0]):
        v = values[b][context[b]]
        sd = float(v.std()) if v.size > 1 else 0.0
        stats.append((float(v.mean()) if v.size else 0.0, sd if sd > 0 else 1.0))
    return stats


def collect(
    values: np.ndarray,
    mean: np.ndarray,
    std: np.ndarray | None,
    unfilled: np.ndarray,
    scored: np.ndarray,
    stats: list[tuple[float, float]],
    seconds: float,
    fit: np.ndarray | None = None,
    dist: np.ndarray | None = None,
) -> Scored:
    """Keep the truths, means and floored stds of the scored pixels (and of the fit half)."""
    n = values.shape[0]
    ys = [values[b][scored[b]] for b in range(n)]
    mus = [mean[b][scored[b]] for b in range(n)]
    sigmas = None
    fit_z2 = None
    if std is not None:
        floors = [_STD_FLOOR * stats[b][1] for b in range(n)]
        sigmas = [np.maximum(std[b][scored[b]].astype(np.float64), floors[b]) for b in range(n)]
        if fit is not None:
            fit_z2 = []
            for b in range(n):
                s = np.maximum(std[b][fit[b]].astype(np.float64), floors[b])
                fit_z2.append(((values[b][fit[b]] - mean[b][fit[b]]) / s) ** 2)
    return Scored(ys, mus, sigmas, [int((unfilled[b] & scored[b]).sum()) for b in range(n)],
                   seconds, fit_z2,
                   None if dist is None else [dist[b][scored[b]] for b in range(n)],
                   None if dist is None or fit is None else [dist[b][fit[b]] for b in range(n)])


def score_rows(method: str, mask: str, bands: list[int], s: Scored) -> list[dict[str, Any]]:
    """The report rows of one method on one mask: one per band, then the bands pooled."""
    rows = []
    for b in [*range(len(bands)), None]:  # None = the bands pooled
        band: int | str
        if b is None:
            y, mu = np.concatenate(s.y), np.concatenate(s.mu)
            sig = None if s.sigma is None else np.concatenate(s.sigma)
            unfilled, band = sum(s.unfilled), "all"
        else:
            y, mu = s.y[b], s.mu[b]
            sig = None if s.sigma is None else s.sigma[b]
            unfilled, band = s.unfilled[b], bands[b]
        rows.append({"method": method, "mask": mask, "band": band, "unfilled": unfilled,
                     **score(y, mu, sig), "seconds": round(s.seconds, 4)})
    return rows


def scaled(s: Scored, scale: Sequence[float], bins: DistanceBins | None = None) -> Scored:
    """The same fill with its std calibrated as ``geonp fill`` would apply it."""
    assert s.sigma is not None and s.dist is not None, "only methods with a std are calibrated"
    cal = Calibration(std_scale=tuple(scale), distance_bins=bins)
    sig = [cal.apply(sd, d, band=b) for b, (sd, d) in enumerate(zip(s.sigma, s.dist, strict=True))]
    return Scored(s.y, s.mu, sig, s.unfilled, s.seconds, dist=s.dist)


def binned(s: Scored) -> list[dict[str, Any]]:
    """Scores per bin of distance to the nearest observed pixel, the bands pooled."""
    assert s.dist is not None, "distances are kept for every method"
    return binned_scores(np.concatenate(s.y), np.concatenate(s.mu),
                         None if s.sigma is None else np.concatenate(s.sigma), np.concatenate(s.dist),
                         DISTANCE_BIN_EDGES)


def refitted_scale(lm: Any, z2: Sequence[np.ndarray]) -> tuple[list[float], list[float], list[float]]:
    """A model's std scale refitted to squared standardised errors ``z2`` (one array per band).

    Returns:
        ``(factor, previous, new)`` per band: the 95 % factor of the errors
        (:func:`geonp.filling.calibration.std_factor`; robust, not the mean square), the scale ``fill``
        applies now, and their product (rounded) to store.
    """
    factor = [std_factor(z) for z in z2]
    prev = (lm.calibration or Calibration()).band_scales(len(z2))
    return factor, prev, [round(p * f, 6) for p, f in zip(prev, factor, strict=True)]


def curves_and_scatter(
    methods: list[str], mask_list: list[tuple[str, np.ndarray]], scored: dict[tuple[str, str], Scored],
    seed: int,
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, np.ndarray]]]:
    """Per method with a std: calibration curve pooled over masks and bands, and a scatter sample."""
    curves: dict[str, dict[str, Any]] = {}
    scatter: dict[str, dict[str, np.ndarray]] = {}
    rng = np.random.default_rng(seed)
    for method in methods:
        parts = [scored[(name, method)] for name, _ in mask_list]
        if parts[0].sigma is None:
            continue
        y = np.concatenate([np.concatenate(p.y) for p in parts])
        mu = np.concatenate([np.concatenate(p.mu) for p in parts])
        sig = np.concatenate([np.concatenate(p.sigma) for p in parts if p.sigma is not None])
        levels, observed = calibration_curve(y, mu, sig, DEFAULT_LEVELS)
        curves[method] = {"levels": levels.tolist(), "observed": observed.tolist(), "n": int(y.size)}
        pick = rng.permutation(y.size)[:_SCATTER_POINTS]
        scatter[method] = {"abs_error": np.abs(y - mu)[pick], "std": sig[pick]}
    return curves, scatter
