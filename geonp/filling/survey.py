"""Look at a raster before filling it: gap counts, a sample for normalisation, the dry-run plan.

``fill_raster`` counts the gaps block by block before any work (the progress total, the
``--dry-run`` report, and which blocks the fill reads: :class:`BlockCounts`), samples windows for
the normalisation statistics of a model that takes any band count, and, for ``--dry-run``,
estimates blocks, tiles, memory and time (:func:`plan`; the model's time by pricing the tiles of
some blocks with gaps, :func:`price_model`). Nothing here runs the model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from rasterio.windows import Window

from geonp.filling.tile_tasks import TileOptions
from geonp.io.observed import read_observed
from geonp.io.raster import RasterInfo
from geonp.tasks.tiling import Region

__all__ = ["BlockCounts", "GapReader", "count_gaps", "estimate_gaps", "plan", "price_model", "sample_for_stats", "sample_rows",
           "sample_windows", "time_estimate"]


class BlockCounts:
    """Gap pixels to fill and observed pixels (all bands) in each ``cell``-px block of a raster's grid.

    :func:`count_gaps` adds each block's counts (:func:`estimate_gaps`, those of its sampled rows).
    The fill routes its blocks by them (:meth:`route`, :mod:`geonp.filling.write_blocks`); the dry
    run prices the blocks with gaps (:func:`price_model`).
    """

    def __init__(self, height: int, width: int, cell: int) -> None:
        """Zero counts for the cells of a ``height`` x ``width`` grid."""
        self.cell = cell
        shape = (-(-height // cell), -(-width // cell))
        self.to_fill = np.zeros(shape, np.int64)
        self.observed = np.zeros(shape, np.int64)

    def add(self, block: Region, to_fill: np.ndarray, ok: np.ndarray) -> None:
        """Add a block's ``[bands, h, w]`` flags; it lies in one row of cells (a cell, or rows of pixels)."""
        r0, _, c0, c1 = block
        cells = np.arange(c0 // self.cell, (c1 - 1) // self.cell + 1)
        at = np.maximum(cells * self.cell, c0) - c0
        for counts, flags in ((self.to_fill, to_fill), (self.observed, ok)):
            counts[r0 // self.cell, cells] += np.add.reduceat(flags.sum(axis=(0, 1)), at)

    def of(self, block: Region) -> tuple[int, int]:
        """Gap pixels to fill and observed pixels of the cells a block overlaps."""
        r0, r1, c0, c1 = block
        s = self.cell
        cells = np.s_[r0 // s:(r1 - 1) // s + 1, c0 // s:(c1 - 1) // s + 1]
        return int(self.to_fill[cells].sum()), int(self.observed[cells].sum())

    def route(self, blocks: list[Region], *, skip_empty: bool) -> tuple[list[Region], list[Region]]:
        """The blocks with gaps to fill, and those to copy: with observed pixels (any, unless ``skip_empty``)."""
        counts = [self.of(block) for block in blocks]
        return ([b for b, (gaps, _) in zip(blocks, counts, strict=True) if gaps],
                [b for b, (gaps, seen) in zip(blocks, counts, strict=True) if not gaps and (seen or not skip_empty)])


@dataclass(frozen=True)
class GapReader:
    """How the survey reads a window of a raster file: its bands, nodata, extra gaps and footprint.

    Attributes:
        src: the open raster.
        info: its :class:`~geonp.io.raster.RasterInfo`.
        bands: 1-based bands read.
        nodata: the nodata value, or None.
        gaps_from: a window's extra gaps ``[h, w]`` (masks, QA), or None.
        fillable_from: a window's footprint ``[h, w]`` (where gaps may be filled), or None: all.
    """

    src: Any
    info: RasterInfo
    bands: list[int]
    nodata: float | None
    gaps_from: Callable[[Window], np.ndarray | None]
    fillable_from: Callable[[Window], np.ndarray] | None = None

    def read(self, win: Window) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """A window's observed flags and gaps ``[bands, h, w]`` (extra gaps applied), and where it may be filled."""
        _, ok = self.values(win)
        return ok, ~ok, None if self.fillable_from is None else self.fillable_from(win)[None]

    def values(self, win: Window) -> tuple[np.ndarray, np.ndarray]:
        """A window's values and observed flags ``[bands, h, w]``, extra gaps applied."""
        arr, ok = read_observed(self.src, win, self.bands, info=self.info, nodata=self.nodata)
        gap = self.gaps_from(win)
        if gap is not None:
            ok &= ~gap[None]
        return arr, ok


def count_gaps(reader: GapReader, blocks: list[Region], tile_size: int, outside: list[int] | None = None,
               counts: BlockCounts | None = None, progress: Callable[[int, int], None] | None = None
               ) -> tuple[int, int, int]:
    """Gap pixels, observed pixels and tiles with gaps (over all bands), block by block.

    With the reader's footprint only gaps inside it count; those outside are added to
    ``outside[0]``. ``counts`` gets each block's counts; ``progress`` hears
    ``(blocks done, blocks)``.
    """
    gap_pixels, obs_pixels, gap_tiles = 0, 0, 0
    for i, block in enumerate(blocks):
        ok, to_fill, inside = reader.read(Window.from_slices(*block.slices))
        if inside is not None:
            if outside is not None:
                outside[0] += int((to_fill & ~inside).sum())
            to_fill &= inside
        if counts is not None:
            counts.add(block, to_fill, ok)
        if progress is not None:
            progress(i + 1, len(blocks))
        gap_pixels += int(to_fill.sum())
        obs_pixels += int(ok.sum())
        if not to_fill.any():
            continue
        t = tile_size
        b, h, w = to_fill.shape  # rows of tiles first: a one-row block is not padded to a whole tile
        tile_rows = np.pad(to_fill, ((0, 0), (0, (-h) % t), (0, 0))).reshape(b, -1, t, w).any(axis=2)
        gap_tiles += int(np.pad(tile_rows, ((0, 0), (0, 0), (0, (-w) % t))).reshape(b, tile_rows.shape[1], -1, t)
                         .any(axis=3).sum())
    return gap_pixels, obs_pixels, gap_tiles


def sample_for_stats(reader: GapReader, counts: BlockCounts | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`sample_windows` of a raster file: its values and observed flags, extra gaps applied.

    A window after the first where the survey's ``counts`` saw no observed pixel is not read: it
    adds nothing to the sample (the strips of a sparse raster's nodata).
    """
    first = [True]
    n = len(reader.bands)

    def read(windows: list[Window]) -> list[tuple[np.ndarray, np.ndarray]]:
        out = []
        for win in windows:
            r0, c0, h, w = (int(v) for v in (win.row_off, win.col_off, win.height, win.width))
            if not first[0] and counts is not None and not counts.of(Region(r0, r0 + h, c0, c0 + w))[1]:
                out.append((np.zeros((n, 0)), np.zeros((n, 0), bool)))
                continue
            first[0] = False
            out.append(reader.values(win))
        return out

    return sample_windows(reader.info.height, reader.info.width, n, read)


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


# CPU seconds (one thread of the 2-core development CPU) of a fill's steps; benchmarks/dry_run.py
# compares the estimate with whole fills. A tile's task costs a fixed part, a part per pair of its
# context pixels and one per (query, context pixel) pair: fitted on 512² 3-band Landsat crops
# (clouds of 10-60 %, stripes of 15-30 %, 30-97 % dropped pixels), each within 16 % of its time.
_TASK_SECONDS = 2.2e-3
_CONTEXT_PAIR_SECONDS = 6.2e-8
_QUERY_PAIR_SECONDS = 1.0e-7
#: ... per pixel and band of a block with gaps read with its halo (normalising, distances, blending)
_BLOCK_SECONDS = 7e-8
#: ... per pixel and band of the exact survey (a huge raster's dry run only estimates its counts)
_SURVEY_SECONDS = 1.1e-8
#: ... per pixel and band of a block written (read, cast, compressed, read back: 1.1e-7 for the
#: copied blocks of a 4096² Landsat mosaic)
_WRITE_SECONDS = 1e-7
#: ... per pixel and band of the raster when the outputs are closed (GDAL writes the blocks never
#: written) and read back: 0.9e-8 for a sparse 30000² raster
_CLOSE_SECONDS = 1e-8


def task_seconds(observed: np.ndarray, to_fill: np.ndarray, origin: tuple[int, int], opts: TileOptions) -> float:
    """The model's CPU seconds on the gaps of a block ``[bands, h, w]`` (read without halo).

    Its tiles are split as the fill splits them, their queries lie on the lattice and their
    context sizes are the fill's (:func:`~geonp.filling.tile_tasks.block_tasks`' geometry, without
    choosing the context pixels); bands with one gap pattern share it.
    """
    from geonp.filling.tile_tasks import _pattern_groups, _tile_geometry
    from geonp.tasks.lattice import spacing_map

    h, w = observed.shape[1:]
    seconds = 0.0
    for group in _pattern_groups(observed, to_fill):
        seen = observed[group[0]]
        if not seen.any():
            continue
        spacing = spacing_map(seen, opts.lattice)
        for _, targets, spec, _ in _tile_geometry(seen, to_fill[group[0]], Region(0, h, 0, w), origin, opts, spacing):
            c = min(spec.n_near + spec.n_far, int(seen.sum()))
            seconds += len(group) * (_TASK_SECONDS + c * c * _CONTEXT_PAIR_SECONDS
                                     + targets.rows.size * c * _QUERY_PAIR_SECONDS)
    return seconds


def price_model(reader: GapReader, counts: BlockCounts, opts: TileOptions, gap_pixels: int, *,
                blocks: int = 8) -> float:
    """The model's CPU seconds on every gap: :func:`task_seconds` of up to ``blocks`` blocks with gaps.

    The blocks are spread over those the survey saw gaps in; their seconds per gap pixel price
    the ``gap_pixels`` of all.
    """
    cells = np.argwhere(counts.to_fill > 0)
    s, seconds, pixels = counts.cell, 0.0, 0
    for i, j in cells[np.unique(np.linspace(0, len(cells) - 1, min(blocks, len(cells))).astype(int))]:
        r0, c0 = int(i) * s, int(j) * s
        win = Window(c0, r0, min(s, reader.info.width - c0), min(s, reader.info.height - r0))
        ok, to_fill, inside = reader.read(win)
        if inside is not None:
            to_fill &= inside
        seconds += task_seconds(ok, to_fill, (r0, c0), opts)
        pixels += int(to_fill.sum())
    return seconds * gap_pixels / max(pixels, 1)


def time_estimate(info: RasterInfo, n_bands: int, fill_blocks: list[Region], copy_blocks: list[Region], halo: int,
                  *, spent: float, model: float, workers: int, surveyed: bool) -> dict[str, Any]:
    """A dry run's time estimate: CPU seconds of each step of the fill, and its wall seconds.

    Args:
        info: the raster.
        n_bands: bands filled.
        fill_blocks: blocks with gaps to fill (read with ``halo``, filled by ``workers`` processes).
        copy_blocks: blocks with observed pixels and no gap to fill (read, copied); blocks with
            neither are never read.
        halo: pixels read around a block with gaps.
        spent: CPU seconds this process has spent (starting, loading the model, the footprint,
            the survey), which the fill spends too.
        model: the model's CPU seconds (:func:`price_model`).
        workers: processes filling blocks.
        surveyed: the gaps were counted exactly (the fill's survey is in ``spent``).
    """
    px = info.width * info.height * n_bands
    h, w = _reads(info, fill_blocks, halo)
    written = sum((r1 - r0) * (c1 - c0) for r0, r1, c0, c1 in fill_blocks + copy_blocks) * n_bands
    steps = {"start": spent, "survey": 0.0 if surveyed else px * _SURVEY_SECONDS,
             "blocks": model + float((h * w).sum()) * n_bands * _BLOCK_SECONDS,
             "write": written * _WRITE_SECONDS + px * _CLOSE_SECONDS}
    parallel = max(1, min(workers, len(fill_blocks)))
    cpu = sum(steps.values())
    return {
        "estimated_cpu_seconds": round(cpu, 1),
        "estimated_seconds": round(cpu - steps["blocks"] * (1 - 1 / parallel), 1),
        "estimated_cpu_seconds_by_step": ", ".join(f"{k} {v:.1f}" for k, v in steps.items())
        + f" ({len(fill_blocks)} blocks with gaps over {parallel} process(es), {len(copy_blocks)} copied)",
    }


def plan(info: RasterInfo, bands: list[int], blocks: list[Region], opts: TileOptions, gap_pixels: int,
         gap_tiles: int, workers: int, *, sampled_rows: int | None = None,
         times: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a dry run prints: blocks, tiles, context sizes, memory and time estimates.

    The block size with its halo is that of the largest block, the halo clipped to the raster
    as the engine reads it. ``sampled_rows``: the gap counts are :func:`estimate_gaps`'s
    estimate from that many rows, and the plan says so. ``times``: :func:`time_estimate`.
    """
    h, w = _reads(info, blocks, opts.halo)
    i = int(np.argmax(h * w))  # the largest block read
    block_h, block_w = int(h[i]), int(w[i])
    block_bytes = block_h * block_w * len(bands) * (8 + 1 + 8 + 8)  # values, mask, normalised, distance
    q = (opts.tile_size + 2 * opts.overlap) ** 2
    attn_bytes = 8192 * 4 * opts.max_context * (8 + 4 + 4)  # bias index, bias, logits per chunk
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
        **(times or {}),
    }


def _reads(info: RasterInfo, blocks: list[Region], halo: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows and columns of each block read with its halo, clipped to the raster."""
    spans = np.array(blocks, dtype=np.int64).reshape(-1, 4)  # [n, 4]: r0, r1, c0, c1
    h = np.minimum(info.height, spans[:, 1] + halo) - np.maximum(0, spans[:, 0] - halo)
    w = np.minimum(info.width, spans[:, 3] + halo) - np.maximum(0, spans[:, 2] - halo)
    return h, w


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


def estimate_gaps(reader: GapReader, rows: np.ndarray, tile_size: int, outside: list[int] | None = None,
                  counts: BlockCounts | None = None, progress: Callable[[int, int], None] | None = None
                  ) -> tuple[int, int, int]:
    """:func:`count_gaps`'s counts estimated from whole rows of the raster (:func:`sample_rows`).

    Each sampled row stands for ``height / len(rows)`` rows. A tile row with a gap in the sampled
    row is taken to hold that many tiles with gaps; so scattered single-pixel gaps make the tile
    count low, which a dry run states. When no sampled pixel is observed (data in a small part of
    a huge grid, between the rows), the counts are made exactly instead. ``counts`` gets the
    sampled rows' counts (unscaled), or the exact ones.
    """
    info = reader.info
    one_row_blocks = [Region(int(r), int(r) + 1, 0, info.width) for r in rows]
    sampled_outside = [0]
    gap, obs, tiles = count_gaps(reader, one_row_blocks, tile_size, sampled_outside, counts, progress)
    if obs == 0:
        from geonp.filling.pool import plan_blocks

        if counts is not None:
            counts.to_fill[:] = 0
        exact = plan_blocks(info.height, info.width, max(512, tile_size) if counts is None else counts.cell)
        return count_gaps(reader, exact, tile_size, outside, counts, progress)
    scale = info.height / len(one_row_blocks)
    if outside is not None:
        outside[0] += round(sampled_outside[0] * scale)
    return round(gap * scale), round(obs * scale), round(tiles * scale / tile_size)
