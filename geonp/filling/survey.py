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

from geonp.filling.engine import Block
from geonp.filling.tile_tasks import TileOptions
from geonp.io.observed import read_observed
from geonp.io.raster import RasterInfo

__all__ = ["count_gaps", "estimate_gaps", "plan", "sample_for_stats", "sample_rows", "sample_windows"]


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
        b, h, w = to_fill.shape  # rows of tiles first: a one-row block is not padded to a whole tile
        tile_rows = np.pad(to_fill, ((0, 0), (0, (-h) % t), (0, 0))).reshape(b, -1, t, w).any(axis=2)
        gap_tiles += int(np.pad(tile_rows, ((0, 0), (0, 0), (0, (-w) % t))).reshape(b, tile_rows.shape[1], -1, t)
                         .any(axis=3).sum())
    return gap_pixels, obs_pixels, gap_tiles


def sample_for_stats(src: Any, info: RasterInfo, bands: list[int], nodata: float | None,
                     gaps_from: Callable[[Window], np.ndarray | None]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`sample_windows` of a raster file: its values and observed flags, extra gaps applied."""

    def read(windows: list[Window]) -> list[tuple[np.ndarray, np.ndarray]]:
        out = []
        for win in windows:
            arr, ok = read_observed(src, win, bands, info=info, nodata=nodata)
            gap = gaps_from(win)
            if gap is not None:
                ok &= ~gap[None]
            out.append((arr, ok))
        return out

    return sample_windows(info.height, info.width, len(bands), read)


def sample_windows(height: int, width: int, n_bands: int,
                   read: Callable[[list[Window]], list[tuple[np.ndarray, np.ndarray]]]
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Up to 16 windows of 256 px spread over the input, for normalisation statistics.

    A band the windows see no observed pixel of (a sparse input) is searched for in strips of
    the whole input, until every band has one or the input ends. The file fill
    (:func:`sample_for_stats`) and the Dask fill (:mod:`geonp.filling.arrays`) sample the same
    pixels of the same input, so they fit the same normaliser.

    Args:
        height: rows of the input.
        width: columns of the input.
        n_bands: bands of the input.
        read: ``[bands, h, w]`` values and observed flags of each window asked, in order (a
            list, so that a lazy input computes the windows together).

    Returns:
        ``([bands, n] values, [bands, n] observed)``: the first window whole, then the pixels of
        the others observed in some band.
    """
    size = 256
    rows = np.linspace(0, max(0, height - size), 4).astype(int)
    cols = np.linspace(0, max(0, width - size), 4).astype(int)
    vals: list[np.ndarray] = []
    oks: list[np.ndarray] = []

    def take(windows: list[Window]) -> None:
        for arr, ok in read(windows):
            keep = ok.reshape(n_bands, -1).any(axis=0) if vals else slice(None)
            vals.append(arr.reshape(n_bands, -1)[:, keep])
            oks.append(ok.reshape(n_bands, -1)[:, keep])

    take([Window(c, r, min(size, width), min(size, height)) for r in sorted(set(rows)) for c in sorted(set(cols))])
    strip = max(1, (1 << 20) // max(1, width))
    for r0 in range(0, height, strip):
        if np.concatenate(oks, 1).any(axis=1).all():
            break
        take([Window(0, r0, width, min(strip, height - r0))])
    return np.concatenate(vals, 1), np.concatenate(oks, 1)


# CPU seconds per gap pixel at 256 context pixels, one thread of the 2-core development CPU
# (512² 3-band Landsat crops, 30 % cloud or stripes: 9.4-10.8 s for 0.24 Mpx of band-gaps with the
# lattice and the 3-block near model; dropped pixels cost less); cost grows about linearly with
# the context.
_CPU_SECONDS_PER_GAP_PIXEL = 45e-6


def plan(info: RasterInfo, bands: list[int], blocks: list[Block], opts: TileOptions, gap_pixels: int,
         gap_tiles: int, block_size: int, workers: int, *, sampled_rows: int | None = None) -> dict[str, Any]:
    """What a dry run prints: blocks, tiles, context sizes, memory and time estimates.

    The block size with its halo is that of the largest block, the halo clipped to the raster
    as the engine reads it. ``sampled_rows``: the gap counts are :func:`estimate_gaps`'s
    estimate from that many rows, and the plan says so.
    """
    block_h, block_w = _largest_read(info, blocks, opts.halo)
    block_bytes = block_h * block_w * len(bands) * (8 + 1 + 8 + 8)  # values, mask, normalised, distance
    q = (opts.tile_size + 2 * opts.overlap) ** 2
    attn_bytes = 8192 * 4 * opts.max_context * (8 + 4 + 4)  # bias index, bias, logits per chunk
    cpu_seconds = gap_pixels * _CPU_SECONDS_PER_GAP_PIXEL * opts.max_context / 256
    counts: dict[str, str] = {}
    if sampled_rows is not None:
        counts["counts"] = (f"estimated from {sampled_rows} evenly spaced rows of {info.height} (the raster "
                            f"has more than {EXACT_COUNT_PIXELS // 2**20} Mpx; gaps between those rows are "
                            "not seen); the fill counts exactly")
    return {
        "raster": f"{info.width}x{info.height}, {len(bands)} band(s), {info.dtype}",
        **counts,
        "blocks": len(blocks),
        "block_pixels_with_halo": f"{block_w}x{block_h}",
        "tiles_with_gaps": gap_tiles,
        "gap_pixels": gap_pixels,
        "context_per_tile": opts.max_context,
        "queries_per_tile_max": q,
        "processes": workers,
        "estimated_peak_memory_mb": round(workers * ((block_bytes + attn_bytes) / 2**20 + 400)),
        "estimated_cpu_seconds": round(cpu_seconds, 1),
        "estimated_seconds": round(cpu_seconds / workers, 1),
    }


def _largest_read(info: RasterInfo, blocks: list[Block], halo: int) -> tuple[int, int]:
    """Rows and columns of the largest block read with its halo, clipped to the raster."""
    if not blocks:
        return 0, 0
    spans = np.array(blocks, dtype=np.int64)  # [n, 4]: r0, r1, c0, c1
    h = np.minimum(info.height, spans[:, 1] + halo) - np.maximum(0, spans[:, 0] - halo)
    w = np.minimum(info.width, spans[:, 3] + halo) - np.maximum(0, spans[:, 2] - halo)
    i = int(np.argmax(h * w))
    return int(h[i]), int(w[i])


#: A dry run counts the gaps of rasters up to this many pixels exactly; it estimates them for
#: larger ones (:func:`estimate_gaps`), where an exact count reads the whole raster (minutes).
EXACT_COUNT_PIXELS = 2**27
#: Pixels :func:`estimate_gaps` reads, in whole rows.
SAMPLE_PIXELS = 2**24


def sample_rows(info: RasterInfo, *, exact_pixels: int = EXACT_COUNT_PIXELS,
                sample_pixels: int = SAMPLE_PIXELS) -> np.ndarray | None:
    """The rows a dry run estimates its counts from, or None when it counts every pixel.

    Evenly spaced whole rows (the centre row of each of ``n`` equal bands of rows): they read
    fast from striped and tiled files alike, and every column of the raster is in the sample.
    """
    if info.width * info.height <= exact_pixels:
        return None
    n = int(np.clip(sample_pixels // max(1, info.width), 16, info.height))
    return np.unique(((np.arange(n) + 0.5) * info.height / n).astype(np.int64))


def estimate_gaps(src: Any, info: RasterInfo, bands: list[int], nodata: float | None,
                  gaps_from: Callable[[Window], np.ndarray | None], rows: np.ndarray, tile_size: int,
                  fillable_from: Callable[[Window], np.ndarray] | None = None,
                  outside: list[int] | None = None) -> tuple[int, int, int]:
    """:func:`count_gaps`'s counts estimated from whole rows of the raster (:func:`sample_rows`).

    Each sampled row stands for ``height / len(rows)`` rows. A tile row with a gap in the sampled
    row is taken to hold that many tiles with gaps; so scattered single-pixel gaps make the tile
    count low, which a dry run states. When no sampled pixel is observed (data in a small part of
    a huge grid, between the rows), the counts are made exactly instead.
    """
    one_row_blocks = [(int(r), int(r) + 1, 0, info.width) for r in rows]
    sampled_outside = [0]
    gap, obs, tiles = count_gaps(src, info, bands, nodata, gaps_from, one_row_blocks, tile_size,
                                 fillable_from, sampled_outside)
    if obs == 0:
        from geonp.filling.pool import plan_blocks

        exact = plan_blocks(info.height, info.width, max(512, tile_size))
        return count_gaps(src, info, bands, nodata, gaps_from, exact, tile_size, fillable_from, outside)
    scale = info.height / len(one_row_blocks)
    if outside is not None:
        outside[0] += round(sampled_outside[0] * scale)
    return round(gap * scale), round(obs * scale), round(tiles * scale / tile_size)
