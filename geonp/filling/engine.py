"""The raster engine behind ``fill_raster``: blocks read with a halo, filled, cast, written.

A raster is processed in blocks of ``block_size`` pixels, each read with a halo of
``TileOptions.halo`` pixels so that every tile finds its context; memory depends on the block
size, never on the raster size. What a block computes is :func:`geonp.filling.block.fill_block`
with the fill's :class:`~geonp.filling.plan.FillPlan`; this module reads its inputs, runs it where
blocks run, and casts its outputs. Blocks run in this process, in a pool of CPU processes (one torch
thread each: on a small CPU two 1-thread processes give about twice the throughput of one
2-thread process), or on a Dask cluster. Each process loads the model once and opens the raster
once (:class:`BlockRunner`); pool workers forked from this process take its imports and model
(:func:`worker_start_method`). Observed pixels are copied bit for bit; only gaps are written. A
block the survey saw no gap to fill in is copied (:meth:`BlockRunner.copy`: no halo, no model).
The gap count and the dry-run plan that come before are :mod:`geonp.filling.survey`.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import ctypes
import logging
import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from rasterio.windows import Window

from geonp.data.tasks import ReferenceView
from geonp.errors import ConfigError
from geonp.filling.block import BlockInput, BlockOutput, fill_block
from geonp.filling.plan import FillPlan, plan_model
from geonp.filling.pool import worker_start_method
from geonp.filling.references import LineStats, ReferenceLines
from geonp.io.gap_sources import GapSources
from geonp.io.observed import read_observed
from geonp.io.raster import (
    WORKER_GDAL_CACHE_MB,
    RasterInfo,
    gdal_cache_bytes,
    open_raster,
    raster_info,
    set_gdal_cache,
)
from geonp.io.validity import OutputValidity, alpha_values, finish_block
from geonp.io.windows import read_window
from geonp.models.layers import resolve_device
from geonp.tasks.context import HaloTooSmall
from geonp.tasks.tiling import Region

logger = logging.getLogger(__name__)


class BlockResult(NamedTuple):
    """One filled block: its window, output and std arrays, counts and stage timings (seconds)."""

    block: Region
    out: np.ndarray
    std: np.ndarray
    filled: int
    done: int
    timings: dict[str, float]
    valid: np.ndarray | None = None  # [h, w]: observed or filled in every band (alpha / mask)
    beyond: int = 0  # gap pixels inside the footprint left beyond --max-distance

# Context search radius the first, narrow read of a block covers (see BlockRunner._halos).
_NARROW_SEARCH = 64


def cast(values: np.ndarray, dtype: str) -> np.ndarray:
    """Round and clip to an integer dtype's range (never wrap); plain cast for floats."""
    dt = np.dtype(dtype)
    if np.issubdtype(dt, np.integer):
        info = np.iinfo(dt)
        return np.clip(np.rint(values), info.min, info.max).astype(dt)
    return values.astype(dt)


@dataclass(frozen=True)
class BlockSource:
    """Where a fill's blocks are read and how they are written (picklable; no open handles)."""

    input: str
    bands: tuple[int, ...]
    nodata: float | None
    dtype: str
    out_nodata: float | None
    sources: GapSources | None = None  # --mask/--qa gaps and the data footprint
    validity: OutputValidity | None = None  # how unfilled pixels are marked (nodata, alpha, mask)
    references: tuple[Any, ...] = ()  # other dates (geonp.io.references.ReferenceFile), multi-date models
    reference_days: tuple[float, ...] = ()  # their date offsets from the target's date


@dataclass(frozen=True)
class BlockJob:
    """Everything a worker needs to fill blocks of a raster: the file it reads and the fill's plan."""

    source: BlockSource
    plan: FillPlan


class BlockRunner:
    """Fills blocks of one job: the model loaded, the predictor built and the raster opened once.

    One per process (or Dask worker) and job; see :func:`run_block`. A block is read once (with
    the narrow halo first where that can be enough: :meth:`_halos`), filled by
    :func:`~geonp.filling.block.fill_block`, and cast to the output's type.
    """

    def __init__(self, job: BlockJob, loaded: Any = None) -> None:
        """Load the model (or take ``loaded``), build the predictor and open the raster."""
        self.job = job
        self.predictor = job.plan.predictor(loaded or plan_model(job.plan))
        self.src = open_raster(job.source.input)
        self.info: RasterInfo = raster_info(self.src)

    def close(self) -> None:
        """Close the raster."""
        self.src.close()

    def _halos(self) -> list[tuple[int, int | None]]:
        """``(halo, search limit)`` to try in turn: narrow first where it can be enough, then full."""
        plan = self.job.plan
        halo = plan.halo(plan.reference_lines is not None)
        if plan.class_reach is not None:  # nearest-class fill (geonp.filling.classes)
            return [(halo, None)]
        opts = plan.opts
        assert opts is not None, "a model fill has tile options"
        margin = 2 * opts.overlap + opts.tile_size
        narrow = _NARROW_SEARCH + margin
        needs_far = plan.max_distance is not None and plan.max_distance + margin > narrow
        if narrow >= halo or needs_far or opts.context.n_far:
            return [(halo, None)]
        return [(narrow, _NARROW_SEARCH), (halo, None)]

    def read(self, block: Region, halo: int, limit: int | None) -> BlockInput:
        """A block's arrays with a halo (which stops at the raster's edge)."""
        source = self.job.source
        r0, r1, c0, c1 = block
        # The halo stops at the raster's edge, as fill_array's array does: tiles clip their query
        # window to the block array, and one hanging past the edge would give the edge tiles a
        # larger query window (another far context, other coordinates) than an in-memory fill.
        hr0, hr1 = max(0, r0 - halo), min(self.info.height, r1 + halo)
        hc0, hc1 = max(0, c0 - halo), min(self.info.width, c1 + halo)
        win = Window(hc0, hr0, hc1 - hc0, hr1 - hr0)
        raw, ok = read_target(self.src, self.info, source, win)
        reads = [ref.read(self.info, win) for ref in source.references]
        refs = tuple(ReferenceView(vals, seen, days) for (vals, seen), days in zip(reads, source.reference_days, strict=True))
        # inside the footprint, or observed by a reference (evidence that it is inside the scene)
        fillable = None if source.sources is None else source.sources.fillable(win, [r.observed for r in refs])
        return BlockInput(raw, ok, block.shifted(-hr0, -hc0), origin=(hr0, hc0), fillable=fillable,
                          references=refs, search_limit=limit)

    def __call__(self, block: Region, progress: Callable[[int], None] | None = None) -> BlockResult:
        """Fill one block; returns it with its output and std arrays, filled and done pixel counts."""
        before = dict(self.predictor.timings)
        t_read = 0.0
        # The halo is sized by need: most tiles find their context close by, so the block is first
        # read with a narrow halo, and again with the full one only if a tile searches farther
        # (the context of every tile is the same either way).
        for halo, limit in self._halos():
            t0 = time.perf_counter()
            inputs = self.read(block, halo, limit)
            t_read += time.perf_counter() - t0
            try:
                filled = fill_block(inputs, self.job.plan, self.predictor, progress=progress)
                break
            except HaloTooSmall:
                continue
        return self._finish(block, inputs, filled, before, t_read)

    def copy(self, block: Region) -> BlockResult:
        """A block with no gap to fill (the survey's word): read without a halo, cast and marked, no model."""
        t0 = time.perf_counter()
        raw, ok = read_target(self.src, self.info, self.job.source, Window.from_slices(*block.slices))
        nan = np.full(ok.shape, np.nan)
        filled = BlockOutput(mean=nan, std=nan, observed=ok, filled=np.zeros_like(ok), done=0, beyond=0)
        return self._finish(block, BlockInput(raw, ok, block.shifted(-block.r0, -block.c0)), filled,
                            dict(self.predictor.timings), time.perf_counter() - t0)

    def _finish(self, block: Region, inputs: BlockInput, filled: BlockOutput, before: dict[str, float],
                t_read: float) -> BlockResult:
        """A filled block cast to the output's type, its unfilled pixels marked, with its timings."""
        source = self.job.source
        t0 = time.perf_counter()
        done = filled.done
        # the block's own pixels come from its halo read: read_window gives float64, exact for
        # every GDAL integer type up to 32 bits, and the same pixels read alone are the same values
        out = cast(inputs.values[inputs.core], source.dtype)
        out[filled.filled] = cast(filled.mean[filled.filled], source.dtype)
        # Unfilled pixels get nodata (NaN for floats without one), predictions equal to nodata
        # move one step away, and the alpha band is rewritten, never filled (geonp.io.validity).
        validity = source.validity or OutputValidity(bands=source.bands, alpha_band=None, nodata=source.out_nodata,
                                                     dtype=source.dtype, write_mask=False)
        out, valid = finish_block(out, observed=filled.observed, filled=filled.filled, mean=filled.mean,
                                  plan=validity)
        if validity.alpha_band is not None:
            alpha = read_window(self.src, Window.from_slices(*block.slices), [validity.alpha_band])[0]
            out = np.concatenate([out, alpha_values(valid, alpha, source.dtype)[None]])
        timings = {k: v - before[k] for k, v in self.predictor.timings.items()}
        timings["read"] = t_read
        timings["cast"] = time.perf_counter() - t0
        return BlockResult(block, out, filled.uncertainty, int(filled.filled.sum()), done, timings, valid,
                           filled.beyond)


def read_target(src: Any, info: RasterInfo, source: BlockSource, win: Window) -> tuple[np.ndarray, np.ndarray]:
    """A fill's values and observed flags ``[bands, h, w]`` in a window, its extra gaps (masks, QA) applied."""
    raw, ok = read_observed(src, win, source.bands, info=info, nodata=source.nodata)
    if source.sources is not None:
        extra = source.sources.extra_gaps(win)
        if extra is not None:
            ok &= ~extra[None]
    return raw, ok


def fit_reference_lines(source: BlockSource, blocks: list[Region],
                        progress: Callable[[int, int], None] | None = None) -> ReferenceLines | None:
    """The reference regression of a multi-date fill, over every pixel of the raster (block by block).

    ``progress`` hears ``(blocks done, blocks)``.
    """
    stats = LineStats.empty(len(source.references), len(source.bands))
    with open_raster(source.input) as src:
        info = raster_info(src)
        for i, (r0, r1, c0, c1) in enumerate(blocks):
            win = Window(c0, r0, c1 - c0, r1 - r0)
            stats.add(*read_target(src, info, source, win), [ref.read(info, win) for ref in source.references])
            if progress is not None:
                progress(i + 1, len(blocks))
    return stats.lines()


_RUNNER: list[BlockRunner] = []  # this process's runner (the last job's)
# A forked pool worker's model: (the plan's model key, the loaded model) of the process it was forked from.
_INHERITED: list[tuple[str | None, Any]] = []


def run_block(job: BlockJob, block: Region) -> BlockResult:
    """Fill one block ``(r0, r1, c0, c1)`` with this process's runner for ``job``."""
    if not _RUNNER or _RUNNER[0].job != job:
        while _RUNNER:
            _RUNNER.pop().close()
        loaded = next((m for key, m in _INHERITED if key == job.plan.model), None)
        _RUNNER.append(BlockRunner(job, loaded))
    result = _RUNNER[0](block)
    _trim_heap()
    return result


def _trim_heap() -> None:
    """Give freed heap memory back to the system (glibc keeps it otherwise and RSS creeps up)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def _empty_caches() -> None:
    """Empty GDAL's block cache and give the freed heap back before forking workers.

    A forked worker's RSS starts with every page its parent holds: the survey of an 8192² raster
    had left 128 MiB of its blocks in the cache, and each worker started at 316 MB instead of 190.
    """
    state = gdal_cache_bytes()
    if state is not None:
        set_gdal_cache(0)  # GDAL drops its blocks down to the new limit
        set_gdal_cache(state[1] // 2**20)
    _trim_heap()


def _init_worker(parent_pid: int | None = None, inherited: tuple[str | None, Any] | None = None) -> None:
    """Set up a pool worker: one torch thread, a small GDAL cache, and an end with its parent.

    ``inherited``: ``(model key, loaded model)`` of the process a forked worker comes from.
    """
    import torch

    from geonp.filling.interrupts import guard_worker

    # a forked worker inherits its parent's handlers, which turn SIGTERM into KeyboardInterrupt
    # (geonp_cli): a worker ends on SIGTERM (stop_pool)
    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    if parent_pid is not None:
        guard_worker(parent_pid)  # never outlive the fill, even a SIGKILLed one; Ctrl-C is the parent's
    set_gdal_cache(WORKER_GDAL_CACHE_MB)  # a forked worker's GDAL started in its parent: set at run time
    torch.set_num_threads(1)
    _INHERITED[:] = [] if inherited is None or inherited[1] is None else [inherited]


@contextlib.contextmanager
def _one_cpu_thread(device: str) -> Iterator[None]:
    """On the CPU, one torch thread while this process fills blocks (the caller's count restored after).

    The model's operations are small: a second intra-op thread gains little on an idle machine,
    and where another process holds a core every parallel region waits for that core's turn (the
    README sample: 18 s against 3.5 s with one thread beside one busy process).
    """
    import torch

    if resolve_device(device).type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run_blocks(job: BlockJob, blocks: list[Region], *, scheduler: str | None, workers: int,
               progress: Callable[[int], None] | None = None, loaded: Any = None
               ) -> Generator[BlockResult, None, None]:
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
    in_memory = str(job.plan.model).startswith("object:")
    if workers <= 1 or len(blocks) < 2 or in_memory:
        runner = BlockRunner(job, loaded)
        try:
            with _one_cpu_thread(job.plan.device):
                for block in blocks:
                    yield runner(block, progress)
                    _trim_heap()
        finally:
            runner.close()
        return
    from geonp.filling.interrupts import stop_pool

    method = worker_start_method(resolve_device(job.plan.device))
    # a forked worker takes this process's model (not pickled: a fork copies the process)
    inherited = (job.plan.model, loaded) if method == "fork" else None
    if method == "fork":
        _empty_caches()
    pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context(method),
                                  initializer=_init_worker, initargs=(os.getpid(), inherited))
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


def _run_dask(job: BlockJob, blocks: list[Region], scheduler: str,
              progress: Callable[[int], None] | None) -> Iterator[BlockResult]:
    if str(job.plan.model).startswith("object:"):
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


