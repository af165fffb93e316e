"""Look at a raster before filling it: gap counts, a sample for normalisation, the dry-run plan.

``fill_raster`` counts the gaps block by block before any work (the progress total, and the
``--dry-run`` report), samples windows for the normalisation statistics of a model that takes any
band count, and, for ``--dry-run``, estimates blocks, tiles, memory and time (:func:`plan`).
Nothing here runs the model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from rasterio.windows import Window

from geonp.engine import Block
from geonp.io.observed import read_observed
from geonp.io.raster import RasterInfo
from geonp.predict import TileOptions

__all__ = ["count_gaps", "plan", "sample_for_stats"]


def count_gaps(src: Any, info: RasterInfo, bands: list[int], nodata: float | None,
               gaps_from: Callable[[Window], np.ndarray | None], blocks: list[Block],
               tile_size: int, fillable_from: Callable[[Window], np.ndarray] | None = None,
               outside: list[int] | None = None) -> tuple[int, int, int]:
    """Gap pixels, observed pixels and tiles with gaps (over all bands), block by block.

    With ``fillable_from`` (the data footprint) only gaps inside it count; those outside are
    added to ``outside[0]``.
    """
    gap_pixels, obs_pixels, gap_tiles = 0, 0, 0
    for r0, r1, c0, c1 in blocks:
        win = Window(c0, r0, c1 - c0, r1 - r0)
        _, ok = read_observed(src, win, bands, info=info, nodata=nodata)
        gap = gaps_from(win)
        if gap is not None:
            ok &= ~gap[None]
        to_fill = ~ok
        if fillable_from is not None:
            inside = fillable_from(win)[None]
            if outside is not None:
                outside[0] += int((to_fill & ~inside).sum())
            to_fill = to_fill & inside
        gap_pixels += int(to_fill.sum())
        obs_pixels += int(ok.sum())
        t = tile_size
        padded = np.pad(to_fill, ((0, 0), (0, (-ok.shape[1]) % t), (0, (-ok.shape[2]) % t)))
        gap_tiles += int(padded.reshape(len(bands), padded.shape[1] // t, t, -1, t).any((2, 4)).sum())
    return gap_pixels, obs_pixels, gap_tiles


def sample_for_stats(src: Any, info: RasterInfo, bands: list[int], nodata: float | None,
                     gaps_from: Callable[[Window], np.ndarray | None]) -> tuple[np.ndarray, np.ndarray]:
    """Up to 16 windows of 256 px spread over the raster, for normalisation statistics."""
    size = 256
    rows = np.linspace(0, max(0, info.height - size), 4).astype(int)
    cols = np.linspace(0, max(0, info.width - size), 4).astype(int)
    vals, oks = [], []
    for r in sorted(set(rows)):
        for c in sorted(set(cols)):
            win = Window(c, r, min(size, info.width), min(size, info.height))
            arr, ok = read_observed(src, win, bands, info=info, nodata=nodata)
            gap = gaps_from(win)
            if gap is not None:
                ok &= ~gap[None]
            vals.append(arr.reshape(len(bands), -1))
            oks.append(ok.reshape(len(bands), -1))
    return np.concatenate(vals, 1), np.concatenate(oks, 1)


# CPU seconds per gap pixel at 256 context pixels, one thread of the 2-core development CPU
# (512² 3-band Landsat crop, 30 % cloud); cost grows about linearly with the context.
_CPU_SECONDS_PER_GAP_PIXEL = 125e-6


def plan(info: RasterInfo, bands: list[int], blocks: list[Block], opts: TileOptions, gap_pixels: int,
         gap_tiles: int, block_size: int, workers: int) -> dict[str, Any]:
    """What a dry run prints: blocks, tiles, context sizes, memory and time estimates."""
    side = block_size + 2 * opts.halo
    block_bytes = side * side * len(bands) * (8 + 1 + 8 + 8)  # values, mask, normalised, distance
    q = (opts.tile_size + 2 * opts.overlap) ** 2
    attn_bytes = 8192 * 4 * opts.max_context * (8 + 4 + 4)  # bias index, bias, logits per chunk
    cpu_seconds = gap_pixels * _CPU_SECONDS_PER_GAP_PIXEL * opts.max_context / 256
    return {
        "raster": f"{info.width}x{info.height}, {len(bands)} band(s), {info.dtype}",
        "blocks": len(blocks),
        "block_pixels_with_halo": f"{side}x{side}",
        "tiles_with_gaps": gap_tiles,
        "gap_pixels": gap_pixels,
        "context_per_tile": opts.max_context,
        "queries_per_tile_max": q,
        "processes": workers,
        "estimated_peak_memory_mb": round(workers * ((block_bytes + attn_bytes) / 2**20 + 400)),
        "estimated_cpu_seconds": round(cpu_seconds, 1),
        "estimated_seconds": round(cpu_seconds / workers, 1),
    }
