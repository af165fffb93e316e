"""The raster engine behind ``fill_raster``: blocks read with a halo, predicted, cast, written.

A raster is processed in blocks of ``block_size`` pixels, each read with a halo of
``TileOptions.halo`` pixels so that every tile finds its context; memory depends on the block
size, never on the raster size. Blocks run in this process, in a pool of CPU processes (one torch
thread each: on a small CPU two 1-thread processes give about twice the throughput of one
2-thread process), or on a Dask cluster. Each process loads the model once and opens the raster
once (:class:`BlockRunner`). Observed pixels are copied bit for bit; only gaps are written.
The gap count and the dry-run plan that come before are :mod:`geonp.filling.survey`.
"""

from __future__ import annotations

import concurrent.futures as cf
import ctypes
import dataclasses
import logging
import multiprocessing
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from rasterio.windows import Window
from scipy import ndimage

from geonp.errors import ConfigError, InputRasterError, NoValidPixelsError
from geonp.filling import classes
from geonp.filling.calibration import distance_to_observed
from geonp.filling.predict import BlockReference, Predictor, TileOptions
from geonp.filling.references import ESTIMATE_REACH, REGRESSION_WEIGHT, LineStats, ReferenceLines
from geonp.io.gap_sources import GapSources
from geonp.io.observed import read_observed
from geonp.io.raster import RasterInfo, open_raster, raster_info, read_window
from geonp.io.validity import OutputValidity, alpha_values, finish_block
from geonp.model_files.calibration import Calibration
from geonp.models.layers import resolve_device
from geonp.tasks.context import ContextSpec, HaloTooSmall
from geonp.tasks.normalize import Normalizer, relative_spread, same_units
from geonp.tasks.tiling import make_tiles

logger = logging.getLogger(__name__)

Block = tuple[int, int, int, int]


class BlockResult(NamedTuple):
    """One filled block: its window, output and std arrays, counts and stage timings (seconds)."""

    block: Block
    out: np.ndarray
    std: np.ndarray
    filled: int
    done: int
    timings: dict[str, float]
    valid: np.ndarray | None = None  # [h, w]: observed or filled in every band (alpha / mask)
    beyond: int = 0  # gap pixels inside the footprint left beyond --max-distance

# GDAL's block cache (MB) while filling: its default (5 % of RAM) lets RSS grow with the raster up
# to gigabytes, since every block written or read stays cached; blocks are visited once here.
GDAL_CACHE_MB = 128
# Context search radius the first, narrow read of a block covers (see BlockRunner._halos).
_NARROW_SEARCH = 64
# Below this many gap pixels a process pool costs more to start (torch import, model load) than
# it saves.
_POOL_MIN_GAP_PIXELS = 150_000
# Tile blend margin of single-date models whose card names none. Deep in a scene-scale cloud the
# predictions of neighbouring tiles differ (their context differs); 16 px spreads the step over 33
# px, which takes the jump across tile borders from 1.9x to 1.3x the jump inside tiles
# (benchmarks/seams.py, session 5) for 19-27 % more time (seams.py; benchmarks/fill.py).
DEFAULT_OVERLAP = 16


def tile_options(loaded: Any, tile_size: int | None, max_context: int | None, overlap: int | None,
                 search_radius: int, queries: str = "lattice") -> TileOptions:
    """Tiling options: tile size, overlap, context cap and context geometry as the model was trained.

    The model card's ``task_shape`` gives what the arguments leave as None; ``queries`` (a
    :class:`~geonp.config.FillConfig` field) the query lattice and near blend margin.
    """
    shape = loaded.card.task_shape or {}
    spec = ContextSpec.from_dict(shape)
    overlap = int(shape.get("overlap", DEFAULT_OVERLAP)) if overlap is None else overlap
    opts = TileOptions(tile_size=int(tile_size or shape.get("core_size", 48)), overlap=overlap,
                       max_context=int(max_context or spec.n_near), search_radius=search_radius,
                       n_far=spec.n_far, rings=spec.rings, sectors=spec.sectors, n_ref=spec.n_ref,
                       ref_margin=spec.ref_margin, temporal=loaded.config.temporal)
    return lattice_options(opts) if queries == "lattice" else opts


def lattice_options(opts: TileOptions) -> TileOptions:
    """``opts`` with the query lattice, the near blend margin and the far context of
    ``queries="lattice"`` (:mod:`geonp.tasks.lattice`; chosen by ``benchmarks/lattice.py``)."""
    from geonp.tasks.lattice import FAR_CONTEXT, LATTICE, NEAR_OVERLAP

    return dataclasses.replace(opts, lattice=LATTICE, near_overlap=NEAR_OVERLAP, n_far=min(FAR_CONTEXT, opts.n_far))


def normalizer_for(loaded: Any, n_bands: int, sample: Callable[[], tuple[np.ndarray, np.ndarray]]) -> Normalizer:
    """The model's per-band statistics when they fit the input's bands and units, else the input's own.

    The input's own are fitted with the model's :func:`~geonp.tasks.normalize.relative_spread` as the
    prior of a band seen on few pixels (:meth:`~geonp.tasks.normalize.Normalizer.fit`): one observed
    pixel, or a few equal ones, say nothing of the band's spread, and a std fitted on them alone
    (~0) would make every std of the fill ~0 (it was 0.006-0.01 DN on a uint16 band).

    A model that takes any band count standardises every tile by its own context, so it is not
    tied to its training units, but its statistics are the scale of every tile's prior and std
    floor: applied to a raster in other units (a 3-band float reflectance raster for the
    default model, trained on Landsat digital numbers) they put that floor at ~17 reflectance
    units, and the fill came out 8.5-20 where the truth was -0.03-0.02. Such a model takes its
    statistics only for a raster in their units (:func:`~geonp.tasks.normalize.same_units`); a model of
    fixed bands always takes its statistics.
    """
    stored = loaded.normalizer
    fits = stored is not None and len(stored.get("mean", [])) == n_bands
    any_count = loaded.card.takes_any_band_count
    if fits and not any_count:
        return Normalizer.from_dict(stored)
    if not fits and not any_count:
        trained = "an unknown number of" if stored is None else len(stored["mean"])
        raise InputRasterError(
            f"model {loaded.name} was trained on {trained} band(s) and cannot take "
            f"{n_bands}; select matching bands with -b, or train a model on this sensor with geonp train"
        )
    values, valid = sample()
    try:
        own = Normalizer.fit(values, valid, prior_spread=relative_spread(stored))
    except NoValidPixelsError:
        if fits:  # the sample missed the observed pixels of a band: nothing says the units differ
            return Normalizer.from_dict(stored)
        raise
    if fits and same_units(Normalizer.from_dict(stored), own):
        return Normalizer.from_dict(stored)
    return own


def fill_model(model: Any, *, references: bool = False) -> Any:
    """The model a fill uses: the one given, else the built-in ``default`` (``multidate`` with references)."""
    if model is not None:
        return model
    return "multidate" if references else "default"


def load_for_fill(model: Any, *, references: bool = False) -> Any:
    """The model of a fill: a loaded model as given, a directory loaded, a built-in name loaded once.

    Raises:
        ConfigError: references are given and the model takes none.
    """
    from geonp.model_files.registry import cached_model, load_model

    if not isinstance(model, str | os.PathLike):
        loaded = model
    elif Path(str(model)).exists():
        loaded = load_model(model, device="cpu")
    else:
        loaded = cached_model(str(model), "cpu")
    if references and not loaded.config.temporal:
        raise ConfigError(f"model {loaded.name} takes no references; use --model multidate (model='multidate' "
                          "in Python) or a model trained with geonp train --series")
    return loaded


def check_per_band(loaded: Any) -> None:
    """Refuse a model that predicts bands jointly: a fill models each band on its own.

    Raises:
        InputRasterError: the model's ``dim_y`` is not 1.
    """
    if getattr(loaded.config, "dim_y", 1) != 1:
        raise InputRasterError(f"model {loaded.name} predicts {loaded.config.dim_y} bands jointly; "
                               "geonp fill needs a per-band model (dim_y=1)")


def within(observed: np.ndarray, max_distance: float | None) -> np.ndarray:
    """Pixels within ``max_distance`` of an observed pixel (all pixels when None)."""
    if max_distance is None:
        return np.ones_like(observed)
    if not observed.any():
        return np.zeros_like(observed)
    return ndimage.distance_transform_edt(~observed) <= max_distance


def fill_targets(observed: np.ndarray, max_distance: float | None, fillable: np.ndarray | None) -> np.ndarray:
    """The pixels a block's fill predicts: gaps within ``max_distance`` of data, inside ``fillable``.

    Gaps in the halo stay in: they shape the context choice and the tile splits of the tiles near
    the region's edge exactly as in the neighbouring block, which keeps blocks seamless.
    """
    to_fill = np.stack([~obs & within(obs, max_distance) for obs in observed])
    if fillable is not None:
        to_fill &= fillable
    return to_fill


def predict_region(
    predictor: Predictor,
    raw: np.ndarray,
    observed: np.ndarray,
    region: Block,
    *,
    origin: tuple[int, int],
    norm: Normalizer,
    max_distance: float | None,
    calibration: Calibration | None,
    progress: Callable[[int], None] | None = None,
    limit: int | None = None,
    fillable: np.ndarray | None = None,
    references: list[tuple[np.ndarray, np.ndarray, float]] | None = None,
    lines: ReferenceLines | None = None,
    to_fill: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Fill the gaps of one block's region, in the bands' units.

    Args:
        predictor: the process's predictor.
        raw: ``[bands, h, w]`` values of the block with its halo.
        observed: bool ``[bands, h, w]``.
        region: ``(r0, r1, c0, c1)`` of the block's own pixels.
        origin: the block array's offset in the raster.
        norm: per-band normaliser.
        max_distance: leave gaps farther than this from observed pixels unfilled.
        calibration: the model's post-hoc std calibration (:meth:`Calibration.apply
            <geonp.model_files.calibration.Calibration.apply>`), or None.
        progress: gap-pixels-done callback.
        limit: the largest context search radius the block's halo holds (None: all of it).
        fillable: bool ``[h, w]``: where predictions may go (the data footprint); None = all.
        references: other dates on the block's window (multi-date models): ``(values, observed,
            days)`` with ``values``/``observed`` ``[bands, h, w]`` in the bands' units and ``days``
            the date offset from the target's date.
        lines: with references, the reference regression: a second estimate of the gap pixels a
            reference observes, its line corrected by similar pixels nearby
            (:meth:`~geonp.filling.references.ReferenceLines.estimate`); there the fill weighs it
            :data:`~geonp.filling.references.REGRESSION_WEIGHT` against ``predictor``'s (the target
            and references as context), elsewhere ``predictor``'s alone; the fill is kept within
            a band's floor and ceiling where the target is saturated
            (:meth:`~geonp.filling.references.ReferenceLines.within_saturation`).

        to_fill: :func:`fill_targets` of ``observed``, ``max_distance`` and ``fillable`` when the
            caller has it already (computed here otherwise).

    Returns:
        ``(mean, std)`` ``[bands, r1 - r0, c1 - c0]``: predictions on gap pixels, NaN elsewhere.

    Raises:
        HaloTooSmall: a tile needs context beyond ``limit``.
    """
    to_fill = fill_targets(observed, max_distance, fillable) if to_fill is None else to_fill
    refs = [BlockReference(norm.apply(np.where(ok, vals, 0.0)), ok, days) for vals, ok, days in references or ()]
    mean, std = _predict_normed(predictor, raw, observed, to_fill, region, origin=origin, norm=norm,
                                progress=progress, limit=limit, references=refs)
    if lines is not None and references:
        mean, std = _weigh_with_regression(mean, std, raw, observed, to_fill, region, origin, references, lines)
    # the model's calibration is of the fill it makes: with a reference regression, of the weighted mean
    return mean, _calibrated(std, observed, region, calibration)


def _weigh_with_regression(mean: np.ndarray, std: np.ndarray, raw: np.ndarray, observed: np.ndarray,
                           to_fill: np.ndarray, region: Block, origin: tuple[int, int],
                           references: list[tuple[np.ndarray, np.ndarray, float]], lines: ReferenceLines
                           ) -> tuple[np.ndarray, np.ndarray]:
    """The model's fill weighed with the reference regression's where a reference observes a gap pixel.

    The regression's estimate of a pixel uses the pixels within
    :data:`~geonp.filling.references.ESTIMATE_REACH` of it, which the block's halo holds.
    """
    r0, r1, c0, c1 = region
    at = np.zeros(raw.shape[1:], dtype=bool)
    at[r0:r1, c0:c1] = to_fill[:, r0:r1, c0:c1].any(axis=0)
    r_mean, r_std, _ = lines.estimate(raw, observed, [(vals, ok) for vals, ok, _ in references], at, origin)
    r_mean, r_std = r_mean[:, r0:r1, c0:c1], r_std[:, r0:r1, c0:c1]
    # The weighted mean of the two estimates; the same weighted mean of their stds is the std of
    # that mean when their errors are fully correlated (an upper bound otherwise).
    both = np.isfinite(r_mean) & np.isfinite(mean)
    w = REGRESSION_WEIGHT
    mean = np.where(both, (1 - w) * mean + w * r_mean, mean)
    # where a band is saturated, the model's share (and its fill where no reference sees) stays below it too
    return lines.within_saturation(mean), np.where(both, (1 - w) * std + w * r_std, std)


def _calibrated(std: np.ndarray, observed: np.ndarray, region: Block, calibration: Calibration | None
                ) -> np.ndarray:
    """``std`` ``[bands, ...region]`` with a model's post-hoc calibration applied (a copy)."""
    if calibration is None or calibration.is_identity:
        return std
    std = std.copy()
    n = std.shape[0]
    r0, r1, c0, c1 = region
    for b in range(n):
        # distance to the nearest observed pixel of the band, from the whole block (halo too)
        dist = (distance_to_observed(observed[b])[r0:r1, c0:c1] if calibration.needs_distance
                else np.zeros(std[b].shape))
        std[b] = calibration.apply(std[b], dist, band=b, band_count=n)
    return std


def _predict_normed(predictor: Predictor, raw: np.ndarray, observed: np.ndarray, to_fill: np.ndarray, region: Block,
                    *, origin: tuple[int, int], norm: Normalizer, progress: Callable[[int], None] | None,
                    limit: int | None, references: list[BlockReference] | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Predict ``to_fill`` in normalised units and bring mean and std back to the bands' units."""
    mean, std = predictor.predict(norm.apply(np.where(observed, raw, 0.0)), observed, to_fill, region,
                                  origin=origin, progress=progress, limit=limit, references=references or [])
    n = raw.shape[0]
    ms, ss = np.asarray(norm.mean).reshape(n, 1, 1), np.asarray(norm.std).reshape(n, 1, 1)
    return mean * ss + ms, std * ss


def cast(values: np.ndarray, dtype: str) -> np.ndarray:
    """Round and clip to an integer dtype's range (never wrap); plain cast for floats."""
    dt = np.dtype(dtype)
    if np.issubdtype(dt, np.integer):
        info = np.iinfo(dt)
        return np.clip(np.rint(values), info.min, info.max).astype(dt)
    return values.astype(dt)


def plan_blocks(height: int, width: int, block_size: int) -> list[Block]:
    """Blocks ``(r0, r1, c0, c1)`` covering the raster, row-major."""
    return [(t.row, t.row + t.height, t.col, t.col + t.width)
            for t in make_tiles(height, width, tile_size=block_size)]


# Models handed in as objects (not paths) for in-process runs, by key.
LOCAL_MODELS: dict[str, Any] = {}


def model_key(model: Any, loaded: Any) -> str:
    """A picklable reference to a model: its directory, or a key into :data:`LOCAL_MODELS`."""
    if isinstance(model, str | os.PathLike):
        return str(loaded.path) if loaded.path is not None else str(model)
    key = f"object:{id(loaded)}"
    LOCAL_MODELS[key] = loaded
    return key


@dataclass(frozen=True)
class BlockJob:
    """Everything a worker needs to fill blocks of a raster (picklable; no open handles)."""

    input: str
    bands: tuple[int, ...]
    nodata: float | None
    model: str
    device: str
    opts: TileOptions
    batch_rows: int
    max_distance: float | None
    norm: dict[str, Any]
    calibration: Calibration | None
    dtype: str
    out_nodata: float | None
    sources: GapSources | None = None  # --mask/--qa gaps and the data footprint
    validity: OutputValidity | None = None  # how unfilled pixels are marked (nodata, alpha, mask)
    references: tuple[Any, ...] = ()  # other dates (geonp.io.references.Reference), multi-date models
    reference_days: tuple[float, ...] = ()  # their date offsets from the target's date
    reference_lines: ReferenceLines | None = None  # the reference regression (geonp.filling.references)
    class_reach: float | None = None  # a class raster: nearest-class fill of this reach, no model (geonp.filling.classes)


class BlockRunner:
    """Fills blocks of one job: the model loaded, the predictor built and the raster opened once.

    One per process (or Dask worker) and job; see :func:`run_block`.
    """

    def __init__(self, job: BlockJob, loaded: Any = None) -> None:
        """Load the model (or take ``loaded``), build the predictor and open the raster."""
        from geonp.model_files.registry import cached_model

        self.job = job
        loaded = loaded or LOCAL_MODELS.get(job.model) or cached_model(job.model, "cpu")
        self.predictor = Predictor(loaded.module, job.opts, resolve_device(job.device), batch_rows=job.batch_rows)
        self.norm = Normalizer.from_dict(job.norm)
        self.src = open_raster(job.input)
        self.info: RasterInfo = raster_info(self.src)

    def close(self) -> None:
        """Close the raster."""
        self.src.close()

    def _halos(self) -> list[tuple[int, int | None]]:
        """``(halo, search limit)`` to try in turn: narrow first where it can be enough, then full."""
        if self.job.class_reach is not None:  # nearest-class fill (geonp.filling.classes)
            return [(classes.halo(self.job.class_reach), None)]
        opts = self.job.opts
        margin = 2 * opts.overlap + opts.tile_size
        # the reference regression's estimate of a pixel looks up to ESTIMATE_REACH pixels around it
        halo = max(opts.halo, ESTIMATE_REACH if self.job.reference_lines is not None else 0)
        narrow = _NARROW_SEARCH + margin
        needs_far = self.job.max_distance is not None and self.job.max_distance + margin > narrow
        if narrow >= halo or needs_far or opts.n_far:
            return [(halo, None)]
        return [(narrow, _NARROW_SEARCH), (halo, None)]

    def read(self, win: Window) -> tuple[np.ndarray, np.ndarray]:
        """Values and observed flags ``[bands, h, w]`` of a window (outside the raster: not observed)."""
        return read_target(self.src, self.info, self.job, win)

    def __call__(self, block: Block, progress: Callable[[int], None] | None = None) -> BlockResult:
        """Fill one block; returns it with its output and std arrays, filled and done pixel counts."""
        job = self.job
        r0, r1, c0, c1 = block
        before = dict(self.predictor.timings)
        done = [0]

        def count(n: int) -> None:
            done[0] += n
            if progress is not None:
                progress(n)

        t_read = 0.0
        # The halo is sized by need: most tiles find their context close by, so the block is first
        # read with a narrow halo, and again with the full one only if a tile searches farther
        # (the context of every tile is the same either way).
        for halo, limit in self._halos():
            t0 = time.perf_counter()
            # The halo stops at the raster's edge, as fill_array's array does: tiles clip their query
            # window to the block array, and one hanging past the edge would give the edge tiles a
            # larger query window (another far context, other coordinates) than an in-memory fill.
            hr0, hr1 = max(0, r0 - halo), min(self.info.height, r1 + halo)
            hc0, hc1 = max(0, c0 - halo), min(self.info.width, c1 + halo)
            win = Window(hc0, hr0, hc1 - hc0, hr1 - hr0)
            raw, ok = self.read(win)
            region = (r0 - hr0, r1 - hr0, c0 - hc0, c1 - hc0)
            refs = [(*ref.read(self.info, win), days) for ref, days in zip(job.references, job.reference_days,
                                                                          strict=True)]
            # inside the footprint, or observed by a reference (evidence that it is inside the scene)
            fillable = None if job.sources is None else job.sources.fillable(win, [r[1] for r in refs])
            t_read += time.perf_counter() - t0
            to_fill = fill_targets(ok, job.max_distance, fillable)
            if job.class_reach is not None:  # a class raster: the nearest observed class, no model
                mean, std = classes.nearest_class(raw, ok, region, reach=job.class_reach, fillable=fillable)
                break
            try:
                mean, std = predict_region(self.predictor, raw, ok, region, origin=(hr0, hc0),
                                           norm=self.norm, max_distance=job.max_distance,
                                           calibration=job.calibration, progress=count, limit=limit,
                                           fillable=fillable, references=refs, lines=job.reference_lines,
                                           to_fill=to_fill)
                break
            except HaloTooSmall:
                continue
        t0 = time.perf_counter()
        # read_window gives float64 (exact for every GDAL integer type up to 32 bits) with clean errors
        core_win = Window(c0, r0, c1 - c0, r1 - r0)
        core_raw = cast(read_window(self.src, core_win, list(job.bands)), job.dtype)
        core_ok = ok[:, region[0]:region[1], region[2]:region[3]]
        has_pred = np.isfinite(mean) & ~core_ok
        beyond = _beyond_max_distance(ok, region, fillable, to_fill)
        out = core_raw.copy()
        out[has_pred] = cast(mean[has_pred], job.dtype)
        # Unfilled pixels get nodata (NaN for floats without one), predictions equal to nodata
        # move one step away, and the alpha band is rewritten, never filled (geonp.io.validity).
        validity = job.validity or OutputValidity(bands=job.bands, alpha_band=None, nodata=job.out_nodata,
                                                  dtype=job.dtype, write_mask=False)
        out, valid = finish_block(out, observed=core_ok, filled=has_pred, mean=mean, plan=validity)
        if validity.alpha_band is not None:
            alpha = read_window(self.src, core_win, [validity.alpha_band])[0]
            out = np.concatenate([out, alpha_values(valid, alpha, job.dtype)[None]])
        std_out = np.where(core_ok, 0.0, np.where(has_pred, std, np.nan)).astype(np.float32)
        timings = {k: v - before[k] for k, v in self.predictor.timings.items()}
        timings["read"] = t_read
        timings["cast"] = time.perf_counter() - t0
        return BlockResult(block, out, std_out, int(has_pred.sum()), done[0], timings, valid, beyond)


def _beyond_max_distance(observed: np.ndarray, region: Block, fillable: np.ndarray | None,
                         to_fill: np.ndarray) -> int:
    """Gap pixels of a block's region (all bands) inside the footprint that :func:`fill_targets`
    leaves out: those beyond ``--max-distance``."""
    r0, r1, c0, c1 = region
    far = ~observed[:, r0:r1, c0:c1] & ~to_fill[:, r0:r1, c0:c1]
    if fillable is not None:
        far &= fillable[None, r0:r1, c0:c1]
    return int(far.sum())


def read_target(src: Any, info: RasterInfo, job: BlockJob, win: Window) -> tuple[np.ndarray, np.ndarray]:
    """A job's values and observed flags ``[bands, h, w]`` in a window, its extra gaps (masks, QA) applied."""
    raw, ok = read_observed(src, win, job.bands, info=info, nodata=job.nodata)
    if job.sources is not None:
        extra = job.sources.extra_gaps(win)
        if extra is not None:
            ok &= ~extra[None]
    return raw, ok


def fit_reference_lines(job: BlockJob, blocks: list[Block]) -> ReferenceLines | None:
    """The reference regression of a multi-date job, over every pixel of the raster (block by block)."""
    stats = LineStats.empty(len(job.references), len(job.bands))
    with open_raster(job.input) as src:
        info = raster_info(src)
        for r0, r1, c0, c1 in blocks:
            win = Window(c0, r0, c1 - c0, r1 - r0)
            stats.add(*read_target(src, info, job, win), [ref.read(info, win) for ref in job.references])
    return stats.lines()


_RUNNER: list[BlockRunner] = []  # this process's runner (the last job's)


def run_block(job: BlockJob, block: Block) -> BlockResult:
    """Fill one block ``(r0, r1, c0, c1)`` with this process's runner for ``job``."""
    if not _RUNNER or _RUNNER[0].job != job:
        while _RUNNER:
            _RUNNER.pop().close()
        _RUNNER.append(BlockRunner(job))
    result = _RUNNER[0](block)
    _trim_heap()
    return result


def _trim_heap() -> None:
    """Give freed heap memory back to the system (glibc keeps it otherwise and RSS creeps up)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def _init_worker(parent_pid: int | None = None) -> None:
    """Set up a pool worker: one torch thread, a small GDAL cache, and an end with its parent."""
    import torch

    from geonp.filling.interrupts import guard_worker

    if parent_pid is not None:
        guard_worker(parent_pid)  # never outlive the fill, even a SIGKILLed one; Ctrl-C is the parent's
    os.environ["GDAL_CACHEMAX"] = str(GDAL_CACHE_MB)  # before this process's GDAL starts
    torch.set_num_threads(1)


def cpu_count() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def run_blocks(job: BlockJob, blocks: list[Block], *, scheduler: str | None, workers: int,
               progress: Callable[[int], None] | None = None, loaded: Any = None) -> Iterator[BlockResult]:
    """Yield block results (in completion order): here, in ``workers`` processes, or on Dask.

    In this process ``progress`` moves as model batches finish; elsewhere, as blocks finish.
    ``loaded`` is the model already loaded in this process (other processes load it once each).
    Ctrl-C, SIGTERM (as KeyboardInterrupt), an error or a caller that stops early ends the
    worker processes at once, not after their blocks; they never outlive this process
    (:mod:`geonp.filling.interrupts`).
    """
    if scheduler is not None:
        yield from _run_dask(job, blocks, scheduler, progress)
        return
    in_memory = str(job.model).startswith("object:")
    if workers <= 1 or len(blocks) < 2 or in_memory:
        runner = BlockRunner(job, loaded)
        try:
            for block in blocks:
                yield runner(block, progress)
                _trim_heap()
        finally:
            runner.close()
        return
    from geonp.filling.interrupts import stop_pool

    ctx = multiprocessing.get_context("spawn")
    pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_init_worker,
                                  initargs=(os.getpid(),))
    pending: set[cf.Future[BlockResult]] = set()
    todo = iter(blocks)
    try:
        while True:
            # a bounded queue: results wait in memory for at most 2 blocks per worker
            for block in todo:
                pending.add(pool.submit(run_block, job, block))
                if len(pending) >= 2 * workers:
                    break
            if not pending:
                break
            finished, pending = cf.wait(pending, return_when=cf.FIRST_COMPLETED)
            for future in finished:
                result = future.result()
                if progress is not None:
                    progress(result.done)
                yield result
    except BaseException:
        # Ctrl-C or SIGTERM (KeyboardInterrupt), a failed block, or the caller stopped early
        # (GeneratorExit): end the workers now instead of waiting for the blocks they are on.
        stop_pool(pool)
        raise
    pool.shutdown(wait=True)


def _run_dask(job: BlockJob, blocks: list[Block], scheduler: str,
              progress: Callable[[int], None] | None) -> Iterator[BlockResult]:
    if str(job.model).startswith("object:"):
        raise ConfigError("--scheduler needs the model as a name or directory, not an in-memory object")
    from distributed import as_completed

    from geonp.filling.dask_client import connect

    client = connect(scheduler)
    futures: list[Any] = []
    try:
        futures = client.map(run_block, [job] * len(blocks), blocks, pure=False)
        for future in as_completed(futures):
            result = future.result()
            if progress is not None:
                progress(result.done)
            yield result
    except BaseException:
        client.cancel(futures)  # the blocks not started yet are dropped (results only: no file)
        raise
    finally:
        client.close()


def pool_size(workers: int | None, device: Any, gap_pixels: int, n_blocks: int) -> int:
    """Processes to use: as asked, else one per CPU on the CPU for large jobs, one on CUDA."""
    if workers is not None:
        return workers
    if getattr(device, "type", str(device)) != "cpu" or gap_pixels < _POOL_MIN_GAP_PIXELS:
        return 1
    return max(1, min(cpu_count(), n_blocks))
