"""Post-hoc std calibration by distance to the nearest observed pixel. Pure numpy.

A model's raw std can be off in a way that depends on how far a gap pixel is from data (deep in
a scene-scale cloud, for instance). ``geonp evaluate --calibrate`` fits one factor per band and
one per distance bin on validation data (:func:`std_factor`, :func:`distance_bin_factors`); they
are stored in the model file, and every fill applies them to its std raster
(:func:`apply_std_calibration`).

A factor is fitted to the 95 % central interval, not to the mean squared standardised error:
``quantile(|z|, 0.95) / 1.96``. Both agree on Gaussian errors, but real rasters have a tail of
pixels a model gets badly wrong with a small std (a cloud edge, a saturated pixel), and on the
full validation columns of the shared Landsat scene the mean-square fit came out 2.6-3.4x for
every band (95 % coverage 0.96 before it, 0.99 after), driven by that tail alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy import ndimage

__all__ = ["DISTANCE_BIN_EDGES", "apply_std_calibration", "distance_bin_factors", "distance_to_observed",
           "std_factor"]

#: The two-sided 95 % quantile of a standard normal.
_Z95 = 1.959963984540054

#: Edges (pixels) of the distance bins used by ``geonp evaluate`` and the calibration; a pixel
#: with distance ``d`` to its nearest observed pixel falls in bin ``i`` when
#: ``edges[i] <= d < edges[i + 1]``.
DISTANCE_BIN_EDGES: tuple[float, ...] = (
    0.0,
    1.5,
    3.0,
    6.0,
    12.0,
    24.0,
    48.0,
    96.0,
    192.0,
    math.inf,
)


def std_factor(z2: np.ndarray) -> float:
    """The std factor that puts 95 % of standardised errors inside ±1.96 std: ``q95(|z|) / 1.96``.

    Args:
        z2: squared standardised errors ``((y - mu) / sigma)²`` (1 when none is given).
    """
    z2 = np.asarray(z2, float).ravel()
    if z2.size == 0:
        return 1.0
    return float(np.quantile(np.sqrt(z2), 0.95)) / _Z95


def distance_to_observed(observed: np.ndarray) -> np.ndarray:
    """Euclidean distance (px) of each pixel (``[h, w]`` or ``[b, h, w]``) to the nearest observed.

    Observed pixels get 0; an image with no observed pixel gets ``inf`` everywhere.
    """
    observed = np.asarray(observed, bool)
    if observed.ndim == 3:
        return np.stack([distance_to_observed(o) for o in observed])
    if not observed.any():
        return np.full(observed.shape, np.inf)
    return ndimage.distance_transform_edt(~observed)


def _bin_centres(edges: Sequence[float]) -> np.ndarray:
    """A representative distance per bin: its geometric middle (open last bin: 1.5 x its start)."""
    e = np.asarray(edges, float)
    lo, hi = e[:-1], e[1:]
    mid = np.where(np.isfinite(hi), 0.5 * (lo + hi), 1.5 * lo)
    return np.where(lo > 0, np.sqrt(lo * np.where(np.isfinite(hi), hi, 2.25 * lo)), mid)


def distance_bin_factors(
    z2: np.ndarray,
    distance: np.ndarray,
    *,
    edges: Sequence[float] = DISTANCE_BIN_EDGES,
    min_pixels: int = 200,
) -> dict[str, Any]:
    """Fit std factors per distance bin: :func:`std_factor` of the pixels in each bin.

    Args:
        z2: squared standardised errors ``((y - mu) / sigma)²`` of validation pixels.
        distance: their distance to the nearest observed pixel (same shape).
        edges: bin edges in pixels, increasing, starting at 0 (the last may be ``inf``).
        min_pixels: bins with fewer pixels take the factor of the nearest fitted bin (1 if none).

    Returns:
        ``{"edges": [...], "factors": [...], "pixels": [...]}``, JSON-ready (``inf`` as None).
    """
    z2 = np.asarray(z2, float).ravel()
    distance = np.asarray(distance, float).ravel()
    e = np.asarray(edges, float)
    idx = np.clip(np.searchsorted(e, distance, side="right") - 1, 0, e.size - 2)
    counts = np.bincount(idx, minlength=e.size - 1)
    fitted = counts >= min_pixels
    factors = np.ones(e.size - 1)
    for i in np.flatnonzero(fitted):
        factors[i] = std_factor(z2[idx == i])
    if fitted.any():
        good = np.flatnonzero(fitted)
        for i in np.flatnonzero(~fitted):
            factors[i] = factors[good[np.argmin(np.abs(good - i))]]
    return {
        "edges": [None if not math.isfinite(v) else float(v) for v in e],
        "factors": [round(float(f), 6) for f in factors],
        "pixels": [int(c) for c in counts],
    }


def apply_std_calibration(
    std: np.ndarray,
    distance: np.ndarray,
    calibration: Mapping[str, Any] | None,
    *,
    band: int | None = None,
    band_count: int | None = None,
) -> np.ndarray:
    """Apply a model's post-hoc std calibration to a std array.

    Contract (what the fill engine relies on):

    * ``std`` and ``distance`` have the same shape (any shape, e.g. a block's ``[h, w]`` for one
      band); ``distance`` is each pixel's Euclidean distance, in pixels, to the nearest observed
      pixel of the same band (:func:`distance_to_observed`); on a block, compute it with a halo of
      at least 288 px (1.5 x the last bin edge, beyond which the factor is constant), or the std
      of neighbouring blocks will not match. Units of ``std`` are kept.
    * ``calibration`` is the model's calibration block (``LoadedModel.calibration``) or None. Its
      ``std_scale`` (one factor per band, or one for all) multiplies the std of band ``band``
      (0-based); the first factor is used when ``band`` is None, or when ``band_count`` (the
      input's band count) is given and differs from the number of factors (a model calibrated
      on 3 bands filling a 1-band raster), as ``fill`` does. Its optional ``distance_bins``
      (``{"edges", "factors"}``, fitted by ``geonp evaluate --calibrate`` on top of ``std_scale``)
      multiplies by a factor that is interpolated linearly in ``log(1 + distance)`` between the
      bins' representative distances and held constant beyond the first and last, so the std
      raster has no steps at bin edges. Per-band factor lists (``factors[band]``) are accepted.
    * It returns a new float array; NaN stays NaN; no calibration returns ``std`` unchanged
      (as a float array). It is the whole calibration: do not multiply by ``std_scale`` again.
    """
    out = np.asarray(std, dtype=np.result_type(np.asarray(std).dtype, np.float32)).copy()
    if not calibration:
        return out
    b = 0 if band is None else int(band)

    def pick(values: Sequence[Any]) -> Any:
        if band_count is not None and len(values) != band_count:
            return values[0]
        return values[b] if len(values) > b else values[0]

    scale = calibration.get("std_scale")
    if scale:
        out *= float(pick(scale))
    bins = calibration.get("distance_bins")
    if bins:
        edges = [math.inf if v is None else float(v) for v in bins["edges"]]
        factors = bins["factors"]
        if factors and isinstance(factors[0], Sequence):
            factors = pick(factors)
        centres = np.log1p(_bin_centres(edges))
        f = np.interp(np.log1p(np.asarray(distance, float)), centres, np.asarray(factors, float))
        out *= f.astype(out.dtype)
    return out
