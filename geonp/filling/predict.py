"""Predict the gap pixels of a block: tiles -> tasks -> batched model calls -> blended maps.

Everything here works on arrays already in memory for one *block* (a region plus a halo around
it), so memory is bounded by the block size, not the raster size. The work is split in three
steps that training and filling share where they can:

1. :func:`~geonp.filling.tile_tasks.block_tasks` cuts the block into tiles laid on the raster's
   global grid and turns each tile's gaps into a :class:`~geonp.filling.tile_tasks.TileTask`
   (context choice, coordinates, standardisation); a tile's task is the same whichever block
   builds it, so blocks leave no seams.
2. :class:`Predictor` runs all tasks of a block: sorted by size, packed into large batches under
   a row budget, with as few model calls as possible, and blends the tiles' predictions by
   scatter-add (on the model's device). A model with a near model (:class:`NearModel`) runs the
   tiles near data through it.
3. :func:`reference_predict` is the slow, obviously correct twin: one model call per tile and a
   plain ``np.add.at`` blend. Tests tie the two together.
"""

from __future__ import annotations

import copy
import ctypes
import dataclasses
import functools
import inspect
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch

from geonp.data.tasks import Task, collate
from geonp.filling.block_input import BlockInput
from geonp.filling.calibration import region_distances
from geonp.filling.tile_tasks import TileOptions, TileTask, block_tasks
from geonp.model_files.calibration import Calibration
from geonp.tasks.lattice import read_off

#: Query rows per model call by device. On the CPU smaller calls run faster (their attention tiles
#: stay in cache: ``benchmarks/batch_rows.py``), and a multi-date tile's ~700 context tokens make a
#: large call's memory grow; on a GPU large calls keep the device busy.
BATCH_ROWS = {"cpu": 4096, "cuda": 32768}


#: Heap thresholds (bytes) set where the environment turned glibc's adaptive ones off.
HEAP_THRESHOLD = 256 * 2**20


@functools.cache
def tune_heap() -> bool:
    """Let this process reuse freed tensor memory, where its environment made glibc return it at once.

    Dask starts its workers with ``MALLOC_TRIM_THRESHOLD_=65536``, which also turns off glibc's
    adaptive mmap threshold: every tensor above 128 KB was then mapped fresh and faulted in page
    by page. A multi-date fill of a 256² date in a Dask worker took 42 s (20 s in the kernel, 6.5
    M page faults) against 17 s in a plain process; with both thresholds at 256 MB, 16.6 s. Runs
    once per process; a process whose environment sets neither variable is left as it is.

    Returns:
        Whether the thresholds were set.
    """
    if not any(k in os.environ for k in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_")):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, HEAP_THRESHOLD)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, HEAP_THRESHOLD)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):  # not glibc
        return False
    return True


def release_heap() -> None:
    """Give the free memory of a tuned heap back to the system (between blocks of a Dask worker).

    With :func:`tune_heap`'s thresholds the heap keeps what a block freed, and a worker's RSS
    grew with the blocks it had filled (fragments of one block's arrays that the next block's
    did not fit in): 1.1 GB after its first blocks of a 2048² x 12-date cube, over 2 GB after 20
    minutes. ``malloc_trim(0)`` returns every free page of every arena; the next block faults in
    what it needs once. Does nothing where :func:`tune_heap` leaves the heap alone.
    """
    if tune_heap():
        ctypes.CDLL("libc.so.6").malloc_trim(0)


#: Query counts within a factor of 2^(1/QUERY_BUCKETS) share a model call (:func:`pack`).
QUERY_BUCKETS = 4


def pack(queries: Sequence[int], contexts: Sequence[int], batch_rows: int, *, max_tiles: int = 1024,
         runs: Sequence[int] | None = None) -> list[list[int]]:
    """Group task indices into model calls whose tasks pad little.

    A call pads every task to its largest query and context counts. Tasks are put in buckets of
    query counts within a factor of 2^(1/:data:`QUERY_BUCKETS`) (largest first), sorted by context
    size within, and cut into runs within one bucket whose rows (tasks x the larger of the run's
    largest query and context counts) stay within ``batch_rows``; a task larger than the budget
    runs alone. Sorted by the larger count alone, the small tiles of a multi-date fill (~190
    context tokens, 1-256 queries) were padded to 2.6x their queries (a 256² 3-date cube: 34.4 s
    against 26.1 s, one thread; ``python benchmarks/cube.py``).

    ``runs``: tasks each index stands for (the bands of a tile that share its geometry, run as
    one unit: :func:`geometry_units`); they count in the rows and tiles, and a call holds units
    of one size only (None: 1 each).
    """
    runs = [1] * len(queries) if runs is None else list(runs)
    bucket = [(round(QUERY_BUCKETS * math.log2(max(q, 1))), r) for q, r in zip(queries, runs, strict=True)]
    order = sorted(range(len(queries)), key=lambda i: (-runs[i], -bucket[i][0], -contexts[i], -queries[i]))
    batches: list[list[int]] = []
    rows = 0  # the open batch's largest query or context count
    for i in order:
        size = max(queries[i], contexts[i])
        tiles = len(batches[-1]) * runs[i] if batches else 0
        if batches and bucket[batches[-1][0]] == bucket[i] and tiles + runs[i] <= max_tiles \
                and (tiles + runs[i]) * max(rows, size) <= batch_rows:
            batches[-1].append(i)
            rows = max(rows, size)
        else:
            batches.append([i])
            rows = size
    return batches


def geometry_units(tasks: Sequence[TileTask]) -> list[list[int]]:
    """Task indices in runs that share one geometry.

    A run is consecutive tasks (the bands of a tile, :func:`~geonp.filling.tile_tasks.band_tasks`)
    with the same context and query coordinate arrays.
    """
    units: list[list[int]] = []
    for i, t in enumerate(tasks):
        if units:
            first = tasks[units[-1][0]].task
            if t.task.xc is first.xc and t.task.xt is first.xt:
                units[-1].append(i)
                continue
        units.append([i])
    return units


@dataclass(frozen=True)
class NearModel:
    """A second model for the tiles near data, and what its std is worth beside the main model's.

    It runs the tasks whose gaps all lie near data (:attr:`TileTask.near
    <geonp.filling.tile_tasks.TileTask.near>`). A fill calibrates the blended std with the main
    model's calibration (by band and distance to data). The near model was calibrated on its own
    fills, so before blending its raw std is multiplied by the ratio of its calibration to the main
    model's at each pixel (:meth:`std_ratio`): after the main calibration, a pixel only near tiles
    predict gets the near model's own calibrated std.

    Attributes:
        module: the near model (a per-band single-date model trained with near batches).
        calibration: its post-hoc std calibration, or None.
        main: the main model's, or None.
    """

    module: torch.nn.Module
    calibration: Calibration | None
    main: Calibration | None

    def std_ratio(self, distance: np.ndarray) -> np.ndarray:
        """Factors on the near model's raw std, shaped like ``distance``.

        ``distance``: ``[bands, h, w]`` distance of each pixel of a block's region to data
        (:func:`~geonp.filling.calibration.region_distances`), as the fill's calibration reads it.
        """
        near, main = self.calibration or Calibration(), self.main or Calibration()
        n = distance.shape[0]
        out = np.ones(distance.shape)
        for b in range(n):
            out[b] = (near.apply(out[b], distance[b], band=b, band_count=n)
                      / main.apply(out[b], distance[b], band=b, band_count=n))
        return out


def _on(module: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """``module`` in eval mode on ``device`` (a copy when it is elsewhere: the caller's stays put)."""
    on_device = all(p.device == device for p in module.parameters())
    return (module if on_device else copy.deepcopy(module).to(device)).eval()


def _shares_geometry(module: torch.nn.Module) -> bool:
    """Whether ``module`` reads the bias of a batch of runs of one geometry once (``groups``)."""
    # a method; nn.Module types unknown attributes as Tensor | Module
    encode = cast(Callable[..., Any], module.encode_context)
    return "groups" in inspect.signature(encode).parameters


def _task_stats(task: Task) -> tuple[np.ndarray, np.ndarray]:
    """A fill task's ``(shift, scale)`` (:func:`~geonp.filling.tile_tasks.block_tasks` sets both)."""
    assert task.shift is not None and task.scale is not None
    return task.shift, task.scale


class Predictor:
    """Runs the tasks of blocks through a model: sorted, packed, batched, blended on the device.

    Built once per process (or Dask worker) and reused for every block.

    Args:
        module: a per-band model (``dim_y = 1``) with ``forward(xc, yc, xt, context_valid,
            query_chunk=)``.
        opts: tiling options.
        device: where the model runs.
        batch_rows: padded query rows (tiles x targets) per model call (None: :data:`BATCH_ROWS`).
        chunk_rows: query rows the model decodes at a time inside a call (bounds attention memory).
        near: the model of the tiles near data, or None (``module`` runs every tile).
    """

    def __init__(self, module: torch.nn.Module, opts: TileOptions, device: torch.device | str = "cpu", *,
                 batch_rows: int | None = None, chunk_rows: int | None = None,
                 near: NearModel | None = None) -> None:
        """Keep the module on ``device`` and size batches by ``batch_rows`` padded query rows."""
        tune_heap()
        self.device = torch.device(device)
        batch_rows = batch_rows or BATCH_ROWS.get(self.device.type, BATCH_ROWS["cpu"])
        self.module = _on(module, self.device)
        self.near = None if near is None else dataclasses.replace(near, module=_on(near.module, self.device))
        self.opts = opts
        self.batch_rows = batch_rows
        self.chunk_rows = chunk_rows or (batch_rows if self.device.type == "cuda" else 8192)
        #: the module reads the bias of a batch of runs of one geometry once (``groups``)
        self.shares_geometry = _shares_geometry(self.module)
        self._near_shares_geometry = self.near is not None and _shares_geometry(self.near.module)
        #: seconds spent per stage (``context``, ``model``, ``blend``), accumulated over calls
        self.timings: dict[str, float] = {"context": 0.0, "model": 0.0, "blend": 0.0}

    def predict(self, block: BlockInput, to_fill: np.ndarray, *, progress: Callable[[int], None] | None = None,
                distance: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Predict the ``to_fill`` pixels of a block's region (all bands).

        Args:
            block: the block, its values (and its references') *normalised* (anything where not
                observed); a tile that needs more context search radius than its
                ``search_limit`` raises :class:`HaloTooSmall` before any model call.
            to_fill: bool ``[bands, h, w]``.
            progress: called with the number of region gap pixels (tile cores) done per batch.
            distance: :func:`~geonp.filling.calibration.region_distances` of ``block.observed``
                when the caller has it (a near model's std reads it; computed here otherwise).

        Returns:
            ``(mean, std)``, each ``[bands, r1 - r0, c1 - c0]``, normalised units, NaN where not
            filled.
        """
        t0 = time.perf_counter()
        tasks = block_tasks(block, to_fill, self.opts)
        self.timings["context"] += time.perf_counter() - t0
        ratio = None
        if self.near is not None and any(t.near for t in tasks):
            ratio = self.near.std_ratio(region_distances(block.observed, block.region) if distance is None else distance)
        return self.run(tasks, (block.values.shape[0], *block.region.extent), progress,
                        near_ratio=ratio)

    def run(self, tasks: Sequence[TileTask], shape: tuple[int, int, int],
            progress: Callable[[int], None] | None = None, *, near_ratio: np.ndarray | None = None
            ) -> tuple[np.ndarray, np.ndarray]:
        """Run ``tasks`` and blend them into ``(mean, std)`` maps of ``shape``.

        With a near model, the near tasks run through it and their std is multiplied by
        ``near_ratio`` (``shape``, :meth:`NearModel.std_ratio`; None: 1).
        """
        n = int(np.prod(shape))
        dev = self.device
        acc = torch.zeros((3, n), dtype=torch.float64, device=dev)  # weighted mean, weighted std, weight
        ratio = None if near_ratio is None else torch.from_numpy(np.asarray(near_ratio, np.float64).ravel()).to(dev)
        # Batches are sized by the larger of a task's queries and context: the context stream's
        # attention grows with the tiles per call too (small tiles of dropped pixels or stripes
        # packed by queries alone made calls whose bias tiles left the cache: 7 % slower).
        # The bands of a tile that share its geometry run as one unit, laid band after band in
        # their call: the model works out their kernel bias once (``groups``).
        for module, subset, near, shares in self._by_model(tasks):
            if not subset:
                continue
            units = geometry_units([tasks[i] for i in subset]) if shares else [[i] for i in range(len(subset))]
            units = [[subset[i] for i in u] for u in units]
            first = [tasks[u[0]].task for u in units]
            for batch in pack([t.xt.shape[0] for t in first], [t.xc.shape[0] for t in first], self.batch_rows,
                              runs=[len(u) for u in units]):
                runs = len(units[batch[0]])
                group = [tasks[units[u][j]] for j in range(runs) for u in batch]
                self._run_batch(module, group, runs, acc, ratio if near else None)
                if progress is not None:
                    progress(sum(t.core for t in group))
        t0 = time.perf_counter()
        out = _normalise_blend(acc.cpu().numpy(), shape)
        self.timings["blend"] += time.perf_counter() - t0
        return out

    def _by_model(self, tasks: Sequence[TileTask]) -> list[tuple[torch.nn.Module, list[int], bool, bool]]:
        """Each module with the task indices it runs.

        Also whether it is the near model (the near tasks'), and whether it runs the bands that
        share a geometry as one unit.
        """
        if self.near is None:
            return [(self.module, list(range(len(tasks))), False, self.shares_geometry)]
        return [(self.module, [i for i, t in enumerate(tasks) if not t.near], False, self.shares_geometry),
                (self.near.module, [i for i, t in enumerate(tasks) if t.near], True,
                 self.shares_geometry and self._near_shares_geometry)]

    def _run_batch(self, module: torch.nn.Module, group: Sequence[TileTask], runs: int, acc: torch.Tensor,
                   ratio: torch.Tensor | None) -> None:
        """One model call on ``group`` (``runs`` tasks per geometry), blended into ``acc``."""
        dev = self.device
        t0 = time.perf_counter()
        b = collate([t.task for t in group]).to(dev)
        chunk = max(1, self.chunk_rows // len(group))
        options = {"groups": runs} if runs > 1 else {}
        with torch.inference_mode():
            mean, std = module(b.xc, b.yc, b.xt, b.context_valid, query_chunk=chunk, **options)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)  # one sync per batch, for honest stage timings
        t1 = time.perf_counter()
        self.timings["model"] += t1 - t0
        stats = [_task_stats(t.task) for t in group]
        shift = torch.tensor([float(sh[0]) for sh, _ in stats], device=dev)[:, None]
        scale = torch.tensor([float(sc[0]) for _, sc in stats], device=dev)[:, None]
        valid = b.target_valid
        index = torch.from_numpy(np.concatenate([t.index for t in group])).to(dev)
        wts = torch.from_numpy(np.concatenate([t.weights for t in group])).to(dev)
        m = (mean[..., 0] * scale + shift)[valid].double()
        s = (std[..., 0] * scale)[valid].double()
        if any(t.src is not None for t in group):
            src_np, coef_np = _read_off_rows(group)
            src, coef = torch.from_numpy(src_np).to(dev), torch.from_numpy(coef_np).to(dev)
            m, s = (m[src] * coef).sum(1), (s[src] * coef).sum(1)
        if ratio is not None:
            s = s * ratio[index]
        acc.index_add_(1, index, torch.stack([wts * m, wts * s, wts]))
        self.timings["blend"] += time.perf_counter() - t1


def _read_off_rows(group: Sequence[TileTask]) -> tuple[np.ndarray, np.ndarray]:
    """``src``/``coef`` of a batch's tasks as rows of its concatenated targets (identity where None)."""
    srcs, coefs, offset = [], [], 0
    for t in group:
        n = t.task.xt.shape[0]
        if t.src is None:
            srcs.append(np.repeat(np.arange(offset, offset + n)[:, None], 4, 1))
            coefs.append(np.tile([1.0, 0.0, 0.0, 0.0], (n, 1)))
        else:
            assert t.coef is not None  # set with src
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


def reference_predict(module: torch.nn.Module, tasks: Sequence[TileTask], shape: tuple[int, int, int], *,
                      near: torch.nn.Module | None = None, near_ratio: np.ndarray | None = None
                      ) -> tuple[np.ndarray, np.ndarray]:
    """The Predictor's slow twin: one model call per tile, blended with ``np.add.at``.

    ``near``: the module of the near tasks (None: ``module``), their std times ``near_ratio``
    (``shape``; None: 1).
    """
    acc = np.zeros((3, int(np.prod(shape))))
    ratio = None if near_ratio is None else np.asarray(near_ratio, float).ravel()
    for t in tasks:
        b = collate([t.task])
        with torch.no_grad():
            mean, std = (near if t.near and near is not None else module)(b.xc, b.yc, b.xt, b.context_valid)
        shift, scale = _task_stats(t.task)
        m = read_off(mean[0, :, 0].double().numpy() * scale[0] + shift[0], t.src, t.coef)
        s = read_off(std[0, :, 0].double().numpy() * scale[0], t.src, t.coef)
        if t.near and near is not None and ratio is not None:
            s = s * ratio[t.index]
        np.add.at(acc[0], t.index, t.weights * m)
        np.add.at(acc[1], t.index, t.weights * s)
        np.add.at(acc[2], t.index, t.weights)
    return _normalise_blend(acc, shape)
