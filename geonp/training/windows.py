"""Training windows and the tasks cut from them, for :func:`geonp.training.raster.train`.

Windows of ``patch_size`` pixels are read from the training (and validation) columns of each
raster, one :class:`WindowGroup` per band count with its own normalisation; a
:class:`TaskRecipe` (a :class:`TaskShape`, a gap mix, real gap shapes) turns a window, or a
simulated GP field, into tasks: one gap mask, then query windows with hidden targets and the
context :func:`geonp.tasks.context.select_context` chooses, as ``geonp fill`` chooses it for a tile.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import ndimage

from geonp.data.batch import Batch
from geonp.data.datasets import ColumnSplit, PatchPool, PatchSpec, sample_patches
from geonp.data.gaps import sample_training_mask, sample_window_mask
from geonp.data.synthetic import KernelName, gp_grid_field
from geonp.data.tasks import Task, TaskWindow, collate, window_task
from geonp.errors import ConfigError, InputRasterError, NoValidPixelsError
from geonp.tasks.context import ContextSpec
from geonp.tasks.lattice import NEAR_DISTANCE
from geonp.tasks.normalize import Normalizer

logger = logging.getLogger(__name__)

#: Share of the training batches that are near batches when the task shape has a ``near_context``
#: (the default of :attr:`TaskShape.near_percent`).
NEAR_BATCH_FRACTION = 0.5
#: Query window edges of a near batch's tasks, drawn evenly: the fill's tiles near data are split
#: down to 12 px (query windows of 20 px with their margins) where their gaps have many neighbours
#: (stripes, dropped pixels) and stay 48 px along cloud edges.
NEAR_CORES = (16, 24, 48)

__all__ = ["DEFAULT_TASK_SHAPE", "GP_KERNELS", "PoolOptions", "TaskRecipe", "TaskShape", "WindowGroup", "cut_tasks",
           "gap_source_mask", "gp_tasks", "is_near_batch", "make_batch", "raster_tasks", "window_groups"]

GP_KERNELS: tuple[KernelName, ...] = ("rbf", "matern32", "matern52")


@dataclass(frozen=True)
class TaskShape:
    """How tasks are cut from windows (shared by training and validation; stored in the model card).

    Attributes:
        patch_size: edge of the window read from a raster (the query window lies inside it, and so
            does all its context).
        core_size: edge of the query window whose hidden pixels are targets (``geonp fill``
            uses it as its default tile size).
        max_context: the near set: observed pixels nearest to the targets (``ContextSpec.n_near``).
        max_targets: cap on targets per task.
        n_far: the far set: observed pixels spread over rings and sectors (0 = near set only).
        search_radius: farthest context pixel, in pixels beyond the query window.
        rings: distance rings of the far set.
        sectors: angular sectors of the far set.
        tasks_per_window: tasks cut from one window and gap mask (different bands and query
            windows), which saves mask generation.
        near_context: the near set of *near batches* (0: none): a share (:data:`NEAR_BATCH_FRACTION`)
            of the training batches are tasks shaped like the fill's tiles near data
            (:meth:`TaskRecipe.near`): small query windows, targets within
            :data:`~geonp.tasks.lattice.NEAR_DISTANCE` px of data, this many near context pixels and
            no far ones. ``geonp fill`` gives its tiles near data this context (cheaper than
            ``max_context``: stripes, dropped pixels, cloud edges).
        near_percent: percent of the batches that are near batches when ``near_context`` is set
            (100: a near model, :attr:`LoadedModel.near <geonp.model_files.checkpoint.LoadedModel.near>`,
            which sees only such tiles; its validation tasks are near tasks too).
    """

    patch_size: int = 64
    core_size: int = 48
    max_context: int = 256
    max_targets: int = 128
    n_far: int = 0
    search_radius: int = 512
    rings: int = 8
    sectors: int = 16
    tasks_per_window: int = 1
    near_context: int = 0
    near_percent: int = round(100 * NEAR_BATCH_FRACTION)

    def __post_init__(self) -> None:
        """Check that every size is a whole number in range (see :class:`ConfigError`)."""
        for name in ("patch_size", "core_size", "max_context", "max_targets", "n_far", "search_radius",
                     "rings", "sectors", "tasks_per_window", "near_context"):
            value = getattr(self, name)
            low = 8 if name == "patch_size" else 0 if name in ("n_far", "near_context") else 1
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ConfigError(f"{name}={value!r} must be an integer >= {low}")
        if not isinstance(self.near_percent, int) or isinstance(self.near_percent, bool) \
                or not 0 <= self.near_percent <= 100:
            raise ConfigError(f"near_percent={self.near_percent!r} must be an integer in 0..100")

    @property
    def context(self) -> ContextSpec:
        """The context geometry of these tasks."""
        return ContextSpec(n_near=self.max_context, n_far=self.n_far, search_radius=self.search_radius,
                           rings=self.rings, sectors=self.sectors)

    def to_dict(self) -> dict[str, int]:
        """For the model card (``task_shape``): the fields, and ``n_near`` (= ``max_context``)."""
        return {**self.__dict__, "n_near": self.max_context}


#: The task shape of ``geonp train`` without options: 64-px windows, 48-px query windows.
DEFAULT_TASK_SHAPE = TaskShape()


@dataclass
class WindowGroup:
    """Training (or validation) windows of rasters sharing a band count, and their normalisation."""

    pool: PatchPool
    norm: Normalizer
    weight: float


@dataclass(frozen=True)
class TaskRecipe:
    """How a window becomes tasks: its shape, the gap mix (None = the 64-px patch mix), a real pattern."""

    shape: TaskShape
    gap_mix: dict[str, float] | None
    source: np.ndarray | None
    footprint_probability: float = 0.15
    near_only: bool = False

    def near(self) -> TaskRecipe:
        """The recipe of a near batch (:attr:`TaskShape.near_context`): the fill's tiles near data.

        Without the gap mix's sparse windows (1-64 visible pixels): their near targets all lie next
        to a lone pixel, and a model trained on them gave a std too small with a handful of pixels
        (``runs/near_ft``, docs/benchmarks.md).
        """
        shape = dataclasses.replace(self.shape, max_context=self.shape.near_context, n_far=0)
        mix = None if self.gap_mix is None else {k: v for k, v in self.gap_mix.items() if k != "sparse"} or None
        return dataclasses.replace(self, shape=shape, near_only=True, gap_mix=mix)


def raster_tasks(groups: Sequence[WindowGroup], recipe: TaskRecipe, rng: np.random.Generator) -> list[Task]:
    """Tasks from one window of a group (drawn by weight): bands picked, normalised, cut."""
    p = np.array([g.weight for g in groups])
    g = groups[int(rng.choice(len(groups), p=p / p.sum()))] if len(groups) > 1 else groups[0]
    i = int(rng.integers(len(g.pool)))
    raw = g.pool.values[i]  # [bands, p, p]
    n_bands = raw.shape[0]
    picks = rng.choice(n_bands, size=recipe.shape.tasks_per_window, replace=recipe.shape.tasks_per_window > n_bands)
    valid = np.isfinite(raw).all(0)
    values = np.nan_to_num((raw - np.asarray(g.norm.mean)[:, None, None]) / np.asarray(g.norm.std)[:, None, None])
    _, r, c = g.pool.offsets[i]
    return cut_tasks([values[b][None] for b in picks], valid, recipe, rng, origin=(r, c))


def gp_tasks(recipe: TaskRecipe, rng: np.random.Generator) -> list[Task]:
    """Tasks from one simulated GP field (random kernel and length scale), cut as a raster window."""
    p = min(recipe.shape.patch_size, 256)
    kernel = GP_KERNELS[int(rng.integers(len(GP_KERNELS)))]
    lengthscale = float(np.exp(rng.uniform(np.log(2.0), np.log(24.0 if p <= 64 else 64.0))))
    field = gp_grid_field((p, p), kernel=kernel, lengthscale=lengthscale, rng=rng)
    field = (field + rng.normal(0, 0.02, field.shape))[None].astype(np.float32)
    fields = [field] * recipe.shape.tasks_per_window  # one field, several query windows
    shape = TaskShape(**{**recipe.shape.__dict__, "patch_size": p,
                         "core_size": min(recipe.shape.core_size, p)})
    return cut_tasks(fields, np.ones((p, p), bool), dataclasses.replace(recipe, shape=shape, source=None), rng)


def cut_tasks(values: Sequence[np.ndarray], valid: np.ndarray, recipe: TaskRecipe, rng: np.random.Generator,
               origin: tuple[int, int] = (0, 0)) -> list[Task]:
    """One gap mask over the window, then one task per entry of ``values`` (a query window each)."""
    shape = recipe.shape
    h, w = valid.shape
    c = min(int(rng.choice(NEAR_CORES)) if recipe.near_only else shape.core_size, h, w)
    if recipe.gap_mix is None:
        is_gap = sample_training_mask((h, w), rng=rng, source=recipe.source)
    else:
        is_gap, outside = sample_window_mask((h, w), rng=rng, source=recipe.source, weights=recipe.gap_mix,
                                             footprint_probability=recipe.footprint_probability)
        valid = valid & ~outside
    targets = is_gap & valid
    if recipe.near_only:  # only the hidden pixels near data are targets
        targets &= ndimage.distance_transform_edt(~(valid & ~is_gap)) <= NEAR_DISTANCE
    tasks = []
    for vals in values:
        for _ in range(4):  # a query window with at least one target
            r0, c0 = int(rng.integers(0, h - c + 1)), int(rng.integers(0, w - c + 1))
            if targets[r0:r0 + c, c0:c0 + c].any():
                break
        window = TaskWindow(vals, valid, is_gap, targets if recipe.near_only else None, origin)
        task = window_task(window, core=(r0, r0 + c, c0, c0 + c), spec=shape.context, max_targets=shape.max_targets,
                           rng=rng)
        if task is not None:
            tasks.append(task)
    return tasks


def is_near_batch(shape: TaskShape, seed: int, step: int) -> bool:
    """Whether step ``step``'s batch is a near batch (:attr:`TaskShape.near_context`).

    Drawn from the seed and step alone: every rank of a step agrees, and a resumed run draws the same.
    """
    draw = float(np.random.default_rng([seed, step, 1 << 20]).random())
    return bool(shape.near_context) and draw < shape.near_percent / 100


def make_batch(draw: Callable[[np.random.Generator], Task | list[Task] | None], batch_size: int,
               rng: np.random.Generator) -> Batch:
    """Draw non-empty tasks (one or a list per call) until ``batch_size``, and pad them into a batch."""
    tasks: list[Task] = []
    for _ in range(batch_size * 20):
        drawn = draw(rng)
        tasks.extend(t for t in ([drawn] if isinstance(drawn, Task) else drawn or []) if t is not None)
        if len(tasks) >= batch_size:
            return collate(tasks[:batch_size])
    raise NoValidPixelsError("could not cut tasks with both context and targets from the patches; "
                             "the rasters have too few valid pixels")


def gap_source_mask(path: str | os.PathLike[str] | None) -> np.ndarray | None:
    """Real gap shapes to borrow: a mask raster (non-zero = gap) or a raster's missing pixels."""
    if path is None:
        return None
    from geonp.io.masks import valid_mask
    from geonp.io.raster import open_raster, raster_info

    with open_raster(path) as src:
        info = raster_info(src)
        arr = src.read(1)
    vals = arr.astype(np.float64)
    if set(np.unique(arr[:1000, :1000])) <= {0, 1, 255}:
        return vals > 0  # a mask raster: non-zero = gap
    return ~valid_mask(vals, nodata=None if info.nodata is None else info.nodata, source_dtype=info.dtype)


@dataclass(frozen=True)
class PoolOptions:
    """How :func:`window_groups` reads the training rasters' windows, and how many it keeps.

    Attributes:
        nodata: nodata value overriding the rasters' tags, or None.
        bands: 1-based bands read (None: all).
        split: the columns of each region (a group's windows widen the validation region to their edge).
        pool_size: most training windows of a group.
        val_count: validation windows of a group.
        pool_megabytes: most memory of a group's training windows (fewer of them when they are large).
    """

    nodata: float | None
    bands: Sequence[int] | None
    split: ColumnSplit
    pool_size: int
    val_count: int
    pool_megabytes: float


def window_groups(inputs: Sequence[str | os.PathLike[str]], shape: TaskShape, pools: PoolOptions,
                  seed: int) -> tuple[list[WindowGroup], list[WindowGroup]]:
    """Training and validation windows, one group per folder and band count (in the order of the inputs).

    Each folder of inputs is a *source* (``benchmarks/corpus.py`` writes one folder per source) and
    gets an equal share of the task draw, so no source dominates; within a folder a group's share
    grows with the square root of its pixels. A group's windows are ``patch_size`` pixels, or less
    when its rasters' training columns are narrower. ``seed`` draws the windows and seeds the
    normalisation's subsample.
    """
    from geonp.io.raster import open_raster, raster_info, select_bands

    rng = np.random.default_rng(seed)
    by_key: dict[tuple[str, int], list[tuple[str | os.PathLike[str], int, int]]] = {}
    for path in inputs:
        with open_raster(path) as src:
            info = raster_info(src)
            key = (str(Path(path).resolve().parent), len(select_bands(info, pools.bands)))
            by_key.setdefault(key, []).append((path, info.width, info.height))
    root_pixels: dict[str, float] = {}
    for (folder, _), members in by_key.items():
        root_pixels[folder] = root_pixels.get(folder, 0.0) + math.sqrt(_train_pixels(members, pools.split))
    train_groups: list[WindowGroup] = []
    val_groups: list[WindowGroup] = []
    for n, ((folder, count), members) in enumerate(by_key.items()):
        paths = [m[0] for m in members]
        fits = min(min(m[2] for m in members), min(pools.split.regions(m[1]).train[1] for m in members))
        size = min(shape.patch_size, fits)
        if size < min(shape.core_size, 32):
            if n == 0:
                raise InputRasterError(f"{paths[0]} is too small for {shape.patch_size}-px windows")
            logger.warning("skipping %s: too small for training windows", paths)
            continue
        per_window = count * size * size * 4
        n_pool = max(16, min(pools.pool_size, int(pools.pool_megabytes * 2**20 // per_window)))
        spec = PatchSpec(size, pools.nodata, pools.bands, pools.split, 0.5 if n == 0 else 0.3)
        pool = sample_patches(paths, spec, region="train", count=n_pool, rng=rng)
        flat = np.moveaxis(pool.values, 1, 0).reshape(pool.values.shape[1], -1)
        norm = Normalizer.fit(flat, np.isfinite(flat), seed=seed)
        share = math.sqrt(_train_pixels(members, pools.split)) / root_pixels[folder] / len(root_pixels)
        train_groups.append(WindowGroup(pool, norm, share))
        val_width = min(int(np.diff(pools.split.regions(m[1]).val)[0]) for m in members)
        try:
            val_pool = sample_patches(paths, dataclasses.replace(spec, patch_size=max(8, min(size, val_width))),
                                      region="val", count=pools.val_count, rng=rng)
        except NoValidPixelsError:
            if n == 0:
                raise
            logger.warning("no validation windows in %s (validation uses the other rasters)", paths)
            continue
        val_groups.append(WindowGroup(val_pool, norm, share))
    return train_groups, val_groups


def _train_pixels(members: Sequence[tuple[str | os.PathLike[str], int, int]], split: ColumnSplit) -> float:
    """Pixels in the training columns of ``(path, width, height)`` rasters."""
    return float(sum(h * split.regions(w).train[1] for _, w, h in members))
