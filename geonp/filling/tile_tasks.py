"""A block's tiles and their tasks: what the model is asked, tile by tile.

:func:`block_tasks` cuts a block into tiles laid on the raster's global grid (split in four where
a tile's gaps would find too few neighbours in its context) and turns each tile's gaps into a
:class:`TileTask` (context choice, coordinates, standardisation, the lattice's targets). Bands that
share a gap pattern share the tiles' geometry. A tile's task is the same whichever block builds
it, so blocks leave no seams. :mod:`geonp.filling.predict` runs the tasks.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from geonp.data.tasks import (
    ReferenceView,
    Task,
    context_values,
    positions,
    reference_columns,
    standardize_bands,
)
from geonp.filling.block_input import BlockInput
from geonp.tasks.block_context import select_contexts
from geonp.tasks.context import ContextSpec
from geonp.tasks.lattice import TileTargets, spacing_map, tile_targets
from geonp.tasks.tiling import Region, Tile

__all__ = ["BandGroup", "TileOptions", "TileTask", "band_tasks", "block_tasks", "block_tiles"]


@dataclass(frozen=True)
class TileOptions:
    """How a raster is cut into tiles and how much context each gets.

    Attributes:
        tile_size: core edge in pixels.
        overlap: blend margin in pixels around each core.
        context: the context geometry of a tile (:class:`~geonp.tasks.context.ContextSpec`, the
            same rule training uses): observed pixels nearest first, far pixels over rings and
            sectors, how far a tile looks, reference pixels of a multi-date fill.
        temporal: the model takes dates (3-D coordinates: row, col, days from the target's date).
        near_overlap: blend margin of gap pixels near data (None: ``overlap``; :mod:`geonp.tasks.lattice`).
        lattice: ``(distance, spacing)`` pairs: beyond each distance to data, gap pixels are read
            off a lattice of that spacing (:mod:`geonp.tasks.lattice`); empty: every pixel predicted.
        near_far: far context pixels (at most) of a tile whose gaps all lie within the lattice's
            first distance of data (None: the context's ``n_far``; needs a lattice).
        near_context: near context pixels of such a tile, or the observed neighbours of its gaps
            where those are more (at most the context's ``n_near``; None: ``n_near``; needs a
            lattice): the ``near_context`` of a model trained with near batches
            (:class:`geonp.training.windows.TaskShape`).
        min_split: a tile whose gaps' neighbours are more than its context takes is split in four
            down to this edge (pixels), not below.
        mid_overlap: blend margin of gap pixels on the lattice's finest spacing, 2 px (None:
            ``overlap``; :mod:`geonp.tasks.lattice`).
        far_context: near context pixels of a tile that is not near data (None: the context's
            ``n_near``, which also stays the cap of the rule that splits tiles).
    """

    tile_size: int = 48
    overlap: int = 8
    context: ContextSpec = field(default_factory=ContextSpec)
    temporal: bool = False
    near_overlap: int | None = None
    lattice: tuple[tuple[float, int], ...] = ()
    near_far: int | None = None
    near_context: int | None = None
    min_split: int = 12
    mid_overlap: int | None = None
    far_context: int | None = None

    def __post_init__(self) -> None:
        """Check the fields; a bad value raises ValueError naming it."""
        if self.tile_size < 4 or self.overlap < 0:
            raise ValueError(f"tile_size={self.tile_size} (>= 4), overlap={self.overlap} (>= 0)")

    @property
    def max_context(self) -> int:
        """Observed pixels per tile, nearest first (the context's ``n_near``)."""
        return self.context.n_near

    @property
    def search_radius(self) -> int:
        """Farthest a tile looks for context, in pixels beyond its query window."""
        return self.context.search_radius

    @property
    def halo(self) -> int:
        """Pixels a block must be read beyond its region so that every tile finds its context.

        A tile whose query window touches the region starts up to ``tile_size + 2 * overlap``
        pixels before it, and searches ``search_radius`` pixels beyond its query window.
        """
        return self.search_radius + 2 * self.overlap + self.tile_size


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
        near: every gap pixel of the tile's query window lies within the lattice's first
            distance of data (:data:`~geonp.tasks.lattice.NEAR_DISTANCE`; False without a
            lattice): a model's near model runs it (:attr:`LoadedModel.near
            <geonp.model_files.checkpoint.LoadedModel.near>`).
    """

    band: int
    task: Task
    index: np.ndarray
    weights: np.ndarray
    core: int
    src: np.ndarray | None = None
    coef: np.ndarray | None = None
    near: bool = False


def _neighbours(observed: np.ndarray, to_fill: np.ndarray, qb: tuple[int, int, int, int], beyond: int = 0) -> int:
    """Observed pixels that touch (8-neighbourhood) a pixel to fill of a query window.

    ``beyond``: also count those up to this many pixels outside the window (1: every pixel the
    near set takes first, :func:`geonp.tasks.context.select_context`).
    """
    h, w = observed.shape
    r0, r1, c0, c1 = qb
    s0, s1, t0, t1 = max(r0 - beyond, 0), min(r1 + beyond, h), max(c0 - beyond, 0), min(c1 + beyond, w)
    q = np.zeros((s1 - s0, t1 - t0), bool)
    q[r0 - s0:r1 - s0, c0 - t0:c1 - t0] = to_fill[r0:r1, c0:c1]
    return int(np.count_nonzero(dilate8(q) & observed[s0:s1, t0:t1]))


def dilate8(mask: np.ndarray) -> np.ndarray:
    """``mask`` dilated by the 3x3 square (8-neighbourhood), nothing beyond its edges.

    The square is separable: rows, then columns (``ndimage.binary_dilation`` with a 3x3
    structure is its slow twin, several times slower on a tile's window).
    """
    rows = mask.copy()
    rows[1:] |= mask[:-1]
    rows[:-1] |= mask[1:]
    out = rows.copy()
    out[:, 1:] |= rows[:, :-1]
    out[:, :-1] |= rows[:, 1:]
    return out


def _quarters(tile: Tile) -> list[Tile]:
    """Four sub-tiles of a tile, with an overlap scaled to their size."""
    h1, w1 = tile.height // 2, tile.width // 2
    o = max(2, min(tile.overlap, h1 // 3))
    return [Tile(tile.row + dr, tile.col + dc, hh, ww, o)
            for dr, hh in ((0, h1), (h1, tile.height - h1))
            for dc, ww in ((0, w1), (w1, tile.width - w1))]


def block_tiles(region: Region, origin: tuple[int, int], opts: TileOptions) -> list[Tile]:
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


@dataclass(frozen=True, eq=False)
class BandGroup:
    """One band of a block, or bands that share one gap pattern (tiles, context and targets worked out once).

    Attributes:
        values: ``[h, w]`` normalised values of the block (anything where not observed), or
            ``[len(bands), h, w]``; the block stops at the raster's edge, since tiles clip their
            query windows to it.
        observed: bool ``[h, w]``, True where a pixel may serve as context.
        to_fill: bool ``[h, w]``, True where a prediction is wanted (halo included: it shapes the
            context choice and the splits of tiles near the region's edge as in the neighbouring
            block).
        bands: the band's index in the block (for the output index), or the indices of the bands
            of ``values [bands, h, w]``.
        references: these bands of other dates (multi-date models; ``TileOptions.temporal``), observed alike in
            every band (:attr:`~geonp.data.tasks.ReferenceView.mask`).
    """

    values: np.ndarray
    observed: np.ndarray
    to_fill: np.ndarray
    bands: int | Sequence[int] = 0
    references: Sequence[ReferenceView] = ()


def band_tasks(group: BandGroup, region: Region, *, origin: tuple[int, int], opts: TileOptions,
               limit: int | None = None) -> list[TileTask]:
    """The tasks of one band of a block, or of bands that share one gap pattern.

    Args:
        group: the band or bands, their gap pattern and other dates.
        region: ``(r0, r1, c0, c1)`` of the block's own pixels (the rest is halo).
        origin: the block's offset in the full raster.
        opts: tiling options; their lattice is laid by the distance to the pixels the group or its
            references observe (:func:`geonp.tasks.lattice.spacing_map`).
        limit: the largest context search radius the block array holds
            (:func:`geonp.tasks.context.select_context`).

    Returns:
        Per tile (or split tile) with gap pixels in the region and some context, one task per band.
    """
    observed, to_fill, references = group.observed, group.to_fill, group.references
    # a pixel a reference observes is near data too
    seen = functools.reduce(np.logical_or, [r.mask for r in references], observed)
    spacing = spacing_map(seen, opts.lattice)
    bands = [group.bands] if isinstance(group.bands, int | np.integer) else list(group.bands)
    values = group.values[None] if group.values.ndim == 2 else group.values
    r0, r1, c0, c1 = region
    rh, rw = r1 - r0, c1 - c0
    out: list[TileTask] = []
    geometry = list(_tile_geometry(observed, to_fill, region, origin, opts, spacing))
    # the rule training uses (geonp.tasks.context.select_context), every tile at once
    chosen = select_contexts(observed, to_fill, [g[0] for g in geometry], [g[2] for g in geometry], origin=origin,
                             limit=limit)
    for (window, tt, spec, near), pixels in zip(geometry, chosen, strict=True):
        qr0, _, qc0, _ = window
        crow, ccol, days, y, n_target = context_values(values, pixels, to_fill, window, spec, origin=origin,
                                                       references=references)
        if crow.size == 0:
            continue
        # Coordinates relative to the query window's corner: what training patches look like, and
        # for translation-invariant models (scan) the same result as absolute coordinates, with
        # small squared-distance tables for the bias.
        timed = opts.temporal and not spec.ref_slots
        xc = positions(crow, ccol, (qr0, qc0), days if timed else None)
        xt = positions(tt.rows, tt.cols, (qr0, qc0), np.zeros(tt.rows.size) if timed else None)
        core = int(np.count_nonzero(tt.weights >= 1.0))
        # each band on its own: the same arithmetic whether a band shares its geometry or not
        ys, shifts, scales = standardize_bands(y, n_target)
        columns = reference_columns(references, spec.ref_slots, (crow, ccol), y, (tt.rows, tt.cols)) \
            if spec.ref_slots else None
        for j, b in enumerate(bands):
            # each band its own reference values
            xcj, xtj = (xc, xt) if columns is None else columns.with_features(xc, xt, j, shifts[j], scales[j])
            task = Task(xc=xcj, yc=ys[j, :, None].astype(np.float32), xt=xtj, yt=None, shift=shifts[j:j + 1],
                        scale=scales[j:j + 1])
            index = (b * rh + (tt.out_rows - r0)) * rw + (tt.out_cols - c0)
            out.append(TileTask(b, task, index.astype(np.int64), tt.weights, core, tt.src, tt.coef, near))
    return out


def _all_near(spacing: np.ndarray, to_fill: np.ndarray, window: tuple[int, int, int, int]) -> bool:
    """Every pixel to fill in a query window (halo included: the same in every block) is predicted itself."""
    r0, r1, c0, c1 = window
    return bool((spacing[r0:r1, c0:c1][to_fill[r0:r1, c0:c1]] == 1).all())


def _tile_geometry(observed: np.ndarray, to_fill: np.ndarray, region: Region,
                   origin: tuple[int, int], opts: TileOptions, spacing: np.ndarray | None
                   ) -> Iterator[tuple[Region, TileTargets, ContextSpec, bool]]:
    """Each tile's query window, targets, context geometry, and whether all its gaps lie near data.

    All of it depends on the gap pattern alone.
    """
    r0, r1, c0, c1 = region
    h, w = observed.shape
    work = list(reversed(block_tiles(region, origin, opts)))
    while work:
        tile = work.pop()
        # query window in block coordinates, clipped to the block array and to the region
        qb = tile.query_bounds((h, w))
        qr0, qr1, qc0, qc1 = qb
        rr0, rr1, cc0, cc1 = max(qr0, r0), min(qr1, r1), max(qc0, c0), min(qc1, c1)
        if rr0 >= rr1 or cc0 >= cc1 or not to_fill[rr0:rr1, cc0:cc1].any():
            continue
        if tile.height > opts.min_split and _neighbours(observed, to_fill, qb) > opts.max_context:
            # Scattered gaps (dropped pixels, stripes): the gaps' own neighbours are more than the
            # context cap, so some would be left out. Split the tile in four (the rule depends on
            # this tile's pixels only, so every block splits alike).
            work.extend(reversed(_quarters(tile)))
            continue
        trow, tcol = np.nonzero(to_fill[rr0:rr1, cc0:cc1])
        tt = tile_targets(trow + rr0, tcol + cc0, tile, spacing=spacing, near_overlap=opts.near_overlap,
                          mid_overlap=opts.mid_overlap, origin=origin, shape=(h, w))
        if tt.out_rows.size == 0:  # its gaps lie beyond its margins (near data: a narrower one)
            continue
        spec = opts.context
        near = spacing is not None and _all_near(spacing, to_fill, qb)
        if near and (opts.near_far is not None or opts.near_context):
            # the near context, or more where the gaps' neighbours are more (dropped pixels: a
            # context without some of them cost 5 % RMSE, docs/benchmarks.md)
            n_near = spec.n_near if opts.near_context is None else \
                min(spec.n_near, max(opts.near_context, _neighbours(observed, to_fill, qb, beyond=1)))
            spec = dataclasses.replace(
                spec, n_far=spec.n_far if opts.near_far is None else min(spec.n_far, opts.near_far), n_near=n_near)
        elif not near and opts.far_context is not None:
            spec = dataclasses.replace(spec, n_near=min(spec.n_near, opts.far_context))
        yield qb, tt, spec, near


def block_tasks(block: BlockInput, to_fill: np.ndarray, opts: TileOptions) -> list[TileTask]:
    """The tasks of every band of a block.

    Args:
        block: the block, its values (and its references') *normalised*, its ``region``,
            ``origin`` and ``search_limit`` (:func:`geonp.tasks.context.select_context`);
            ``references``: other dates on the block's window (multi-date models only).
        to_fill: bool ``[bands, h, w]``, True where a prediction is wanted.
        opts: tiling options.

    Returns:
        The tasks of every band; bands with the same gap pattern (the common case: a cloud hides
        every band) share their tiles' geometry.
    """
    values, observed, references = block.values, block.observed, block.references
    if references and not (opts.temporal or opts.context.ref_slots):
        raise ValueError("references need a multi-date model (TileOptions.temporal, ContextSpec.ref_slots)")
    tasks: list[TileTask] = []
    for group in _pattern_groups(observed, to_fill, [r.observed for r in references]):
        b = group[0]
        refs = [ReferenceView(r.values[group], r.observed[group], r.days) for r in references]
        if to_fill[b].any() and (observed[b].any() or any(r.mask.any() for r in refs)):
            tasks += band_tasks(BandGroup(values[group], observed[b], to_fill[b], group, refs), block.region,
                                origin=block.origin, opts=opts, limit=block.search_limit)
    return tasks


def _pattern_groups(observed: np.ndarray, to_fill: np.ndarray, references: Sequence[np.ndarray] = ()
                    ) -> list[list[int]]:
    """Band indices grouped by gap pattern.

    A group's bands have equal ``observed`` and ``to_fill``, and equal observed masks ``[bands, h,
    w]`` in each reference (their tiles, context pixels and targets are the same).
    """
    masks = [observed, to_fill, *references]
    groups: list[list[int]] = []
    for b in range(observed.shape[0]):
        same = next((g for g in groups if all(np.array_equal(m[g[0]], m[b]) for m in masks)), None)
        if same is None:
            groups.append([b])
        else:
            same.append(b)
    return groups
