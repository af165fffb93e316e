"""Similar pixels: a reference line's error corrected by the pixels that looked alike on the reference date.

NSPI's idea (Chen et al., 2011), as the reference regression (:mod:`geonp.filling.references`)
uses it: a gap pixel's line estimate is corrected by the weighted mean line error of the
:data:`SIMILAR_PIXELS` pixels nearby that looked most like it on the reference date
(:func:`similar_pixel_correction`), and what such estimates still miss on the observed pixels
around a gap is spread into it (:func:`residual_correction`). Pure numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import ndimage

__all__ = ["ESTIMATE_REACH", "RESIDUAL_RADIUS", "SIMILAR_PIXELS", "SIMILAR_REACH", "SIMILAR_WINDOW",
           "residual_correction", "similar_pixel_correction"]

#: Similar pixels are searched this many pixels around a pixel (every pixel up to
#: :data:`_DENSE_RADIUS`, the raster's even rows and columns beyond).
SIMILAR_WINDOW = 30
#: Where fewer than 3 are found within :data:`SIMILAR_WINDOW`, they are searched this far, on
#: every :data:`_FAR_STRIDE`-th row and column of the raster. An estimate depends on no pixel farther.
SIMILAR_REACH = 120
_FAR_STRIDE = 8
#: How many similar pixels correct a pixel's line.
SIMILAR_PIXELS = 20
_DENSE_RADIUS = 6
#: A similar pixel's weight is 1 / ((spectral distance + _SPECTRAL_FLOOR) (1 + _SPATIAL_WEIGHT d / window)).
_SPECTRAL_FLOOR = 0.05
_SPATIAL_WEIGHT = 3.0
#: Fewest similar pixels that correct a line (fewer: the line alone, with its residual std).
_MIN_SIMILAR = 3
#: The estimates' errors on observed pixels within this many pixels of a gap pixel correct it
#: (:func:`residual_correction`): a Gaussian of sigma _RESIDUAL_SIGMA, with prior weight _RESIDUAL_PRIOR.
RESIDUAL_RADIUS = 8
_RESIDUAL_SIGMA = 2.0
_RESIDUAL_PRIOR = 0.02
#: The similar-pixel search of the observed pixels the residual correction looks at: 30 px, on
#: every 4th row and column beyond 6 px (on the four tuning draws as good as the gap pixels' own
#: search, 404 against 406, at a third of its cost where gaps are scattered pixels), grown as the
#: gap pixels' is where fewer than 3 are found: an observed pixel alone in a wide cloud estimated
#: by its line alone had an error its neighbours' grown estimates do not share, and the
#: correction spread it as a dark halo 5 px wide (2012-05-24, 94 % cloud, in the README's figure).
_RING_SEARCHES = ((SIMILAR_WINDOW, 4), (SIMILAR_REACH, _FAR_STRIDE))
#: How far from a gap pixel its estimate may look (similar pixels of the observed pixels beside it).
ESTIMATE_REACH = SIMILAR_REACH + RESIDUAL_RADIUS
#: An offset that no array reaches (pads a pixel's candidates).
_FAR_AWAY = 2 ** 40
#: Gap pixels corrected per chunk (bounds the memory of the search to about 100 MB).
_CHUNK = 1024


def residual_correction(residual: np.ndarray) -> np.ndarray:
    """What the estimates' errors on observed pixels say of the gap pixels beside them.

    The similar pixels correct a pixel's line by what happened to its land cover nearby; what
    happened to the pixels right next to it (a field edge, a snow patch, a wet patch) is left in
    the errors of the estimates on the observed pixels beside the gap. Their Gaussian-weighted
    mean (sigma :data:`_RESIDUAL_SIGMA`, out to :data:`RESIDUAL_RADIUS` px), shrunk towards 0
    where few observed pixels are near (a normalised convolution with a prior weight
    :data:`_RESIDUAL_PRIOR`), is added to every pixel's estimate: about 95 % of it at a gap's
    edge, 60 % 2 sigma inside it, nothing beyond :data:`RESIDUAL_RADIUS`.

    Args:
        residual: ``[bands, h, w]`` target minus estimate on observed pixels, NaN elsewhere.

    Returns:
        ``[bands, h, w]`` the correction (0 where no residual lies within :data:`RESIDUAL_RADIUS`).
    """
    known = np.isfinite(residual)
    out = np.zeros(residual.shape)
    truncate = RESIDUAL_RADIUS / _RESIDUAL_SIGMA
    for b in range(residual.shape[0]):
        if not known[b].any():
            continue
        total = ndimage.gaussian_filter(np.where(known[b], residual[b], 0.0), _RESIDUAL_SIGMA, mode="constant",
                                        truncate=truncate)
        weight = ndimage.gaussian_filter(known[b].astype(np.float64), _RESIDUAL_SIGMA, mode="constant",
                                         truncate=truncate)
        out[b] = total / (weight + _RESIDUAL_PRIOR)
    return out


def similar_pixel_correction(spectra: np.ndarray, error: np.ndarray, at: np.ndarray,
                             count: int = SIMILAR_PIXELS, origin: tuple[int, int] = (0, 0),
                             searches: tuple[tuple[int, int], ...] = ((SIMILAR_WINDOW, 2),
                                                                     (SIMILAR_REACH, _FAR_STRIDE)),
                             out: tuple[np.ndarray, np.ndarray] | None = None,
                             ) -> tuple[np.ndarray, np.ndarray]:
    """Weighted mean and spread of ``error`` over each pixel's most similar pixels nearby (never itself).

    The search looks :data:`SIMILAR_WINDOW` pixels around a pixel: every pixel up to 6 away and,
    beyond, the raster's even rows and columns. Where it finds fewer than 3 pixels with an error
    (deep inside a wide cloud), it looks again :data:`SIMILAR_REACH` pixels around, on every
    8th row and column, as NSPI grows its window. Candidates lie on the raster's grid
    (``origin`` is the arrays' offset in it), so every pixel sees the same sparse candidates and
    a fill from a few scattered clear pixels shows no pattern of the search.

    Args:
        spectra: ``[bands, h, w]`` the reference's standardised values (similarity is their
            root mean squared difference).
        error: ``[bands', h, w]`` the line's error; NaN where it is unknown in any band (such
            pixels are never similar pixels).
        at: bool ``[h, w]``: the pixels to correct.
        count: similar pixels per pixel.
        origin: the arrays' ``(row, col)`` offset in the raster.
        searches: ``(window, stride)`` searches in turn, each for the pixels the ones before left
            with fewer than 3: every pixel up to 6 px away, beyond on every ``stride``-th raster
            row and column up to ``window`` px (the residual correction's observed pixels search
            30 px on every 4th, then as far as the gap pixels: ``_RING_SEARCHES``).
        out: ``(correction, spread)`` arrays of an earlier call to write into, NaN at ``at``
            (one pair for two disjoint sets of pixels, searched differently: no third and
            fourth block-sized array to merge); None: new arrays, NaN everywhere else.

    Returns:
        ``(correction, spread)`` ``[bands', h, w]``: at ``at``, the weighted mean of the similar
        pixels' errors and the std of that mean as an estimate of the pixel's error (their
        weighted spread, inflated by ``1 + 1/n`` for ``n`` effective pixels); NaN where fewer
        than 3 pixels within :data:`SIMILAR_REACH` have an error, and everywhere else (``out``'s
        values elsewhere).
    """
    mean, spread = out if out is not None else (np.full(error.shape, np.nan), np.full(error.shape, np.nan))
    grid = _Grid.of(spectra, error, max(window for window, _ in searches))
    known = np.isfinite(error).all(axis=0)
    dense = np.arange(-_DENSE_RADIUS, _DENSE_RADIUS + 1)
    inner_r, inner_c = (a.ravel() for a in np.meshgrid(dense, dense, indexing="ij"))
    inner_r, inner_c = inner_r[(inner_r != 0) | (inner_c != 0)], inner_c[(inner_r != 0) | (inner_c != 0)]
    for window, stride in searches:
        rows, cols = np.nonzero(at & ~np.isfinite(spread).all(axis=0))
        if not rows.size:  # every pixel found its similar pixels nearby: no wider search
            break
        # candidates beyond the dense square lie on the raster's rows and columns that are
        # multiples of the stride; in each pixel's candidates, the dense square's come first and
        # then those, each in the order of their offsets (ties at the count-th are broken by it)
        lines = [(np.arange(known.shape[i]) + origin[i]) % stride == 0 for i in (0, 1)]
        line_r, line_c = np.nonzero(known & lines[0][:, None] & lines[1][None, :])
        if line_r.size < (2 * window // stride + 1) ** 2:
            # few pixels with an error on those lines (a cloudy date): they are the candidates
            for s in range(0, rows.size, _CHUNK):
                r, c = rows[s:s + _CHUNK, None], cols[s:s + _CHUNK, None]
                far_r, far_c = line_r - r, line_c - c
                far = ((abs(far_r) <= window) & (abs(far_c) <= window)
                       & (np.maximum(abs(far_r), abs(far_c)) > _DENSE_RADIUS))
                dr = np.concatenate([np.broadcast_to(inner_r, (r.size, inner_r.size)),
                                     np.where(far, far_r, _FAR_AWAY)], axis=1)
                dc = np.concatenate([np.broadcast_to(inner_c, (r.size, inner_c.size)), far_c], axis=1)
                flat = np.where(dr == _FAR_AWAY, grid.sentinel, grid.index(r, c) + dr * grid.width + dc)
                _correct_chunk(grid, (r[:, 0], c[:, 0]), flat, dr, dc, window, count, (mean, spread))
            continue
        dr, dc = (a.ravel() for a in np.mgrid[-window:window + 1, -window:window + 1])
        outer = np.maximum(abs(dr), abs(dc)) > _DENSE_RADIUS
        phase_r, phase_c = (rows + origin[0]) % stride, (cols + origin[1]) % stride
        for pr in range(stride):
            for pc in range(stride):
                mine = np.flatnonzero((phase_r == pr) & (phase_c == pc))
                if not mine.size:
                    continue
                keep = outer & ((dr + pr) % stride == 0) & ((dc + pc) % stride == 0)
                offsets_r = np.concatenate([inner_r, dr[keep]])[None, :]
                offsets_c = np.concatenate([inner_c, dc[keep]])[None, :]
                offsets = offsets_r * grid.width + offsets_c
                for s in range(0, mine.size, _CHUNK):
                    take = mine[s:s + _CHUNK]
                    flat = grid.index(rows[take, None], cols[take, None]) + offsets
                    _correct_chunk(grid, (rows[take], cols[take]), flat, offsets_r, offsets_c, window, count,
                                   (mean, spread))
    return mean, spread


@dataclass(frozen=True)
class _Grid:
    """A search's arrays padded by its reach with NaN and flattened: a candidate is one index, never clipped.

    Attributes:
        spectra: ``[bands, h, w]`` the reference's values (a pixel's own, unmasked).
        candidates: ``[bands, n + 1]`` the values padded, float32 (the spectral distances are
            float32 sums: half the memory traffic of the search's largest arrays), +inf where the
            error is unknown, outside the arrays and at the last index (:attr:`sentinel`): such a
            candidate's distance is infinite, never NaN.
        error: ``[bands', n + 1]`` the error padded the same way.
        pad: rows and columns of padding on each side.
        width: the padded arrays' row length.
    """

    spectra: np.ndarray
    candidates: np.ndarray
    error: np.ndarray
    pad: int
    width: int

    @classmethod
    def of(cls, spectra: np.ndarray, error: np.ndarray, reach: int) -> _Grid:
        """Pad ``spectra`` (+inf where ``error`` is unknown in any band) and ``error`` (NaN) by ``reach``."""
        known = np.isfinite(error).all(axis=0)

        def padded(values: np.ndarray, dtype: type, fill: float) -> np.ndarray:
            out: np.ndarray = np.pad(np.where(known, values, fill).astype(dtype, copy=False),
                         ((0, 0), (reach, reach), (reach, reach)), constant_values=fill).reshape(values.shape[0], -1)
            return np.concatenate([out, np.full((values.shape[0], 1), fill, dtype)], axis=1)

        return cls(spectra, padded(spectra, np.float32, np.inf), padded(error, np.float64, np.nan), reach,
                   spectra.shape[2] + 2 * reach)

    @property
    def sentinel(self) -> int:
        """A flat index whose values are +inf and NaN (a candidate that is none)."""
        return self.candidates.shape[1] - 1

    def index(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """Flat indices of pixels ``rows, cols`` of the unpadded arrays in the padded ones."""
        return (rows + self.pad) * self.width + cols + self.pad


def _nearest(distance: np.ndarray, k: int) -> np.ndarray:
    """``[n, k]`` column indices of each row's ``k`` smallest distances.

    Among distances equal to the k-th, the first columns are taken: a pixel's choice follows the
    order of its candidates, not how far the array reaches beyond them.
    """
    best = np.argpartition(distance, k - 1, axis=1)[:, :k]
    kth = np.take_along_axis(distance, best, axis=1).max(axis=1, keepdims=True)
    tied = np.flatnonzero(np.isfinite(kth[:, 0]) & ((distance <= kth).sum(axis=1) > k))
    if tied.size:
        d, edge = distance[tied], kth[tied]
        at_edge = d == edge
        chosen = (d < edge) | (at_edge & (np.cumsum(at_edge, axis=1) <= k - (d < edge).sum(axis=1, keepdims=True)))
        best[tied] = np.nonzero(chosen)[1].reshape(-1, k)
    return best


def _correct_chunk(grid: _Grid, pixels: tuple[np.ndarray, np.ndarray], flat: np.ndarray, dr: np.ndarray,
                   dc: np.ndarray, window: int, count: int, out: tuple[np.ndarray, np.ndarray]) -> None:
    """:func:`similar_pixel_correction` for ``pixels`` (rows, cols), written into ``out`` (mean, spread).

    ``flat`` holds their candidates' flat indices in ``grid``, ``dr, dc`` the candidates' offsets.
    """
    rows, cols = pixels
    bands = grid.spectra.shape[0]
    k = min(count, flat.shape[1])
    centre = grid.spectra[:, rows, cols].astype(np.float32)
    distance = np.zeros(flat.shape, np.float32)
    part = np.empty(flat.shape, np.float32)
    for b in range(bands):  # in place: a [pixels, candidates] array is the search's largest
        grid.candidates[b].take(flat, out=part)
        part -= centre[b][:, None]
        part *= part
        distance += part  # +inf outside, unknown or unseen; squared: the root only of the best
    best = _nearest(distance, k)
    d = np.sqrt(np.take_along_axis(distance, best, axis=1).astype(np.float64) / bands)
    found = np.isfinite(d)
    spatial = 1.0 + _SPATIAL_WEIGHT * np.hypot(np.take_along_axis(dr, best, axis=1),
                                               np.take_along_axis(dc, best, axis=1)) / window
    weight = np.where(found, 1.0 / ((np.where(found, d, 0.0) + _SPECTRAL_FLOOR) * spatial), 0.0)
    enough = found.sum(axis=1) >= _MIN_SIMILAR
    total = np.where(enough, weight.sum(axis=1), 1.0)
    effective = total ** 2 / np.maximum((weight ** 2).sum(axis=1), 1e-300)
    chosen = np.take_along_axis(flat, best, axis=1)
    mean, spread = out
    for b in range(grid.error.shape[0]):
        e = np.where(found, grid.error[b].take(chosen), 0.0)
        m = (weight * e).sum(axis=1) / total
        v = (weight * (e - m[:, None]) ** 2).sum(axis=1) / total * (1.0 + 1.0 / effective)
        mean[b, rows, cols] = np.where(enough, m, np.nan)
        spread[b, rows, cols] = np.where(enough, np.sqrt(v), np.nan)
