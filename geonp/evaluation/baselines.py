"""What users would use instead of geonp: GDAL FillNodata and local ordinary kriging.

``geonp evaluate`` scores geonp beside these two on the same hidden pixels. FillNodata
(inverse-distance interpolation from the gap's edges, as ``gdal_fillnodata``) is fast and gives
no uncertainty. Ordinary kriging gives a variance, but its cost grows with the cube of the points
it conditions on, so it runs window by window on the nearest observed pixels (as practitioners
do with moving-neighbourhood kriging); it needs the optional PyKrige package.

Both take ``values [bands, h, w]`` and ``valid`` (bool, same shape, True = observed) and return
a :class:`BaselinePrediction` in the bands' units.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from geonp.errors import ConfigError, MissingDependencyError

logger = logging.getLogger(__name__)

__all__ = [
    "VARIOGRAM_MODELS",
    "BaselinePrediction",
    "fillnodata_baseline",
    "kriging_baseline",
    "require_pykrige",
    "temporal_linear",
]

#: PyKrige variogram models accepted by :func:`kriging_baseline`.
VARIOGRAM_MODELS = ("linear", "power", "gaussian", "spherical", "exponential", "hole-effect")


@dataclass
class BaselinePrediction:
    """A baseline's fill of the target pixels.

    Attributes:
        mean: float64 ``[bands, h, w]``: the input on observed pixels, the prediction on targets.
        std: float64 ``[bands, h, w]`` predictive std on targets (0 on observed pixels), or None
            for a method without uncertainty.
        unfilled: bool ``[bands, h, w]``: targets the method could not reach; they hold the
            band's observed mean (and its observed std as ``std``) so that they are scored, not
            dropped.
    """

    mean: np.ndarray
    std: np.ndarray | None
    unfilled: np.ndarray


def _check_inputs(values: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim == 2:
        arr = arr[None]
    if arr.ndim != 3:
        raise ValueError(f"values must be [bands, h, w], got shape {np.shape(values)}")
    ok = np.broadcast_to(np.asarray(valid, dtype=bool), arr.shape) & np.isfinite(arr)
    return arr, ok


def _band_stats(band: np.ndarray, ok: np.ndarray) -> tuple[float, float]:
    if not ok.any():
        return 0.0, 1.0
    vals = band[ok]
    return float(vals.mean()), float(vals.std()) if vals.size > 1 else 1.0


def fillnodata_baseline(values: np.ndarray, valid: np.ndarray) -> BaselinePrediction:
    """Fill every gap with GDAL FillNodata (``rasterio.fill.fillnodata``), band by band.

    The search distance covers the whole array, so every gap of a band with any observed pixel
    is filled; smoothing is off (``smoothing_iterations=0``), as in the GDAL default. GDAL works
    in float32, so values are centred on the band mean first to keep their precision.

    Args:
        values: ``[bands, h, w]`` (or ``[h, w]``) values; anything where not valid.
        valid: bool, True = observed; same shape (or ``[h, w]``).

    Returns:
        The fill; ``std`` is None (FillNodata has no uncertainty).
    """
    from geonp.filling.near_blend import gdal_fill

    arr, ok = _check_inputs(values, valid)
    n, h, w = arr.shape
    mean = np.where(ok, arr, np.nan)
    unfilled = np.zeros(arr.shape, dtype=bool)
    for b in range(n):
        gaps = ~ok[b]
        if not gaps.any():
            continue
        centre, _ = _band_stats(arr[b], ok[b])
        if not ok[b].any():
            mean[b][gaps] = centre
            unfilled[b] = gaps
            continue
        band = gdal_fill(arr[b], ok[b], h + w + 1)
        left = gaps & ~np.isfinite(band)
        mean[b][gaps] = np.where(left[gaps], centre, band[gaps])
        unfilled[b] = left
    return BaselinePrediction(mean=mean, std=None, unfilled=unfilled)


def require_pykrige() -> Any:
    """Return PyKrige's ``OrdinaryKriging`` class.

    Raises:
        MissingDependencyError: PyKrige is not installed (it is the optional ``krige`` extra).
    """
    try:
        from pykrige.ok import OrdinaryKriging
    except ImportError as err:
        raise MissingDependencyError(
            "pykrige is not installed; install geonp[krige] to use --kriging"
        ) from err
    return OrdinaryKriging


def _nearest_context(
    tree: Any, obs_rc: np.ndarray, targets_rc: np.ndarray, max_points: int, rng: np.random.Generator
) -> np.ndarray:
    """Indexes of up to ``max_points`` observed pixels closest to a set of targets.

    Each target proposes its nearest observed pixels; candidates are ranked by their distance to
    the nearest target, ties broken at random so that, when many pixels are equally close (a
    scatter of small gaps), the chosen ones spread over the whole window.
    """
    n_obs = obs_rc.shape[0]
    k = int(min(n_obs, max(8, math.ceil(4 * max_points / max(1, targets_rc.shape[0])))))
    dist, idx = tree.query(targets_rc, k=k)
    dist, idx = np.asarray(dist).reshape(-1), np.asarray(idx).reshape(-1)
    best = np.full(n_obs, np.inf)
    np.minimum.at(best, idx, dist)
    cand = np.flatnonzero(np.isfinite(best))
    if cand.size <= max_points:
        return cand
    order = np.lexsort((rng.random(cand.size), best[cand]))
    return cand[order[:max_points]]


def kriging_baseline(
    values: np.ndarray,
    valid: np.ndarray,
    *,
    targets: np.ndarray | None = None,
    window: int = 64,
    max_points: int = 400,
    variogram: str = "exponential",
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> BaselinePrediction:
    """Fill gaps by local ordinary kriging (PyKrige), window by window, with its variance.

    The targets are cut into ``window x window`` pixel windows. For each window a variogram is
    fitted to, and ordinary kriging conditioned on, the ``max_points`` observed pixels nearest to
    the window's targets; the kriging variance gives the std. Where the fit fails (too few or
    constant points) the targets get the band's observed mean and std and count as unfilled.

    Args:
        values: ``[bands, h, w]`` (or ``[h, w]``) values.
        valid: bool, True = observed.
        targets: bool, the pixels to predict (default every pixel that is not valid).
        window: window edge in pixels.
        max_points: observed pixels per window; cost grows with its cube.
        variogram: PyKrige variogram model, one of :data:`VARIOGRAM_MODELS`.
        seed: tie-breaking seed for the choice of context pixels.
        progress: optional ``(done, total)`` callback over windows.

    Returns:
        The fill, with ``std = sqrt(kriging variance)`` (0 on observed pixels).

    Raises:
        MissingDependencyError: PyKrige is not installed.
        ConfigError: bad window, max_points or variogram.
    """
    ordinary_kriging = require_pykrige()
    from scipy.spatial import cKDTree

    if variogram not in VARIOGRAM_MODELS:
        raise ConfigError(
            f"variogram={variogram!r} is not a PyKrige model; use one of {', '.join(VARIOGRAM_MODELS)}"
        )
    if int(window) < 1 or int(max_points) < 3:
        raise ConfigError(
            f"window={window} and max_points={max_points} must be >= 1 and >= 3; kriging needs a "
            "few context points per window (e.g. window=64, max_points=400)"
        )
    arr, ok = _check_inputs(values, valid)
    want = ~ok if targets is None else (np.broadcast_to(np.asarray(targets, dtype=bool), arr.shape) & ~ok)
    n, h, w = arr.shape
    mean = np.where(ok, arr, np.nan)
    std = np.where(ok, 0.0, np.nan)
    unfilled = np.zeros(arr.shape, dtype=bool)
    rng = np.random.default_rng(seed)
    windows = [(r, c) for r in range(0, h, window) for c in range(0, w, window)]
    total = n * len(windows)
    done = 0
    for b in range(n):
        centre, spread = _band_stats(arr[b], ok[b])
        obs_rc = np.argwhere(ok[b]).astype(np.float64)
        obs_val = arr[b][ok[b]]
        tree = cKDTree(obs_rc) if obs_rc.shape[0] >= 3 else None
        for r0, c0 in windows:
            done += 1
            sub = want[b, r0:r0 + window, c0:c0 + window]
            if sub.any():
                t_rc = np.argwhere(sub).astype(np.float64) + (r0, c0)
                rows, cols = t_rc[:, 0].astype(int), t_rc[:, 1].astype(int)
                pred = None
                if tree is not None:
                    pick = _nearest_context(tree, obs_rc, t_rc, int(max_points), rng)
                    pred = _krige(ordinary_kriging, obs_rc[pick], obs_val[pick], t_rc, variogram)
                if pred is None:
                    mean[b, rows, cols] = centre
                    std[b, rows, cols] = spread
                    unfilled[b, rows, cols] = True
                else:
                    mean[b, rows, cols] = pred[0]
                    std[b, rows, cols] = pred[1]
            if progress is not None:
                progress(done, total)
    return BaselinePrediction(mean=mean, std=std, unfilled=unfilled)


def _krige(
    ordinary_kriging: Any, xy: np.ndarray, z: np.ndarray, targets: np.ndarray, variogram: str
) -> tuple[np.ndarray, np.ndarray] | None:
    """Ordinary kriging of ``targets`` from points ``xy [n, 2]`` (row, col); None if it fails."""
    if np.ptp(z) == 0:
        return None  # a flat neighbourhood: no variogram to fit
    centre = float(z.mean())
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PyKrige warns on poorly constrained fits
            # 12 lags weighted towards short distances: gap filling depends on the variogram
            # near the origin far more than on its sill
            ok = ordinary_kriging(xy[:, 1], xy[:, 0], z - centre, variogram_model=variogram,
                                  nlags=12, weight=True)
            zt, ss = ok.execute("points", targets[:, 1], targets[:, 0])
    except (np.linalg.LinAlgError, ValueError, FloatingPointError) as err:
        logger.debug("kriging a window of %d targets failed: %s", targets.shape[0], err)
        return None
    zt = np.asarray(np.ma.filled(zt, np.nan), dtype=np.float64) + centre
    ss = np.asarray(np.ma.filled(ss, np.nan), dtype=np.float64)
    if not (np.all(np.isfinite(zt)) and np.all(np.isfinite(ss))):
        return None
    return zt, np.sqrt(np.clip(ss, 0.0, None))


def temporal_linear(values: np.ndarray, observed: np.ndarray, days: np.ndarray, t: int) -> np.ndarray:
    """Date ``t`` interpolated linearly in time, pixel by pixel, from the other dates that see it clear.

    Between the nearest date before and the nearest after that observe a pixel; the one of them
    there is where only one side has any (the series' ends); NaN where no other date sees it.

    Args:
        values: ``[T, bands, h, w]``, NaN where a date has no value.
        observed: ``[T, h, w]`` True where a date sees a pixel clear.
        days: ``[T]`` dates in days, ascending.
        t: the date to interpolate (its own pixels are not used).

    Returns:
        ``[bands, h, w]`` float64.
    """
    shape = observed.shape[1:]
    before, after = np.full(shape, -1), np.full(shape, -1)
    for j in range(t):
        before[observed[j]] = j
    for j in range(len(days) - 1, t, -1):
        after[observed[j]] = j
    rows, cols = np.indices(shape)
    v0 = values[np.maximum(before, 0), :, rows, cols].transpose(2, 0, 1).astype(np.float64)
    v1 = values[np.maximum(after, 0), :, rows, cols].transpose(2, 0, 1).astype(np.float64)
    d0, d1 = days[np.maximum(before, 0)], days[np.maximum(after, 0)]
    both = (before >= 0) & (after >= 0)
    w = (days[t] - d0) / np.where(both, d1 - d0, 1)
    out = np.where(both, v0 + w * (v1 - v0), np.where(before >= 0, v0, v1))
    return np.where((before >= 0) | (after >= 0), out, np.nan)
