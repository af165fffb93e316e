"""Tiles over a raster and the choice of context pixels for each tile. Pure numpy.

A tile is a *core* window whose gap pixels are predicted, grown by ``overlap`` pixels on each side
(the *query* window): neighbouring tiles predict the overlap both, and their predictions are
blended with weights that fall linearly to zero at the query window's edge, which removes seams.
The context of a tile is the observed pixels nearest to its query window (nearest favoured, capped
at ``max_context``), searched in a window that grows until enough are found, so a gap deep inside a
large cloud still gets context (and, being far from it, a larger std).

Training (:mod:`geonp.data.tasks`) and inference use :func:`nearest_context`, so a model is trained
on the same kind of context it sees when it fills.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np


class Region(NamedTuple):
    """Rows ``r0:r1`` and columns ``c0:c1`` of a raster or an array.

    One type for a fill's blocks in the raster, a block's own pixels within its arrays (the rest
    is halo) and a tile's query window.
    """

    r0: int
    r1: int
    c0: int
    c1: int

    @property
    def extent(self) -> tuple[int, int]:
        """``(rows, columns)`` (not ``shape``: numpy would take a region for an array of that shape)."""
        return self.r1 - self.r0, self.c1 - self.c0

    @property
    def slices(self) -> tuple[slice, slice]:
        """The region of ``[h, w]`` arrays (``a[(slice(None), *region.slices)]`` for ``[bands, h, w]``)."""
        return slice(self.r0, self.r1), slice(self.c0, self.c1)

    def shifted(self, rows: int, cols: int) -> Region:
        """The same region ``rows`` lower and ``cols`` further right (negative: up, left)."""
        return Region(self.r0 + rows, self.r1 + rows, self.c0 + cols, self.c1 + cols)


@dataclass(frozen=True, order=True)
class Tile:
    """One tile, in pixel offsets of the full raster (rows, then columns).

    Attributes:
        row: first row of the core.
        col: first column of the core.
        height: core rows.
        width: core columns.
        overlap: pixels the query window extends past the core on each side (clipped to the raster).
    """

    row: int
    col: int
    height: int
    width: int
    overlap: int = 0

    def query_bounds(self, shape: tuple[int, int]) -> Region:
        """The query window, clipped to a raster of ``shape``."""
        h, w = shape
        o = self.overlap
        return Region(max(0, self.row - o), min(h, self.row + self.height + o),
                      max(0, self.col - o), min(w, self.col + self.width + o))


def make_tiles(height: int, width: int, *, tile_size: int, overlap: int = 0) -> list[Tile]:
    """Cover a ``height × width`` raster with cores of at most ``tile_size`` pixels, row-major.

    Args:
        height: raster rows.
        width: raster columns.
        tile_size: core edge in pixels (>= 1).
        overlap: query-window margin in pixels (>= 0).

    Returns:
        Tiles whose cores partition the raster, in sorted order.
    """
    if tile_size < 1 or overlap < 0:
        raise ValueError(f"tile_size={tile_size} must be >= 1 and overlap={overlap} >= 0")
    return [
        Tile(r, c, min(tile_size, height - r), min(tile_size, width - c), overlap)
        for r in range(0, height, tile_size)
        for c in range(0, width, tile_size)
    ]


def core_offsets(rows: np.ndarray, cols: np.ndarray, tile: Tile) -> tuple[np.ndarray, np.ndarray]:
    """Rows and columns by which pixels ``(rows, cols)`` lie outside a tile's core (0 on it)."""
    dr = np.maximum(np.maximum(tile.row - rows, rows - (tile.row + tile.height - 1)), 0)
    dc = np.maximum(np.maximum(tile.col - cols, cols - (tile.col + tile.width - 1)), 0)
    return dr, dc


def pixel_weights(rows: np.ndarray, cols: np.ndarray, tile: Tile, margin: int | np.ndarray | None = None
                  ) -> np.ndarray:
    """Blend weight of pixels ``(rows, cols)`` for a tile: 1 on its core, linear fall-off into the overlap.

    ``margin``: the blend margin, per pixel or for all (None: the tile's overlap).
    """
    o = tile.overlap if margin is None else margin
    dr, dc = core_offsets(rows, cols, tile)
    return (1.0 - dr / (o + 1)) * (1.0 - dc / (o + 1))


def _pixel_jitter(rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """A fixed pseudo-random number in [0, 1e-4) per absolute pixel, for tie-breaking.

    It depends only on the pixel's position, so neighbouring tiles break ties the same way, and
    it is smaller than the gap between any two distinct pixel distances below ~800 px, so it never
    reorders pixels that are not tied.
    """
    return pixel_hash(rows, cols).astype(np.float64) / float(1 << 32) * 1e-4


def pixel_hash(rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """The 32-bit hash of each absolute pixel behind :func:`_pixel_jitter` (uint64; same order)."""
    h = (rows.astype(np.uint64) * np.uint64(73856093)) ^ (cols.astype(np.uint64) * np.uint64(19349663))
    return (h * np.uint64(2654435761)) % np.uint64(1 << 32)


def nearest_context(
    observed: np.ndarray,
    query_bounds: tuple[int, int, int, int],
    *,
    max_context: int,
    origin: tuple[int, int] = (0, 0),
    query_distance: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Pick up to ``max_context`` observed pixels nearest to the queries.

    Args:
        observed: bool ``[h, w]`` of a search window, True where a pixel may be context.
        query_bounds: ``(r0, r1, c0, c1)`` of the query window in the *search window's* pixels.
        max_context: cap on the number of context pixels.
        origin: the search window's offset in the full raster (for tie-breaking only).
        query_distance: ``[h, w]`` distance of each pixel to the nearest query pixel (e.g. a
            Euclidean distance transform). When given, context pixels are ranked by it, so the
            immediate neighbours of scattered gaps (dropped pixels, stripes) are always context;
            otherwise by the distance to the query window.

    Returns:
        ``(rows, cols)`` in the search window, nearest first; ties broken by a fixed per-pixel
        jitter.
    """
    rows, cols = np.nonzero(observed)
    if rows.size <= max_context:
        order = np.arange(rows.size)
    else:
        if query_distance is not None:
            base = query_distance[rows, cols]
        else:
            r0, r1, c0, c1 = query_bounds
            dr = np.maximum(np.maximum(r0 - rows, rows - (r1 - 1)), 0)
            dc = np.maximum(np.maximum(c0 - cols, cols - (c1 - 1)), 0)
            base = np.sqrt(dr * dr + dc * dc)
        dist = base + _pixel_jitter(rows + origin[0], cols + origin[1])
        order = np.argpartition(dist, max_context - 1)[:max_context]
        order = order[np.argsort(dist[order], kind="stable")]
    return rows[order], cols[order]
