"""Predict the gap pixels of a region, tile by tile, from a model (the numeric core of ``fill``).

Everything here works on arrays already in memory for one *block* (a region plus a halo of
``search_radius`` pixels around it), so memory is bounded by the block size, not the raster size.
A tile's context comes from a search window that grows around its query window until
``max_context`` observed pixels are found (or ``search_radius`` is reached); its predictions are
the same whichever block computes it, so blocks and tiles leave no seams.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from scipy import ndimage

from geonp.data.tasks import Task, collate, standardize
from geonp.tiling import Tile, make_tiles, nearest_context, pixel_weights


@dataclass(frozen=True)
class TileOptions:
    """How a raster is cut into tiles and how much context each gets.

    Attributes:
        tile_size: core edge in pixels.
        overlap: blend margin in pixels around each core.
        max_context: observed pixels per tile, nearest first.
        search_radius: farthest a tile looks for context, in pixels beyond its query window.
        batch_tiles: tiles per model call.
        query_chunk: targets decoded at a time within a model call.
    """

    tile_size: int = 48
    overlap: int = 8
    max_context: int = 256
    search_radius: int = 512
    batch_tiles: int = 16
    query_chunk: int = 4096

    def __post_init__(self) -> None:
        if self.tile_size < 4 or self.overlap < 0 or self.max_context < 1 or self.search_radius < 1:
            raise ValueError(
                f"tile_size={self.tile_size} (>= 4), overlap={self.overlap} (>= 0), "
                f"max_context={self.max_context} (>= 1), search_radius={self.search_radius} (>= 1)"
            )


def _search(observed: np.ndarray, queries: np.ndarray, qb: tuple[int, int, int, int], opts: TileOptions,
            origin: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Context rows/cols (array coordinates) for the queries of a window.

    :func:`geonp.context.select_context`, the rule training uses: the ``max_context`` observed
    pixels nearest to a query pixel, plus the far set when a :func:`geonp.context.use_context_spec`
    is active.
    """
    from geonp.context import fill_context_spec, select_context

    spec = fill_context_spec(opts.max_context, opts.search_radius)
    return select_context(observed, queries, qb, spec, origin=origin)


def predict_block(
    model: torch.nn.Module,
    values: np.ndarray,
    observed: np.ndarray,
    to_fill: np.ndarray,
    region: tuple[int, int, int, int],
    *,
    origin: tuple[int, int],
    opts: TileOptions,
    device: torch.device,
    progress: Callable[[int], None] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Predict ``to_fill`` pixels inside ``region`` of a block.

    Args:
        model: a model with ``forward(xc, yc, xt, context_valid, query_chunk=)``, ``dim_y = 1``.
        values: ``[h, w]`` normalised values of the block (anything where not observed).
        observed: bool ``[h, w]``, True where a pixel may serve as context.
        to_fill: bool ``[h, w]``, True where a prediction is wanted.
        region: ``(r0, r1, c0, c1)`` of the block's own pixels (the rest is halo).
        origin: the block's offset in the full raster (pixel coordinates are absolute).
        opts: tiling options.
        device: where the model runs.
        progress: called with the number of tiles done after each model call.

    Returns:
        ``(mean, std)``, each ``[r1 - r0, c1 - c0]``, in normalised units, NaN where not filled.
    """
    r0, r1, c0, c1 = region
    h, w = observed.shape
    # Tiles are laid on the *global* grid so that every block cuts the same tiles; a tile whose
    # query window touches the region is predicted here (ring tiles are shared with neighbours).
    size, o = opts.tile_size, opts.overlap
    g_r0, g_c0 = origin[0] + r0, origin[1] + c0
    first_r = ((g_r0 - o) // size) * size
    first_c = ((g_c0 - o) // size) * size
    tiles = [
        Tile(tr - origin[0], tc - origin[1], size, size, o)
        for tr in range(first_r, origin[0] + r1 + o, size)
        for tc in range(first_c, origin[1] + c1 + o, size)
    ]
    acc_mean = np.zeros((r1 - r0, c1 - c0))
    acc_std = np.zeros((r1 - r0, c1 - c0))
    acc_w = np.zeros((r1 - r0, c1 - c0))
    pending: list[tuple[Task, np.ndarray, np.ndarray, np.ndarray]] = []

    def flush() -> None:
        if not pending:
            return
        batch = collate([p[0] for p in pending]).to(device)
        with torch.no_grad():
            mean, std = model(batch.xc, batch.yc, batch.xt, batch.context_valid, query_chunk=opts.query_chunk)
        mean, std = mean.cpu().numpy()[..., 0], std.cpu().numpy()[..., 0]
        for i, (task, rows, cols, wts) in enumerate(pending):
            n = rows.size
            m = mean[i, :n] * task.scale[0] + task.shift[0]
            s = std[i, :n] * task.scale[0]
            np.add.at(acc_mean, (rows - r0, cols - c0), wts * m)
            np.add.at(acc_std, (rows - r0, cols - c0), wts * s)
            np.add.at(acc_w, (rows - r0, cols - c0), wts)
        if progress is not None:
            progress(len(pending))
        pending.clear()

    work = list(reversed(tiles))
    while work:
        tile = work.pop()
        o = tile.overlap
        # query window in block coordinates, clipped to the block array and to the region
        qr0, qr1 = max(tile.row - o, 0), min(tile.row + tile.height + o, h)
        qc0, qc1 = max(tile.col - o, 0), min(tile.col + tile.width + o, w)
        rr0, rr1, cc0, cc1 = max(qr0, r0), min(qr1, r1), max(qc0, c0), min(qc1, c1)
        if rr0 >= rr1 or cc0 >= cc1 or not to_fill[rr0:rr1, cc0:cc1].any():
            continue
        if tile.height > _MIN_SPLIT and _neighbours(observed, to_fill, (qr0, qr1, qc0, qc1)) > opts.max_context:
            # Scattered gaps (dropped pixels, stripes): the gaps' own neighbours are more than the
            # context cap, so some would be left out. Split the tile in four (the rule depends on
            # this tile's pixels only, so every block splits alike).
            work.extend(reversed(_quarters(tile)))
            continue
        crow, ccol = _search(observed, to_fill, (qr0, qr1, qc0, qc1), opts, origin)
        if crow.size == 0:
            continue
        trow, tcol = np.nonzero(to_fill[rr0:rr1, cc0:cc1])
        trow, tcol = trow + rr0, tcol + cc0
        wts = pixel_weights(trow, tcol, tile)
        yc, _, shift, scale = standardize(values[crow, ccol][:, None], None)
        # Coordinates relative to the query window's corner: what training patches look like, and
        # for translation-invariant models (scan) the same result as absolute coordinates, with
        # small squared-distance tables for the bias.
        rel_c = np.stack([crow - qr0, ccol - qc0], -1).astype(np.float32)
        rel_t = np.stack([trow - qr0, tcol - qc0], -1).astype(np.float32)
        task = Task(xc=rel_c, yc=yc.astype(np.float32), xt=rel_t, yt=None, shift=shift, scale=scale)
        pending.append((task, trow, tcol, wts))
        if len(pending) >= opts.batch_tiles:
            flush()
    flush()
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_out = np.where(acc_w > 0, acc_mean / acc_w, np.nan)
        std_out = np.where(acc_w > 0, acc_std / acc_w, np.nan)
    return mean_out, std_out


_MIN_SPLIT = 12  # tiles are not split below this edge (pixels)


def _neighbours(observed: np.ndarray, to_fill: np.ndarray, qb: tuple[int, int, int, int]) -> int:
    """Observed pixels of a query window that touch (8-neighbourhood) a pixel to fill."""
    r0, r1, c0, c1 = qb
    near = ndimage.binary_dilation(to_fill[r0:r1, c0:c1], structure=np.ones((3, 3), bool))
    return int(np.count_nonzero(near & observed[r0:r1, c0:c1]))


def _quarters(tile: Tile) -> list[Tile]:
    """Four sub-tiles of a tile, with an overlap scaled to their size."""
    h1, w1 = tile.height // 2, tile.width // 2
    o = max(2, min(tile.overlap, h1 // 3))
    return [Tile(tile.row + dr, tile.col + dc, hh, ww, o)
            for dr, hh in ((0, h1), (h1, tile.height - h1))
            for dc, ww in ((0, w1), (w1, tile.width - w1))]



def count_tiles(height: int, width: int, opts: TileOptions) -> int:
    """Number of tile cores covering a raster."""
    return len(make_tiles(height, width, tile_size=opts.tile_size))
