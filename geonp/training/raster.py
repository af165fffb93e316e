"""``geonp.train``: train a model on the user's rasters (and optionally simulated GP fields).

Windows of ``patch_size`` pixels are read from the training region of each raster; each step hides
pixels under simulated gaps (:mod:`geonp.data.gaps`), and the model learns to predict the hidden
pixels of a query window (``core_size``) from the context that
:func:`geonp.context.select_context` chooses, exactly as ``geonp fill`` chooses it for a tile.
With large windows (e.g. 256 px), scene-scale clouds and far context (``n_far``) the tasks look
like filling: query windows deep inside gaps larger than themselves, context on every side.
Each band is a separate task (``dim_y = 1``), so a model works on any band count, and rasters of
different band counts can be mixed (each group of rasters keeps its own normalisation).
"""

from __future__ import annotations

import json
import logging
import math
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from geonp._version import __version__
from geonp.config import ModelConfig, TrainConfig
from geonp.data.batch import Batch
from geonp.data.datasets import PatchPool, sample_patches, split_columns
from geonp.context import ContextSpec
from geonp.data.gaps import sample_training_mask, sample_window_mask
from geonp.data.synthetic import gp_grid_field
from geonp.data.tasks import Task, collate, window_task
from geonp.errors import ConfigError, InputRasterError, NoValidPixelsError
from geonp.models import build_model
from geonp.normalize import Normalizer
from geonp.model_files.card import ModelCard
from geonp.model_files.checkpoint import load_checkpoint, save_model
from geonp.model_files.train_state import load_training_state, save_training_state
from geonp.training.loop import FitResult, fit

logger = logging.getLogger(__name__)

GP_KERNELS = ("rbf", "matern32", "matern52")


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

    def __post_init__(self) -> None:
        for name in ("patch_size", "core_size", "max_context", "max_targets", "n_far", "search_radius",
                     "rings", "sectors", "tasks_per_window"):
            value = getattr(self, name)
            low = 8 if name == "patch_size" else 0 if name == "n_far" else 1
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ConfigError(f"{name}={value!r} must be an integer >= {low}")

    @property
    def context(self) -> ContextSpec:
        """The context geometry of these tasks."""
        return ContextSpec(n_near=self.max_context, n_far=self.n_far, search_radius=self.search_radius,
                           rings=self.rings, sectors=self.sectors)

    def to_dict(self) -> dict[str, int]:
        """For the model card (``task_shape``): the fields, and ``n_near`` (= ``max_context``)."""
        return {**self.__dict__, "n_near": self.max_context}


@dataclass
class _Group:
    """Training (or validation) windows of rasters sharing a band count, and their normalisation."""

    pool: PatchPool
    norm: Normalizer
    weight: float


@dataclass(frozen=True)
class _Recipe:
    """How a window becomes tasks: its shape, the gap mix (None = the 64-px patch mix), a real pattern."""

    shape: TaskShape
    gap_mix: dict[str, float] | None
    source: np.ndarray | None
    footprint_probability: float = 0.15


def _raster_tasks(groups: Sequence[_Group], recipe: _Recipe, rng: np.random.Generator) -> list[Task]:
    p = np.array([g.weight for g in groups])
    g = groups[int(rng.choice(len(groups), p=p / p.sum()))] if len(groups) > 1 else groups[0]
    i = int(rng.integers(len(g.pool)))
    raw = g.pool.values[i]  # [bands, p, p]
    n_bands = raw.shape[0]
    picks = rng.choice(n_bands, size=recipe.shape.tasks_per_window, replace=recipe.shape.tasks_per_window > n_bands)
    valid = np.isfinite(raw).all(0)
    values = np.nan_to_num((raw - np.asarray(g.norm.mean)[:, None, None]) / np.asarray(g.norm.std)[:, None, None])
    _, r, c = g.pool.offsets[i]
    return _cut_tasks([values[b][None] for b in picks], valid, recipe, rng, origin=(r, c))


def _gp_tasks(recipe: _Recipe, rng: np.random.Generator) -> list[Task]:
    p = min(recipe.shape.patch_size, 256)
    kernel = GP_KERNELS[int(rng.integers(len(GP_KERNELS)))]
    lengthscale = float(np.exp(rng.uniform(np.log(2.0), np.log(24.0 if p <= 64 else 64.0))))
    field = gp_grid_field((p, p), kernel=kernel, lengthscale=lengthscale, rng=rng)
    field = (field + rng.normal(0, 0.02, field.shape))[None].astype(np.float32)
    fields = [field] * recipe.shape.tasks_per_window  # one field, several query windows
    shape = TaskShape(**{**recipe.shape.__dict__, "patch_size": p,
                         "core_size": min(recipe.shape.core_size, p)})
    return _cut_tasks(fields, np.ones((p, p), bool), _Recipe(shape, recipe.gap_mix, None,
                                                               recipe.footprint_probability), rng)


def _cut_tasks(values: Sequence[np.ndarray], valid: np.ndarray, recipe: _Recipe, rng: np.random.Generator,
               origin: tuple[int, int] = (0, 0)) -> list[Task]:
    """One gap mask over the window, then one task per entry of ``values`` (a query window each)."""
    shape = recipe.shape
    h, w = valid.shape
    c = min(shape.core_size, h, w)
    if recipe.gap_mix is None:
        is_gap = sample_training_mask((h, w), rng=rng, source=recipe.source)
    else:
        is_gap, outside = sample_window_mask((h, w), rng=rng, source=recipe.source, weights=recipe.gap_mix,
                                             footprint_probability=recipe.footprint_probability)
        valid = valid & ~outside
    targets = is_gap & valid
    tasks = []
    for vals in values:
        for _ in range(4):  # a query window with at least one target
            r0, c0 = int(rng.integers(0, h - c + 1)), int(rng.integers(0, w - c + 1))
            if targets[r0:r0 + c, c0:c0 + c].any():
                break
        task = window_task(vals, valid, is_gap, core=(r0, r0 + c, c0, c0 + c), spec=shape.context,
                           max_targets=shape.max_targets, rng=rng, origin=origin)
        if task is not None:
            tasks.append(task)
    return tasks


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


def hardware() -> str:
    """This machine as a model card states it: CPU, cores and GPU."""
    gpu = "CUDA " + torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, {gpu}"


def best_of(card: ModelCard) -> tuple[float, int]:
    """A trained model's best validation NLL and its step, from its card (NaN and -1 if unstated)."""
    nll = math.nan if card.best_val_nll is None else float(card.best_val_nll)
    return nll, -1 if card.best_step is None else int(card.best_step)


@dataclass
class TrainReport:
    """What :func:`train` produced."""

    output: Path
    steps: int
    best_val_nll: float
    best_step: int
    seconds: float
    history: list[dict[str, float]]


def _gap_source(path: str | os.PathLike[str] | None) -> np.ndarray | None:
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


class _MetricsWriter:
    def __init__(self, path: Path | None, resume: bool) -> None:
        self.path = path
        if path is not None and not resume:
            path.unlink(missing_ok=True)

    def write(self, record: dict[str, Any]) -> None:
        if self.path is None:
            return
        if self.path.suffix == ".csv":
            new = not self.path.exists()
            with self.path.open("a") as f:
                if new:
                    f.write(",".join(record) + "\n")
                f.write(",".join(f"{v}" for v in record.values()) + "\n")
        else:
            with self.path.open("a") as f:
                f.write(json.dumps(record) + "\n")


def train(
    inputs: Sequence[str | os.PathLike[str]],
    output: str | os.PathLike[str],
    *,
    model: ModelConfig | None = None,
    training: TrainConfig | None = None,
    nodata: float | None = None,
    bands: Sequence[int] | None = None,
    batch_size: int = 16,
    task_shape: TaskShape = TaskShape(),
    val_fraction: float = 0.15,
    test_fraction: float = 0.0,
    val_tasks: int = 64,
    pool_size: int = 2000,
    pretrain_steps: int = 0,
    gap_source: str | os.PathLike[str] | None = None,
    resume: bool = False,
    metrics: str | os.PathLike[str] | None = None,
    name: str | None = None,
    command: str | None = None,
    progress: Callable[[int, int, float], None] | None = None,
    n_far: int | None = None,
    search_radius: int | None = None,
    rings: int | None = None,
    sectors: int | None = None,
    tasks_per_window: int | None = None,
    gap_mix: dict[str, float] | None = None,
    footprint_probability: float = 0.15,
    gp_fraction: float = 0.0,
    init_from: str | os.PathLike[str] | None = None,
    pool_megabytes: float = 256.0,
) -> TrainReport:
    """Train a model on rasters and write it to ``output`` (a model directory).

    Args:
        inputs: raster files; rasters of different band counts are grouped, each group with
            its own normalisation and windows (the model card stores the first group's).
        output: model directory to write (best model by validation NLL, plus resume state).
        model: architecture (default: ``ModelConfig()``, TNP-KR with scan attention).
        training: optimisation settings (``steps`` counts raster steps, after any pre-training).
        nodata: nodata value when the files lack (or have a wrong) tag.
        bands: 1-based bands to train on (default all).
        batch_size: tasks per step.
        task_shape: patch, core and context sizes.
        val_fraction: fraction of columns (right of the training region) for validation.
        test_fraction: fraction of columns (rightmost) held out entirely, for later evaluation.
        val_tasks: fixed validation tasks.
        pool_size: training patches read into memory.
        pretrain_steps: steps on simulated GP fields before the raster steps.
        gap_source: a mask raster (non-zero = gap) or a raster whose missing pixels give real gap
            shapes to borrow.
        resume: continue from the training state in ``output``.
        metrics: write one record per validation to this ``.csv`` or ``.jsonl`` file.
        name: model name for its card.
        command: the command line, for the card.
        progress: ``(step, total, loss)`` callback.
        n_far: far context points per task (overrides ``task_shape.n_far``).
        search_radius: farthest context pixel (overrides ``task_shape.search_radius``).
        rings: distance rings of the far set (overrides the task shape's).
        sectors: angular sectors of the far set (overrides the task shape's).
        tasks_per_window: tasks cut from one window and mask (overrides the task shape's).
        gap_mix: gap kind -> weight for window masks (:func:`geonp.data.gaps.sample_window_mask`),
            e.g. ``{"cloud": 0.3, "scene_cloud": 0.25, "stripe": 0.15, "random": 0.15,
            "borrowed": 0.15}``; None keeps the 64-px patch mix for ``patch_size < 128`` and uses
            :data:`geonp.data.gaps.WINDOW_KIND_WEIGHTS` for larger windows.
        footprint_probability: chance that a window mask also gets a straight nodata collar.
        gp_fraction: fraction of the raster steps' windows drawn from simulated GP fields.
        init_from: a model directory whose weights start the training (fine-tuning; same
            architecture).
        pool_megabytes: memory budget of the training windows held in memory (caps ``pool_size``
            for large windows).

    Returns:
        A :class:`TrainReport`.
    """
    mcfg = model or ModelConfig()
    tcfg = training or TrainConfig()
    if mcfg.dim_y != 1:
        raise ConfigError(f"raster training models each band on its own (dim_y=1), got dim_y={mcfg.dim_y}")
    if not 0 < val_fraction < 1 or not 0 <= test_fraction < 1 or val_fraction + test_fraction >= 0.9:
        raise ConfigError(f"val_fraction={val_fraction} and test_fraction={test_fraction} must leave "
                          "at least 10% of the columns for training")
    if not inputs:
        raise ConfigError("no training rasters given")
    overrides = {k: v for k, v in (("n_far", n_far), ("search_radius", search_radius), ("rings", rings),
                                   ("sectors", sectors), ("tasks_per_window", tasks_per_window))
                 if v is not None}
    if overrides:
        task_shape = TaskShape(**{**task_shape.__dict__, **overrides})
    if task_shape.core_size > task_shape.patch_size:
        task_shape = TaskShape(**{**task_shape.__dict__, "core_size": task_shape.patch_size})
    if not 0.0 <= gp_fraction <= 1.0:
        raise ConfigError(f"gp_fraction={gp_fraction} must be in [0, 1]")
    if gap_mix is None and task_shape.patch_size >= 128:
        from geonp.data.gaps import WINDOW_KIND_WEIGHTS

        gap_mix = dict(WINDOW_KIND_WEIGHTS)
    out = Path(output)
    t0 = time.perf_counter()
    rng = np.random.default_rng(tcfg.seed)
    train_groups, val_groups = _groups(inputs, task_shape, rng, nodata=nodata, bands=bands,
                                       val_fraction=val_fraction, test_fraction=test_fraction,
                                       pool_size=pool_size, val_count=max(val_tasks, 16),
                                       pool_megabytes=pool_megabytes, seed=tcfg.seed)
    norm = train_groups[0].norm
    out.mkdir(parents=True, exist_ok=True)  # only once the data is usable: no empty model directory
    recipe = _Recipe(task_shape, gap_mix, _gap_source(gap_source), footprint_probability)

    val_rng = np.random.default_rng(tcfg.seed + 10_000)
    val_batches = [
        make_batch(lambda r: _raster_tasks(val_groups, recipe, r), min(16, val_tasks), val_rng)
        for _ in range(max(1, val_tasks // 16))
    ]

    torch.manual_seed(tcfg.seed)
    module = build_model(mcfg)
    if init_from is not None and not resume:
        start_weights = load_checkpoint(init_from).module.state_dict()
        try:
            module.load_state_dict(start_weights)
        except RuntimeError as err:
            raise ConfigError(f"cannot start from {init_from}: its architecture differs from the one asked "
                              f"for; pass the same --dim/--depth/--heads/--ff-dim ({str(err).splitlines()[0]})") from err
    start, opt_state, best, history = 0, None, math.inf, []
    if resume:
        state, opt_state, prog = load_training_state(out)
        module.load_state_dict(state)
        start, best, history = int(prog["step"]), float(prog["best_val_nll"]), list(prog["history"])
        logger.info("resuming from step %d", start)
    total_steps = pretrain_steps + tcfg.steps
    metrics_writer = _MetricsWriter(Path(metrics) if metrics else None, resume)

    card = ModelCard(
        name=name or out.name,
        description=f"{_arch_name(mcfg)} trained by geonp train on {len(inputs)} raster(s)",
        geonp_version=__version__,
        command=command,
        training_data=[str(Path(p).name) for p in inputs],
        band_count=int(train_groups[0].pool.values.shape[1]),
        coord_unit=mcfg.coord_unit,
        task_shape=task_shape.to_dict(),
        gap_mix=gap_mix,
        gp_fraction=gp_fraction,
        init_from=None if init_from is None else str(init_from),
        hardware=hardware(),
        pretrain_steps=pretrain_steps,
        steps=tcfg.steps,
        batch_size=batch_size,
        train_config=tcfg.__dict__,
        extra={
            "bands": list(bands) if bands else None,
            "nodata": nodata,
            "footprint_probability": footprint_probability if gap_mix is not None else 0.0,
            "split": {"axis": "columns", "val_fraction": val_fraction, "test_fraction": test_fraction,
                      "regions": [split_columns(_width(p), val_fraction=val_fraction, test_fraction=test_fraction,
                                                min_val_columns=task_shape.patch_size).__dict__ for p in inputs]},
        },
    )

    def save_best(record: dict[str, float], is_best: bool, result: FitResult) -> None:
        nonlocal card
        record = {**record, "step": record["step"]}
        history.append(record)
        metrics_writer.write(record)
        if is_best:
            card = replace(card, best_val_nll=record["val_nll"], best_step=int(record["step"]),
                           training_seconds=round(time.perf_counter() - t0, 1))
            save_model(out, module, mcfg, normalizer=norm.to_dict(), card=card)
        save_training_state(out, module, result.optimizer_state or {"state": {}, "param_groups": []},
                            {"step": result.step, "best_val_nll": result.best_val_nll, "history": history})

    phases: list[tuple[int, int, Callable[[np.random.Generator], list[Task]]]] = []
    if pretrain_steps:
        phases.append((0, pretrain_steps, lambda r: _gp_tasks(recipe, r)))
    phases.append((pretrain_steps, total_steps,
                   lambda r: _gp_tasks(recipe, r) if gp_fraction and r.random() < gp_fraction
                   else _raster_tasks(train_groups, recipe, r)))
    result = FitResult(best_val_nll=best)
    for begin, end, draw in phases:
        if start >= end:
            continue
        phase_cfg = TrainConfig(**{**tcfg.__dict__, "steps": end})

        def sample(step: int, draw: Callable[[np.random.Generator], list[Task]] = draw) -> Batch:
            return make_batch(draw, batch_size, np.random.default_rng([tcfg.seed, step]))

        result = fit(module, sample, val_batches, phase_cfg, start_step=max(start, begin),
                     optimizer_state=opt_state, best_val_nll=result.best_val_nll,
                     on_validate=save_best,
                     progress=None if progress is None else lambda s, n, v: progress(s, total_steps, v))
        opt_state, start = result.optimizer_state, end
    if not (out / "model.safetensors").exists():
        raise InputRasterError("training produced no model; the validation NLL was never finite")
    return TrainReport(out, total_steps, *best_of(load_checkpoint(out).card), time.perf_counter() - t0, history)


def _groups(inputs: Sequence[str | os.PathLike[str]], shape: TaskShape, rng: np.random.Generator, *,
            nodata: float | None, bands: Sequence[int] | None, val_fraction: float, test_fraction: float,
            pool_size: int, val_count: int, pool_megabytes: float, seed: int) -> tuple[list[_Group], list[_Group]]:
    """Training and validation windows, one group per band count (in the order of the inputs).

    A group's windows are ``patch_size`` pixels, or less when its rasters' training columns are
    narrower; its weight in the task draw grows with the square root of its pixels.
    """
    from geonp.io.raster import open_raster, raster_info, select_bands

    by_count: dict[int, list[tuple[str | os.PathLike[str], int, int]]] = {}
    for path in inputs:
        with open_raster(path) as src:
            info = raster_info(src)
            by_count.setdefault(len(select_bands(info, bands)), []).append((path, info.width, info.height))
    train_groups: list[_Group] = []
    val_groups: list[_Group] = []
    for n, (count, members) in enumerate(by_count.items()):
        paths = [m[0] for m in members]
        fits = min(min(m[2] for m in members), min(
            split_columns(m[1], val_fraction=val_fraction, test_fraction=test_fraction).train[1] for m in members))
        size = min(shape.patch_size, fits)
        if size < min(shape.core_size, 32):
            if n == 0:
                raise InputRasterError(f"{paths[0]} is too small for {shape.patch_size}-px windows")
            logger.warning("skipping %s: too small for training windows", paths)
            continue
        per_window = count * size * size * 4
        n_pool = max(16, min(pool_size, int(pool_megabytes * 2**20 // per_window)))
        common = dict(patch_size=size, nodata=nodata, bands=bands, val_fraction=val_fraction,
                      test_fraction=test_fraction, min_valid_fraction=0.5 if n == 0 else 0.3)
        pool = sample_patches(paths, region="train", count=n_pool, rng=rng, **common)
        flat = np.moveaxis(pool.values, 1, 0).reshape(pool.values.shape[1], -1)
        norm = Normalizer.fit(flat, np.isfinite(flat), seed=seed)
        pixels = float(sum(m[2] * split_columns(m[1], val_fraction=val_fraction, test_fraction=test_fraction).train[1]
                           for m in members))
        train_groups.append(_Group(pool, norm, math.sqrt(pixels)))
        val_width = min(int(np.diff(split_columns(m[1], val_fraction=val_fraction,
                                                  test_fraction=test_fraction).val)[0]) for m in members)
        try:
            val_pool = sample_patches(paths, region="val", count=val_count, rng=rng,
                                      **{**common, "patch_size": max(8, min(size, val_width))})
        except NoValidPixelsError:
            if n == 0:
                raise
            logger.warning("no validation windows in %s (validation uses the other rasters)", paths)
            continue
        val_groups.append(_Group(val_pool, norm, math.sqrt(pixels)))
    return train_groups, val_groups


def _arch_name(cfg: ModelConfig) -> str:
    return {"tnpkr": f"TNP-KR ({cfg.attention})", "tnpd": "TNP-D", "cmanp": "CMANP"}.get(cfg.arch, cfg.arch)


def _width(path: str | os.PathLike[str]) -> int:
    from geonp.io.raster import open_raster

    with open_raster(path) as src:
        return int(src.width)
