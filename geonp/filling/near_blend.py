"""Next to data, correct the model's fill by classical estimates, by how the pixel sits among its neighbours.

Right at a gap's edge the nearest observed pixels hold most of what there is to know, and the
model under-uses them: on the default model's validation columns a linear correction of its fill
by a few classical estimates beat both. The estimates (:data:`NEAR_ESTIMATES`) are GDAL
FillNodata's fill and the mean of the observed pixels on each ring of squared distance 1, 2, 4,
5, 8 and 9 px² around the pixel: weighted, the rings are an isotropic linear filter that adapts
to which pixels are observed. The weights and a std factor for the corrected fill are fitted by
least squares per cell of gap pixels alike: distance to the nearest observed pixel (bins up to
12 px) by the count of observed 8-neighbours (a dropped pixel among observed ones is not a cloud's
edge) (:func:`fit_near_blend`, stored as a :class:`~geonp.model_files.calibration.NearBlend` in
the model's calibration). Every fill applies it (:func:`apply_near_blend`) on its block with the
halo. Pure numpy, and GDAL through rasterio for its estimate.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import ndimage

from geonp.errors import ConfigError
from geonp.model_files.calibration import NearBlend

__all__ = ["NEAR_BLEND_DISTANCE_EDGES", "NEAR_BLEND_NEIGHBOUR_EDGES", "NEAR_ESTIMATES", "NEAR_ESTIMATE_REACH",
           "apply_near_blend", "blend_pixels", "fit_near_blend", "near_estimates", "observed_neighbours"]

#: The classical estimates a near blend weighs: GDAL FillNodata's fill (``gdal``), and
#: ``ringN``: the mean of the observed pixels at squared distance N px² (no value where none is).
NEAR_ESTIMATES: tuple[str, ...] = ("gdal", "ring1", "ring2", "ring4", "ring5", "ring8", "ring9")
#: Distance bins (px to the nearest observed pixel) of the blend's cells; farther pixels keep the model's fill.
NEAR_BLEND_DISTANCE_EDGES: tuple[float, ...] = (0.0, 1.5, 3.0, 6.0, 12.0)
#: Bins of the count of observed 8-neighbours: 0-2, 3-4, 5-6, 7-8.
NEAR_BLEND_NEIGHBOUR_EDGES: tuple[int, ...] = (0, 3, 5, 7, 9)
#: GDAL FillNodata's search distance (px) for its estimate: the last distance edge plus 20 px,
#: within the 64 px halo of a block.
NEAR_ESTIMATE_REACH = 32
#: Least validation pixels of a cell to fit its weights and factor (others: weights 0, factor 1).
MIN_CELL_PIXELS = 1000
_EIGHT = np.array([[1, 1, 1], [1, 0, 1], [1, 1, 1]])


def observed_neighbours(observed: np.ndarray) -> np.ndarray:
    """``[bands, h, w]`` (or ``[h, w]``) count of each pixel's observed 8-neighbours (outside the array: none)."""
    observed = np.asarray(observed, bool)
    if observed.ndim == 3:
        return np.stack([observed_neighbours(o) for o in observed])
    return ndimage.convolve(observed.astype(np.int16), _EIGHT, mode="constant", cval=0)


def _gdal(values: np.ndarray, ok: np.ndarray, region: tuple[int, int, int, int]) -> np.ndarray:
    """GDAL FillNodata's fill of ``region``, run on the region grown by :data:`NEAR_ESTIMATE_REACH`."""
    from rasterio.fill import fillnodata

    r0, r1, c0, c1 = region
    g0, g1 = max(0, r0 - NEAR_ESTIMATE_REACH), min(values.shape[0], r1 + NEAR_ESTIMATE_REACH)
    h0, h1 = max(0, c0 - NEAR_ESTIMATE_REACH), min(values.shape[1], c1 + NEAR_ESTIMATE_REACH)
    vals, seen = values[g0:g1, h0:h1], ok[g0:g1, h0:h1]
    if not seen.any():
        return np.full((r1 - r0, c1 - c0), np.nan)
    centre = float(vals[seen].mean())  # GDAL works in float32: keep the digits near 0
    image = np.where(seen, vals - centre, np.nan).astype(np.float32)
    filled = fillnodata(image, mask=seen.astype(np.uint8), max_search_distance=float(NEAR_ESTIMATE_REACH),
                        smoothing_iterations=0)
    out = np.where(seen, vals, np.asarray(filled, np.float64) + centre)  # gaps out of reach stay NaN
    return out[r0 - g0:r1 - g0, c0 - h0:c1 - h0]


def _ring(values: np.ndarray, ok: np.ndarray, d2: int, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """The mean of the observed pixels at squared distance ``d2`` around each pixel ``(rows, cols)``."""
    r = int(np.ceil(np.sqrt(d2)))
    pad_v, pad_n = np.pad(np.where(ok, values, 0.0), r), np.pad(ok, r)
    total = np.zeros(rows.shape)
    count = np.zeros(rows.shape)
    for dy in range(-r, r + 1):
        for dx in range(-r, r + 1):
            if dy * dy + dx * dx == d2:
                at = (rows + r + dy, cols + r + dx)
                total += pad_v[at]
                count += pad_n[at]
    return np.where(count > 0.5, total / np.maximum(count, 1.0), np.nan)


def near_estimates(values: np.ndarray, observed: np.ndarray, names: Sequence[str] = NEAR_ESTIMATES, *,
                   where: np.ndarray | None = None, region: tuple[int, int, int, int] | None = None) -> np.ndarray:
    """The classical estimates ``names`` on ``region`` of ``[bands, h, w]`` values: ``[estimates, bands, ...region]``.

    ``region``: ``(r0, r1, c0, c1)`` (default the whole array); the estimates read the pixels
    around it. ``where``: bool ``[bands, ...region]``, the pixels to estimate (default all).
    Float64; NaN where an estimate has no value, and where not asked for.

    Raises:
        ConfigError: an unknown estimate name.
    """
    unknown = [n for n in names if n not in NEAR_ESTIMATES]
    if unknown:
        raise ConfigError(f"near blend estimate {unknown[0]!r} is unknown; this geonp knows {list(NEAR_ESTIMATES)}: "
                          "upgrade geonp or refit the model's near blend")
    values = np.asarray(values, np.float64)
    observed = np.asarray(observed, bool)
    r0, r1, c0, c1 = region or (0, values.shape[1], 0, values.shape[2])
    out = np.full((len(names), values.shape[0], r1 - r0, c1 - c0), np.nan)
    for b in range(values.shape[0]):
        ok = observed[b]
        asked = np.ones((r1 - r0, c1 - c0), bool) if where is None else where[b]
        if not asked.any() or not ok.any():
            continue
        rows, cols = np.nonzero(asked)
        for k, name in enumerate(names):
            if name == "gdal":
                out[k, b] = np.where(asked, _gdal(values[b], ok, (r0, r1, c0, c1)), np.nan)
            else:
                out[k, b, rows, cols] = _ring(values[b], ok, int(name[4:]), rows + r0, cols + c0)
    return out


def _corrected(mean: np.ndarray, estimates: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``mean + sum_k weights[k] * (estimates[k] - mean)``; an estimate without a value adds nothing."""
    return mean + np.sum(weights * np.nan_to_num(estimates - mean[None]), axis=0)


def apply_near_blend(mean: np.ndarray, std: np.ndarray, raw: np.ndarray, observed: np.ndarray,
                     region: tuple[int, int, int, int], distance: np.ndarray, blend: NearBlend
                     ) -> tuple[np.ndarray, np.ndarray]:
    """A block's fill with the near blend applied: ``(mean, std)`` of its region (new arrays).

    ``mean``, ``std``, ``distance``: ``[bands, ...region]``; ``raw``, ``observed``: the block with its
    halo. Only filled pixels (finite mean) within the blend's last distance edge change.
    """
    r0, r1, c0, c1 = region
    near = np.isfinite(mean) & (distance < blend.distance_edges[-1])
    if not near.any():
        return mean, std
    # a ring of squared radius N has a value only within sqrt(N) px of data: look there only
    reach = {n: np.sqrt(float(n[4:])) if n.startswith("ring") else np.inf for n in blend.estimates}
    estimates = np.concatenate([near_estimates(raw, observed, (n,), where=near & (distance <= reach[n]), region=region)
                                for n in blend.estimates])
    fixed, scaled = blend_pixels(mean, std, estimates, distance, observed_neighbours(observed)[:, r0:r1, c0:c1], blend)
    return np.where(near, fixed, mean), np.where(near, scaled, std).astype(std.dtype)


def blend_pixels(mean: np.ndarray, std: np.ndarray, estimates: np.ndarray, distance: np.ndarray,
                 neighbours: np.ndarray, blend: NearBlend) -> tuple[np.ndarray, np.ndarray]:
    """The near blend of pixels (any shape): ``(mean, std)`` from the model's and ``estimates`` ``[estimates, ...]``.

    Pixels at or beyond the blend's last distance edge keep their mean and std.
    """
    weights, factor = blend.weights_and_factor(distance, neighbours)
    return _corrected(mean, estimates, weights), std * factor


def fit_near_blend(y: np.ndarray, mean: np.ndarray, std: np.ndarray, estimates: np.ndarray, distance: np.ndarray,
                   neighbours: np.ndarray, *, names: Sequence[str] = NEAR_ESTIMATES,
                   distance_edges: Sequence[float] = NEAR_BLEND_DISTANCE_EDGES,
                   neighbour_edges: Sequence[int] = NEAR_BLEND_NEIGHBOUR_EDGES,
                   min_pixels: int = MIN_CELL_PIXELS) -> NearBlend:
    """Fit each cell's weights (least squares on ``y - mean``) and the std factor of the corrected fill.

    Arguments are flat arrays over validation gap pixels (``estimates``: ``[len(names), n]``, from
    :func:`near_estimates`): the truth, the model's (calibrated) mean and std without a blend, the
    estimates, distance to data and observed 8-neighbours. The std factor puts 95 % of the
    corrected fill's standardised errors within ±1.96 (:func:`geonp.filling.calibration.std_factor`).
    """
    from geonp.filling.calibration import std_factor

    ok = np.isfinite(y) & np.isfinite(mean) & np.isfinite(std) & (std > 0)
    y, mean, std, distance, neighbours = (np.asarray(a, float)[ok] for a in (y, mean, std, distance, neighbours))
    estimates = np.asarray(estimates, float)[:, ok]
    shape, k = (len(distance_edges) - 1, len(neighbour_edges) - 1), len(names)
    blank = NearBlend(tuple(names), tuple(float(e) for e in distance_edges), tuple(int(e) for e in neighbour_edges),
                      (((0.0,) * k,) * shape[1],) * shape[0], ((1.0,) * shape[1],) * shape[0])
    inside, i, j = blank.cells(distance, neighbours)
    weights, factors, pixels = np.zeros((*shape, k)), np.ones(shape), np.zeros(shape, int)
    for a in range(shape[0]):
        for b in range(shape[1]):
            cell = inside & (i == a) & (j == b)
            pixels[a, b] = int(cell.sum())
            if pixels[a, b] < min_pixels:
                continue
            steps = np.nan_to_num(estimates[:, cell] - mean[cell]).T
            weights[a, b] = np.linalg.lstsq(steps, y[cell] - mean[cell], rcond=None)[0]
            fixed = _corrected(mean[cell], estimates[:, cell], weights[a, b][:, None])
            factors[a, b] = std_factor(((y[cell] - fixed) / std[cell]) ** 2)
    return NearBlend(blank.estimates, blank.distance_edges, blank.neighbour_edges,
                     tuple(tuple(tuple(round(float(v), 6) for v in w) for w in r) for r in weights),
                     tuple(tuple(round(float(v), 6) for v in r) for r in factors),
                     tuple(tuple(int(v) for v in r) for r in pixels))
