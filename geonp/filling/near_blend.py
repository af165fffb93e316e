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
from typing import NamedTuple

import numpy as np
from scipy import ndimage

from geonp.errors import ConfigError
from geonp.model_files.calibration import NearBlend
from geonp.tasks.tiling import Region

__all__ = ["NEAR_BLEND_DISTANCE_EDGES", "NEAR_BLEND_NEIGHBOUR_EDGES", "NEAR_ESTIMATES", "NEAR_ESTIMATE_REACH",
           "NearPixels", "apply_near_blend", "blend_pixels", "estimates_at", "fit_near_blend", "gdal_fill",
           "near_estimates", "observed_neighbours"]

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
#: Pixels blended at a time (their estimates and weights: 7 float64 each).
_CHUNK = 1 << 16
_EIGHT = np.array([[1, 1, 1], [1, 0, 1], [1, 1, 1]])


def observed_neighbours(observed: np.ndarray) -> np.ndarray:
    """``[bands, h, w]`` (or ``[h, w]``) count of each pixel's observed 8-neighbours (outside the array: none)."""
    observed = np.asarray(observed, bool)
    if observed.ndim == 3:
        return np.stack([observed_neighbours(o) for o in observed])
    return ndimage.convolve(observed.astype(np.int16), _EIGHT, mode="constant", cval=0)


def gdal_fill(values: np.ndarray, ok: np.ndarray, max_search_distance: float) -> np.ndarray:
    """GDAL FillNodata's fill of one band ``[h, w]`` (no smoothing), float64.

    Observed pixels keep their values; gaps farther than ``max_search_distance`` px from an
    observed pixel (along GDAL's search directions) stay NaN. GDAL works in float32, so values are
    centred on the observed mean first to keep their digits.
    """
    from rasterio.fill import fillnodata

    values = np.asarray(values, np.float64)
    if not ok.any():
        return np.full(values.shape, np.nan)
    centre = float(values[ok].mean())
    filled = fillnodata(np.where(ok, values - centre, np.nan), mask=ok.astype(np.uint8),
                        max_search_distance=float(max_search_distance), smoothing_iterations=0)
    return np.where(ok, values, np.asarray(filled, np.float64) + centre)


def _gdal(values: np.ndarray, ok: np.ndarray, box: tuple[int, int, int, int]) -> np.ndarray:
    """:func:`gdal_fill` (search :data:`NEAR_ESTIMATE_REACH`) of ``box``, run on the box grown by that reach."""
    r0, r1, c0, c1 = box
    g0, g1 = max(0, r0 - NEAR_ESTIMATE_REACH), min(values.shape[0], r1 + NEAR_ESTIMATE_REACH)
    h0, h1 = max(0, c0 - NEAR_ESTIMATE_REACH), min(values.shape[1], c1 + NEAR_ESTIMATE_REACH)
    out = gdal_fill(values[g0:g1, h0:h1], ok[g0:g1, h0:h1], NEAR_ESTIMATE_REACH)
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


def _check_names(names: Sequence[str]) -> None:
    unknown = [n for n in names if n not in NEAR_ESTIMATES]
    if unknown:
        raise ConfigError(f"near blend estimate {unknown[0]!r} is unknown; this geonp knows {list(NEAR_ESTIMATES)}: "
                          "upgrade geonp or refit the model's near blend")


def _box(rows: np.ndarray, cols: np.ndarray) -> tuple[int, int, int, int]:
    return int(rows.min()), int(rows.max()) + 1, int(cols.min()), int(cols.max()) + 1


def estimates_at(values: np.ndarray, ok: np.ndarray, rows: np.ndarray, cols: np.ndarray, names: Sequence[str],
                 distance: np.ndarray | None = None, *,
                 gdal: tuple[tuple[int, int, int, int], np.ndarray] | None = None) -> np.ndarray:
    """The estimates ``names`` of one band ``[h, w]`` at pixels ``(rows, cols)``: float64 ``[estimates, n]``.

    ``distance``: the pixels' distance to data, when known; a ring of squared radius N has a
    value only within sqrt(N) px of data, so it is looked for only there. ``gdal``: GDAL's fill
    of a box holding the pixels, ``(box, fill)``, when the caller has it. NaN where an estimate
    has no value.
    """
    out = np.full((len(names), rows.size), np.nan)
    if rows.size == 0 or not ok.any():
        return out
    for k, name in enumerate(names):
        if name == "gdal":
            box, fill = gdal if gdal is not None else (_box(rows, cols), None)
            fill = _gdal(values, ok, box) if fill is None else fill
            out[k] = fill[rows - box[0], cols - box[2]]
            continue
        d2 = int(name[4:])
        at = slice(None) if distance is None else distance <= np.sqrt(d2)
        out[k, at] = _ring(values, ok, d2, rows[at], cols[at])
    return out


def near_estimates(values: np.ndarray, observed: np.ndarray, names: Sequence[str] = NEAR_ESTIMATES, *,
                   region: Region | None = None) -> np.ndarray:
    """The classical estimates ``names`` on ``region`` of ``[bands, h, w]`` values: ``[estimates, bands, ...region]``.

    ``region``: ``(r0, r1, c0, c1)`` (default the whole array); the estimates read the pixels
    around it. Float64; NaN where an estimate has no value.

    Raises:
        ConfigError: an unknown estimate name.
    """
    _check_names(names)
    values = np.asarray(values, np.float64)
    observed = np.asarray(observed, bool)
    r0, r1, c0, c1 = region or (0, values.shape[1], 0, values.shape[2])
    rows, cols = (a.ravel() for a in np.mgrid[r0:r1, c0:c1])
    return np.stack([estimates_at(values[b], observed[b], rows, cols, names).reshape(len(names), r1 - r0, c1 - c0)
                     for b in range(values.shape[0])], axis=1)


def _corrected(mean: np.ndarray, estimates: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``mean + sum_k weights[k] * (estimates[k] - mean)``; an estimate without a value adds nothing."""
    return mean + np.sum(weights * np.nan_to_num(estimates - mean[None]), axis=0)


def apply_near_blend(mean: np.ndarray, std: np.ndarray, raw: np.ndarray, observed: np.ndarray,
                     region: Region, distance: np.ndarray, blend: NearBlend
                     ) -> tuple[np.ndarray, np.ndarray]:
    """A block's fill with the near blend applied: ``(mean, std)`` of its region (copies).

    ``mean``, ``std``, ``distance``: ``[bands, ...region]``; ``raw``, ``observed``: the block with its
    halo. Only filled pixels (finite mean) within the blend's last distance edge change; the
    estimates are worked out at those pixels only, band by band.

    Raises:
        ConfigError: the blend names an estimate this geonp does not know.
    """
    _check_names(blend.estimates)
    r0, r1, c0, c1 = region
    near = np.isfinite(mean) & (distance < blend.distance_edges[-1])
    if not near.any():
        return mean, std
    mean, std = mean.copy(), std.copy()
    for b in np.flatnonzero(near.any(axis=(1, 2))):
        ok, values = np.asarray(observed[b], bool), np.asarray(raw[b], np.float64)
        counts = observed_neighbours(ok[max(r0 - 1, 0):r1 + 1, max(c0 - 1, 0):c1 + 1])
        all_rows, all_cols = np.nonzero(near[b])
        box = _box(all_rows + r0, all_cols + c0)
        gdal = (box, _gdal(values, ok, box)) if "gdal" in blend.estimates else None  # once per band
        for start in range(0, all_rows.size, _CHUNK):  # rows of pixels at a time: memory stays small
            rows, cols = all_rows[start:start + _CHUNK], all_cols[start:start + _CHUNK]
            dist = distance[b][rows, cols]
            estimates = estimates_at(values, ok, rows + r0, cols + c0, blend.estimates, dist, gdal=gdal)
            neighbours = counts[rows + r0 - max(r0 - 1, 0), cols + c0 - max(c0 - 1, 0)]
            mean[b][rows, cols], std[b][rows, cols] = blend_pixels(mean[b][rows, cols], std[b][rows, cols],
                                                                   estimates, dist, neighbours, blend)
    return mean, std


def blend_pixels(mean: np.ndarray, std: np.ndarray, estimates: np.ndarray, distance: np.ndarray,
                 neighbours: np.ndarray, blend: NearBlend) -> tuple[np.ndarray, np.ndarray]:
    """The near blend of pixels (any shape): ``(mean, std)`` from the model's and ``estimates`` ``[estimates, ...]``.

    Pixels at or beyond the blend's last distance edge keep their mean and std.
    """
    weights, factor = blend.weights_and_factor(distance, neighbours)
    return _corrected(mean, estimates, weights), std * factor


class NearPixels(NamedTuple):
    """What a near blend is fitted on: flat arrays over validation gap pixels.

    Attributes:
        y: the truth.
        mean: the model's (calibrated) mean without a blend.
        std: its std.
        estimates: ``[estimates, n]``, from :func:`near_estimates`.
        distance: distance to data (px).
        neighbours: observed 8-neighbours.
    """

    y: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    estimates: np.ndarray
    distance: np.ndarray
    neighbours: np.ndarray


def fit_near_blend(pixels: NearPixels, *, names: Sequence[str] = NEAR_ESTIMATES,
                   distance_edges: Sequence[float] = NEAR_BLEND_DISTANCE_EDGES,
                   neighbour_edges: Sequence[int] = NEAR_BLEND_NEIGHBOUR_EDGES,
                   min_pixels: int = MIN_CELL_PIXELS) -> NearBlend:
    """Fit each cell's weights (least squares on ``y - mean``) and the std factor of the corrected fill.

    ``pixels.estimates`` holds the estimates ``names``. The std factor puts 95 % of the corrected
    fill's standardised errors within ±1.96 (:func:`geonp.filling.calibration.std_factor`).
    """
    from geonp.filling.calibration import std_factor

    y, mean, std, estimates, distance, neighbours = pixels
    ok = np.isfinite(y) & np.isfinite(mean) & np.isfinite(std) & (std > 0)
    y, mean, std, distance, neighbours = (np.asarray(a, float)[ok] for a in (y, mean, std, distance, neighbours))
    estimates = np.asarray(estimates, float)[:, ok]
    shape, k = (len(distance_edges) - 1, len(neighbour_edges) - 1), len(names)
    blank = NearBlend(tuple(names), tuple(float(e) for e in distance_edges), tuple(int(e) for e in neighbour_edges),
                      (((0.0,) * k,) * shape[1],) * shape[0], ((1.0,) * shape[1],) * shape[0])
    inside, i, j = blank.cells(distance, neighbours)
    weights, factors, counts = np.zeros((*shape, k)), np.ones(shape), np.zeros(shape, int)
    for a in range(shape[0]):
        for b in range(shape[1]):
            cell = inside & (i == a) & (j == b)
            counts[a, b] = int(cell.sum())
            if counts[a, b] < min_pixels:
                continue
            steps = np.nan_to_num(estimates[:, cell] - mean[cell]).T
            weights[a, b] = np.linalg.lstsq(steps, y[cell] - mean[cell], rcond=None)[0]
            fixed = _corrected(mean[cell], estimates[:, cell], weights[a, b][:, None])
            factors[a, b] = std_factor(((y[cell] - fixed) / std[cell]) ** 2)
    return NearBlend(blank.estimates, blank.distance_edges, blank.neighbour_edges,
                     tuple(tuple(tuple(round(float(v), 6) for v in w) for w in r) for r in weights),
                     tuple(tuple(round(float(v), 6) for v in r) for r in factors),
                     tuple(tuple(int(v) for v in r) for r in counts))
