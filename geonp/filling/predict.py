"""Predict the gap pixels of a block: tiles -> tasks -> batched model calls -> blended maps.

Everything here works on arrays already in memory for one *block* (a region plus a halo around
it), so memory is bounded by the block size, not the raster size. The work is split in three
steps that training and filling share where they can:

1. :func:`block_tasks` cuts the block into tiles laid on the raster's global grid and turns each
   tile's gaps into a :class:`TileTask` (context choice, coordinates, standardisation); a tile's
   task is the same whichever block builds it, so blocks leave no seams.
2. :class:`Predictor` runs all tasks of a block: sorted by size, packed into large batches under
   a row budget, with as few model calls as possible, and blends the tiles' predictions by
   scatter-add (on the model's device).
3. :func:`reference_predict` is the slow, obviously correct twin: one model call per tile and a
   plain ``np.add.at`` blend. Tests tie the two together.
"""

from __future__ import annotations

import copy
import functools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from scipy import ndimage

from geonp.data.tasks import ReferenceBand, Task, collate, context_points, positions, standardize
from geonp.tasks.context import ContextSpec
from geonp.tasks.lattice import TileTargets, read_off, spacing_map, tile_targets
from geonp.tasks.tiling import Tile


@dataclass(frozen=True)
class TileOptions:
    """How a raster is cut into tiles and how much context each gets.

    Attributes:
        tile_size: core edge in pixels.
        overlap: blend margin in pixels around each core.
        max_context: observed pixels per tile, nearest first.
        search_radius: farthest a tile looks for context, in pixels beyond its query window.
        n_far: far context pixels over ``rings`` x ``sectors`` (:class:`geonp.tasks.context.ContextSpec`).
        rings: distance rings of the far set.
        sectors: angular sectors of the far set.
        n_ref: multi-date: pixels per reference date and tile.
        ref_margin: multi-date: pixels beyond the query window a reference contributes.
        temporal: the model takes dates (3-D coordinates: row, col, days from the target's date).
        near_overlap: blend margin of gap pixels near data (None: ``overlap``; :mod:`geonp.tasks.lattice`).
        lattice: ``(distance, spacing)`` pairs: beyond each distance to data, gap pixels are read
            off a lattice of that spacing (:mod:`geonp.tasks.lattice`); empty: every pixel predicted.
    """

    tile_size: int = 48
    overlap: int = 8
    max_context: int = 256
    search_radius: int = 512
    n_far: int = 0
    rings: int = 8
    sectors: int = 16
    n_ref: int = 1024
    ref_margin: int = 4
    temporal: bool = False
    near_overlap: int | None = None
    lattice: tuple[tuple[float, int], ...] = ()

    def __post_init__(self) -> None:
        """Check the fields; a bad value raises ValueError naming it."""
        if self.tile_size < 4 or self.overlap < 0 or self.max_context < 1 or self.search_radius < 1:
            raise ValueError(
                f"tile_size={self.tile_size} (>= 4), overlap={self.overlap} (>= 0), "
                f"max_context={self.max_context} (>= 1), search_radius={self.search_radius} (>= 1)"
            )

    @property
    def context(self) -> ContextSpec:
        """The context geometry of a tile (the same rule training uses)."""
        return ContextSpec(n_near=self.max_context, n_far=self.n_far, search_radius=self.search_radius,
                           rings=self.rings, sectors=self.sectors, n_ref=self.n_ref, ref_margin=self.ref_margin)

    @property
    def halo(self) -> int:
        """Pixels a block must be read beyond its region so that every tile finds its context.

        A tile whose query window touches the region starts up to ``tile_size + 2 * overlap``
        pixels before it, and searches ``search_radius`` pixels beyond its query window.
        """
        return self.search_radius + 2 * self.overlap + self.tile_size


@dataclass(frozen=True)
class BlockReference:
    """Another date on a block's window (multi-date fills).

    Attributes:
        values: ``[bands, h, w]`` in the target's normalised units (anything where not observed).
        observed: bool ``[bands, h, w]``.
        days: date offset from the target's date (negative = before it).
    """

    values: np.ndarray
    observed: np.ndarray
    days: float


@dataclass
class TileTask:
    """One tile of one band, ready for the model.

    Attributes:
        band: index of the band in the block.
        task: coordinates relative to the query window's corner, standardised context values.
        index: ``[Nt]`` flat index of each target in the ``[bands, region rows, region cols]``
            output.
        weights: ``[Nt]`` blend weight of each target (1 on the tile core).
        core: targets on the tile's core (each gap pixel is on exactly one core).
        src: ``[n_out, 4]`` rows of the task's targets each output is read off, or None (output
            ``i`` is target ``i``); coef: their bilinear weights (:mod:`geonp.tasks.lattice`).
    """

    band: int
    task: Task
    index: np.ndarray
    weights: np.ndarray
    core: int
    src: np.ndarray | None = None
    coef: np.ndarray | None = None


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


def block_tiles(region: tuple[int, int, int, int], origin: tuple[int, int], opts: TileOptions) -> list[Tile]:
    """Tiles (in block coordinates) whose query window touches ``region``, on the global grid.

    Tiles are laid on the *global* grid so that every block cuts the same tiles; a tile on the
    region's edge is shared with the neighbouring block, each predicting its own pixels.
    """
    r0, r1, c0, c1 = region
    size, o = opts.tile_size, opts.overlap
    first_r = ((origin[0] + r0 - o) // size) * size
    first_c = ((origin[1] + c0 - o) // size) * size
    return [
        Tile(tr - origin[0], tc - origin[1], size, size, o)
        for tr in range(first_r, origin[0] + r1 + o, size)
        for tc in range(first_c, origin[1] + c1 + o, size)
    ]


def band_tasks(
    values: np.ndarray,
    observed: np.ndarray,
    to_fill: np.ndarray,
    region: tuple[int, int, int, int],
    *,
    origin: tuple[int, int],
    opts: TileOptions,
    band: int | Sequence[int] = 0,
    limit: int | None = None,
    references: Sequence[ReferenceBand] = (),
    spacing: np.ndarray | None = None,
) -> list[TileTask]:
    """The tasks of one band of a block, or of bands that share one gap pattern.

    Args:
        values: ``[h, w]`` normalised values of the block (anything where not observed), or
            ``[len(band), h, w]`` for bands that share ``observed`` and ``to_fill``: their tiles,
            context pixels and targets are worked out once; the block stops at the raster's edge,
            since tiles clip their query windows to it.
        observed: bool ``[h, w]``, True where a pixel may serve as context.
        to_fill: bool ``[h, w]``, True where a prediction is wanted (halo included: it shapes the
            context choice and the splits of tiles near the region's edge as in the neighbouring
            block).
        region: ``(r0, r1, c0, c1)`` of the block's own pixels (the rest is halo).
        origin: the block's offset in the full raster.
        opts: tiling options.
        band: the band's index in the block (for the output index), or the indices of the bands
            of ``values [bands, h, w]``.
        limit: the largest context search radius the block array holds
            (:func:`geonp.tasks.context.select_context`).
        references: this band of other dates (multi-date models; ``opts.temporal``; one band).
        spacing: lattice spacing per pixel (:func:`geonp.tasks.lattice.spacing_map`), or None.

    Returns:
        Per tile (or split tile) with gap pixels in the region and some context, one task per band.
    """
    bands = [band] if isinstance(band, int | np.integer) else list(band)
    values = values[None] if values.ndim == 2 else values
    r0, r1, c0, c1 = region
    rh, rw = r1 - r0, c1 - c0
    out: list[TileTask] = []
    for window, tt, spec in _tile_geometry(observed, to_fill, region, origin, opts, spacing):
        qr0, qr1, qc0, qc1 = window
        # the rule training uses (geonp.data.tasks.context_points)
        crow, ccol, days, y, n_target = context_points(values, observed, to_fill, window, spec, origin=origin,
                                                       limit=limit, references=references)
        if crow.size == 0:
            continue
        # Coordinates relative to the query window's corner: what training patches look like, and
        # for translation-invariant models (scan) the same result as absolute coordinates, with
        # small squared-distance tables for the bias.
        timed = opts.temporal
        xc = positions(crow, ccol, (qr0, qc0), days if timed else None)
        xt = positions(tt.rows, tt.cols, (qr0, qc0), np.zeros(tt.rows.size) if timed else None)
        core = int(np.count_nonzero(tt.weights >= 1.0))
        for j, b in enumerate(bands):
            # band by band: the same arithmetic whether a band shares its geometry or not
            yc, _, shift, scale = standardize(np.ascontiguousarray(y[:, j:j + 1]), None, n_target)
            task = Task(xc=xc, yc=yc.astype(np.float32), xt=xt, yt=None, shift=shift, scale=scale)
            index = (b * rh + (tt.out_rows - r0)) * rw + (tt.out_cols - c0)
            out.append(TileTask(b, task, index.astype(np.int64), tt.weights, core, tt.src, tt.coef))
    return out


def _tile_geometry(observed: np.ndarray, to_fill: np.ndarray, region: tuple[int, int, int, int],
                   origin: tuple[int, int], opts: TileOptions, spacing: np.ndarray | None
                   ) -> Iterator[tuple[tuple[int, int, int, int], TileTargets, ContextSpec]]:
    """Each tile's query window, targets and context geometry (what depends on the gap pattern alone)."""
    r0, r1, c0, c1 = region
    h, w = observed.shape
    work = list(reversed(block_tiles(region, origin, opts)))
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
        trow, tcol = np.nonzero(to_fill[rr0:rr1, cc0:cc1])
        tt = tile_targets(trow + rr0, tcol + cc0, tile, spacing=spacing, near_overlap=opts.near_overlap,
                          origin=origin, shape=(h, w))
        if tt.out_rows.size == 0:  # its gaps lie beyond its margins (near data: a narrower one)
            continue
        yield (qr0, qr1, qc0, qc1), tt, opts.context


def block_tasks(
    values: np.ndarray,
    observed: np.ndarray,
    to_fill: np.ndarray,
    region: tuple[int, int, int, int],
    *,
    origin: tuple[int, int],
    opts: TileOptions,
    limit: int | None = None,
    references: Sequence[BlockReference] = (),
) -> list[TileTask]:
    """The tasks of every band of a block (``values``, ``observed``, ``to_fill``: ``[bands, h, w]``).

    ``references``: other dates on the block's window (multi-date models only). Bands with the
    same gap pattern (the common case: a cloud hides every band) share their tiles' geometry.
    """
    if references and not opts.temporal:
        raise ValueError("references need a multi-date model (TileOptions.temporal)")
    tasks: list[TileTask] = []
    for group in _pattern_groups(observed, to_fill, shared=not references):
        b = group[0]
        refs = [ReferenceBand(r.values[b][None], r.observed[b], r.days) for r in references]
        if to_fill[b].any() and (observed[b].any() or any(r.observed.any() for r in refs)):
            # a pixel a reference observes is near data too
            seen = functools.reduce(np.logical_or, [r.observed for r in refs], observed[b])
            tasks += band_tasks(values[group], observed[b], to_fill[b], region, origin=origin, opts=opts,
                                band=group, limit=limit, references=refs, spacing=spacing_map(seen, opts.lattice))
    return tasks


def _pattern_groups(observed: np.ndarray, to_fill: np.ndarray, *, shared: bool) -> list[list[int]]:
    """Band indices grouped by gap pattern (equal ``observed`` and ``to_fill``); one band per group
    unless ``shared``."""
    groups: list[list[int]] = []
    for b in range(observed.shape[0]):
        same = next((g for g in groups if shared and np.array_equal(observed[g[0]], observed[b])
                     and np.array_equal(to_fill[g[0]], to_fill[b])), None)
        if same is None:
            groups.append([b])
        else:
            same.append(b)
    return groups


def pack(sizes: Sequence[int], batch_rows: int, *, max_tiles: int = 1024) -> list[list[int]]:
    """Group task indices into batches of similar size.

    Tasks are sorted by size (largest first) and cut into runs whose padded rows (tasks x the run's
    largest size) stay within ``batch_rows``; a task larger than the budget runs alone.
    """
    order = sorted(range(len(sizes)), key=lambda i: -sizes[i])
    batches: list[list[int]] = []
    for i in order:
        if batches and (len(batches[-1]) + 1) * sizes[batches[-1][0]] <= batch_rows \
                and len(batches[-1]) < max_tiles:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


class Predictor:
    """Runs the tasks of blocks through a model: sorted, packed, batched, blended on the device.

    Built once per process (or Dask worker) and reused for every block.

    Args:
        module: a per-band model (``dim_y = 1``) with ``forward(xc, yc, xt, context_valid,
            query_chunk=)``.
        opts: tiling options.
        device: where the model runs.
        batch_rows: padded query rows (tiles x targets) per model call.
        chunk_rows: query rows the model decodes at a time inside a call (bounds attention memory).
    """

    def __init__(self, module: torch.nn.Module, opts: TileOptions, device: torch.device | str = "cpu", *,
                 batch_rows: int = 32768, chunk_rows: int | None = None) -> None:
        """Keep the module on ``device`` and size batches by ``batch_rows`` padded query rows."""
        self.device = torch.device(device)
        on_device = all(p.device == self.device for p in module.parameters())
        # a copy on another device: the caller's module stays where it is
        self.module = (module if on_device else copy.deepcopy(module).to(self.device)).eval()
        self.opts = opts
        self.batch_rows = batch_rows
        self.chunk_rows = chunk_rows or (batch_rows if self.device.type == "cuda" else 8192)
        #: seconds spent per stage (``context``, ``model``, ``blend``), accumulated over calls
        self.timings: dict[str, float] = {"context": 0.0, "model": 0.0, "blend": 0.0}

    def predict(
        self,
        values: np.ndarray,
        observed: np.ndarray,
        to_fill: np.ndarray,
        region: tuple[int, int, int, int],
        *,
        origin: tuple[int, int],
        progress: Callable[[int], None] | None = None,
        limit: int | None = None,
        references: Sequence[BlockReference] = (),
    ) -> tuple[np.ndarray, np.ndarray]:
        """Predict the ``to_fill`` pixels of a block's region (all bands).

        Args:
            values: ``[bands, h, w]`` normalised values (anything where not observed).
            observed: bool ``[bands, h, w]``.
            to_fill: bool ``[bands, h, w]``.
            region: ``(r0, r1, c0, c1)`` of the block's own pixels.
            origin: the block's offset in the full raster.
            progress: called with the number of region gap pixels (tile cores) done per batch.
            limit: the largest context search radius the block's halo holds; a tile that needs
                more raises :class:`HaloTooSmall` before any model call.
            references: other dates on the block's window (multi-date models).

        Returns:
            ``(mean, std)``, each ``[bands, r1 - r0, c1 - c0]``, normalised units, NaN where not
            filled.
        """
        t0 = time.perf_counter()
        tasks = block_tasks(values, observed, to_fill, region, origin=origin, opts=self.opts, limit=limit,
                            references=references)
        self.timings["context"] += time.perf_counter() - t0
        return self.run(tasks, (values.shape[0], region[1] - region[0], region[3] - region[2]), progress)

    def run(self, tasks: Sequence[TileTask], shape: tuple[int, int, int],
            progress: Callable[[int], None] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Run ``tasks`` and blend them into ``(mean, std)`` maps of ``shape``."""
        n = int(np.prod(shape))
        dev = self.device
        acc = torch.zeros((3, n), dtype=torch.float64, device=dev)  # weighted mean, weighted std, weight
        # Multi-date tasks have large contexts (reference pixels): their batches are sized by the
        # context too, which bounds the context stream's attention tiles.
        sizes = [max(t.task.xt.shape[0], t.task.xc.shape[0]) if self.opts.temporal else t.task.xt.shape[0]
                 for t in tasks]
        for batch in pack(sizes, self.batch_rows):
            t0 = time.perf_counter()
            group = [tasks[i] for i in batch]
            b = collate([t.task for t in group]).to(dev)
            chunk = max(1, self.chunk_rows // len(group))
            with torch.inference_mode():
                mean, std = self.module(b.xc, b.yc, b.xt, b.context_valid, query_chunk=chunk)
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)  # one sync per batch, for honest stage timings
            t1 = time.perf_counter()
            self.timings["model"] += t1 - t0
            shift = torch.tensor([float(t.task.shift[0]) for t in group], device=dev)[:, None]
            scale = torch.tensor([float(t.task.scale[0]) for t in group], device=dev)[:, None]
            valid = b.target_valid
            index = torch.from_numpy(np.concatenate([t.index for t in group])).to(dev)
            wts = torch.from_numpy(np.concatenate([t.weights for t in group])).to(dev)
            m = (mean[..., 0] * scale + shift)[valid].double()
            s = (std[..., 0] * scale)[valid].double()
            if any(t.src is not None for t in group):
                src, coef = _read_off_rows(group)
                src, coef = torch.from_numpy(src).to(dev), torch.from_numpy(coef).to(dev)
                m, s = (m[src] * coef).sum(1), (s[src] * coef).sum(1)
            acc.index_add_(1, index, torch.stack([wts * m, wts * s, wts]))
            self.timings["blend"] += time.perf_counter() - t1
            if progress is not None:
                progress(sum(t.core for t in group))
        t0 = time.perf_counter()
        out = _normalise_blend(acc.cpu().numpy(), shape)
        self.timings["blend"] += time.perf_counter() - t0
        return out


def _read_off_rows(group: Sequence[TileTask]) -> tuple[np.ndarray, np.ndarray]:
    """``src``/``coef`` of a batch's tasks as rows of its concatenated targets (identity where None)."""
    srcs, coefs, offset = [], [], 0
    for t in group:
        n = t.task.xt.shape[0]
        if t.src is None:
            srcs.append(np.repeat(np.arange(offset, offset + n)[:, None], 4, 1))
            coefs.append(np.tile([1.0, 0.0, 0.0, 0.0], (n, 1)))
        else:
            srcs.append(t.src + offset)
            coefs.append(t.coef)
        offset += n
    return np.concatenate(srcs), np.concatenate(coefs)


def _normalise_blend(acc: np.ndarray, shape: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    w = acc[2]
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(w > 0, acc[0] / w, np.nan).reshape(shape)
        std = np.where(w > 0, acc[1] / w, np.nan).reshape(shape)
    return mean, std


def reference_predict(module: torch.nn.Module, tasks: Sequence[TileTask], shape: tuple[int, int, int]
                      ) -> tuple[np.ndarray, np.ndarray]:
    """The Predictor's slow twin: one model call per tile, blended with ``np.add.at``."""
    acc = np.zeros((3, int(np.prod(shape))))
    for t in tasks:
        b = collate([t.task])
        with torch.no_grad():
            mean, std = module(b.xc, b.yc, b.xt, b.context_valid)
        m = read_off(mean[0, :, 0].double().numpy() * t.task.scale[0] + t.task.shift[0], t.src, t.coef)
        s = read_off(std[0, :, 0].double().numpy() * t.task.scale[0], t.src, t.coef)
        np.add.at(acc[0], t.index, t.weights * m)
        np.add.at(acc[1], t.index, t.weights * s)
        np.add.at(acc[2], t.index, t.weights)
    return _normalise_blend(acc, shape)
