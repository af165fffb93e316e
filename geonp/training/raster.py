"""``geonp.train``: train a model on the user's rasters (and optionally simulated GP fields).

Windows of ``patch_size`` pixels are read from the training region of each raster; each step hides
pixels under simulated gaps (:mod:`geonp.data.gaps`), and the model learns to predict the hidden
pixels of a query window (``core_size``) from the context that
:func:`geonp.tasks.context.select_context` chooses, exactly as ``geonp fill`` chooses it for a tile.
With large windows (e.g. 256 px), scene-scale clouds and far context (``n_far``) the tasks look
like filling: query windows deep inside gaps larger than themselves, context on every side.
Each band is a separate task (``dim_y = 1``), so a model works on any band count, and rasters of
different band counts can be mixed (each group of rasters keeps its own normalisation).

The windows and the tasks cut from them are :mod:`geonp.training.windows`; this module is the
training run: the model, its card, the phases of :func:`geonp.training.loop.fit`, resuming.
"""

from __future__ import annotations

import logging
import math
import os
import platform
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from geonp._version import __version__
from geonp.config import ModelConfig, TrainConfig, load_recipe
from geonp.data.batch import Batch
from geonp.data.datasets import split_columns
from geonp.data.tasks import Task
from geonp.errors import ConfigError, InputRasterError
from geonp.model_files.card import ModelCard
from geonp.model_files.checkpoint import load_checkpoint, save_model
from geonp.model_files.registry import resolve_model_path
from geonp.model_files.train_state import load_training_state, save_training_state
from geonp.models import MODEL_FAMILIES, build_model, load_start_weights
from geonp.training.allocator import keep_freed_memory
from geonp.training.calibrate import calibrate_on_validation
from geonp.training.loop import FitResult, MetricsWriter, fit
from geonp.training.parallel import GradientAverager, run_data_parallel, shard_size
from geonp.training.prefetch import PrefetchedBatches, default_workers
from geonp.training.windows import (
    TaskRecipe,
    TaskShape,
    gap_source_mask,
    gp_tasks,
    make_batch,
    raster_tasks,
    window_groups,
)

logger = logging.getLogger(__name__)

__all__ = ["TrainReport", "best_of", "hardware", "train"]


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


def train(
    inputs: Sequence[str | os.PathLike[str]],
    output: str | os.PathLike[str],
    *,
    model: ModelConfig | None = None,
    training: TrainConfig | None = None,
    nodata: float | None = None,
    bands: Sequence[int] | None = None,
    batch_size: int | None = None,
    task_shape: TaskShape | None = None,
    val_fraction: float | None = None,
    test_fraction: float | None = None,
    val_tasks: int | None = None,
    pool_size: int | None = None,
    pretrain_steps: int | None = None,
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
    footprint_probability: float | None = None,
    gp_fraction: float | None = None,
    init_from: str | os.PathLike[str] | None = None,
    pool_megabytes: float | None = None,
    data_workers: int | None = None,
    processes: int | None = None,
    calibrate: bool | None = None,
    recipe: str | os.PathLike[str] | Mapping[str, Mapping[str, Any]] = "default",
) -> TrainReport:
    """Train a model on rasters and write it to ``output`` (a model directory).

    Args:
        inputs: raster files; rasters of different band counts are grouped, each group with
            its own normalisation and windows (the model card stores the first group's).
        output: model directory to write (best model by validation NLL, plus resume state).
        model: architecture (default: the recipe's ``model`` section).
        training: optimisation settings (default: the recipe's ``training`` section; ``steps``
            counts raster steps, after any pre-training).
        nodata: nodata value when the files lack (or have a wrong) tag.
        bands: 1-based bands to train on (default all).
        batch_size: tasks per step.
        task_shape: patch, core and context sizes (default: the recipe's ``data`` entries of them).
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
        init_from: a built-in model name (``default``) or a model directory whose weights start
            the training (fine-tuning; same architecture).
        pool_megabytes: memory budget of the training windows held in memory (caps ``pool_size``
            for large windows).
        data_workers: processes cutting tasks ahead of the trainer (None: one where two or more
            cores are available, else none); the batches are the same with any number.
        processes: training processes sharing each step's batch (data parallel, one thread
            each; :mod:`geonp.training.parallel`); 2 on a 2-core CPU is about twice as fast as
            one. Each cuts its own share of the tasks, so the tasks depend on this number: resume
            with the same. None: 1.
        calibrate: fit the std calibration on the first raster's validation columns once trained
            (:mod:`geonp.training.calibrate`), as ``geonp evaluate --calibrate`` does.
        recipe: a shipped recipe's name (:func:`geonp.config.recipe_names`), a YAML
            file or a mapping of ``model``/``training``/``data`` sections (a file or mapping
            overrides the ``default`` recipe's entries). Every data keyword left as None takes
            the recipe's value: the defaults of ``geonp train`` live in ``recipes/default.yaml``.

    Returns:
        A :class:`TrainReport`.
    """
    explicit = {"nodata": nodata, "bands": bands, "batch_size": batch_size, "val_fraction": val_fraction,
                "test_fraction": test_fraction, "val_tasks": val_tasks, "pool_size": pool_size,
                "pretrain_steps": pretrain_steps, "gap_source": gap_source, "gap_mix": gap_mix,
                "footprint_probability": footprint_probability, "gp_fraction": gp_fraction,
                "init_from": init_from, "pool_megabytes": pool_megabytes, "metrics": metrics, "name": name,
                "calibrate": calibrate}
    mcfg, tcfg, task_shape, opts = _from_recipe(recipe, model, training, task_shape, explicit)
    (nodata, bands, batch_size, val_fraction, test_fraction, val_tasks, pool_size, pretrain_steps, gap_source,
     gap_mix, footprint_probability, gp_fraction, init_from, pool_megabytes, metrics, name, calibrate) = opts.values()
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
    keep_freed_memory()  # a step's large tensors reuse the last step's memory (no page faults)
    world = 1 if processes is None else processes
    if not isinstance(world, int) or not 1 <= world <= batch_size:
        raise ConfigError(f"processes={processes!r} must be an integer from 1 to batch_size={batch_size}")
    out = Path(output)
    t0 = time.perf_counter()
    rng = np.random.default_rng(tcfg.seed)
    train_groups, val_groups = window_groups(inputs, task_shape, rng, nodata=nodata, bands=bands,
                                       val_fraction=val_fraction, test_fraction=test_fraction,
                                       pool_size=pool_size, val_count=max(val_tasks, 16),
                                       pool_megabytes=pool_megabytes, seed=tcfg.seed)
    norm = train_groups[0].norm
    out.mkdir(parents=True, exist_ok=True)  # only once the data is usable: no empty model directory
    task_recipe = TaskRecipe(task_shape, gap_mix, gap_source_mask(gap_source), footprint_probability)

    val_rng = np.random.default_rng(tcfg.seed + 10_000)
    val_batches = [
        make_batch(lambda r: raster_tasks(val_groups, task_recipe, r), min(16, val_tasks), val_rng)
        for _ in range(max(1, val_tasks // 16))
    ]

    torch.manual_seed(tcfg.seed)
    module = build_model(mcfg)
    if init_from is not None and not resume:
        start_weights = load_checkpoint(resolve_model_path(init_from)).module.state_dict()
        try:
            load_start_weights(module, start_weights)
        except RuntimeError as err:
            raise ConfigError(f"cannot start from {init_from}: its architecture differs from the one asked "
                              f"for; pass the same --dim/--depth/--heads/--ff-dim ({str(err).splitlines()[0]})") from err
    start, opt_state, best, history = 0, None, math.inf, []
    if resume:
        state, opt_state, prog = load_training_state(out)
        module.load_state_dict(state)
        start, best, history = int(prog["step"]), float(prog["best_val_nll"]), list(prog["history"])
        logger.info("resuming from step %d", start)
        if int(prog.get("processes", 1)) != world:
            logger.warning("resuming with processes=%d where the run had %s: the tasks of the remaining steps "
                           "differ from those of an uninterrupted run", world, prog.get("processes", 1))
    total_steps = pretrain_steps + tcfg.steps
    metrics_writer = MetricsWriter(Path(metrics) if metrics else None, resume)

    card = ModelCard(
        name=name or out.name,
        description=f"{MODEL_FAMILIES[mcfg.arch].describe(mcfg)} trained by geonp train on {len(inputs)} raster(s)",
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
                            {"step": result.step, "best_val_nll": result.best_val_nll, "history": history,
                             "processes": world})

    phases: list[tuple[int, int, Callable[[np.random.Generator], list[Task]]]] = []
    if pretrain_steps:
        phases.append((0, pretrain_steps, lambda r: gp_tasks(task_recipe, r)))
    phases.append((pretrain_steps, total_steps,
                   lambda r: gp_tasks(task_recipe, r) if gp_fraction and r.random() < gp_fraction
                   else raster_tasks(train_groups, task_recipe, r)))
    averager = GradientAverager(module, world) if world > 1 else None
    workers = (0 if world > 1 else default_workers()) if data_workers is None else data_workers

    def run_phases(rank: int) -> FitResult:
        """This process's share of the training (all of it when ``world`` is 1)."""
        result, state, first_step = FitResult(best_val_nll=best), opt_state, start
        lead = rank == 0  # validates, saves, reports
        for begin, end, draw in phases:
            if first_step >= end:
                continue
            phase_cfg = TrainConfig(**{**tcfg.__dict__, "steps": end})

            def sample(step: int, draw: Callable[[np.random.Generator], list[Task]] = draw) -> Batch:
                seed = [tcfg.seed, step] if world == 1 else [tcfg.seed, step, rank]
                return make_batch(draw, shard_size(batch_size, world, rank), np.random.default_rng(seed))

            first = max(first_step, begin)
            with PrefetchedBatches(sample, range(first, end), workers) as batches:
                result = fit(module, batches, val_batches if lead else [], phase_cfg, start_step=first,
                             optimizer_state=state, best_val_nll=result.best_val_nll,
                             on_validate=save_best if lead else None,
                             progress=None if progress is None or not lead else
                             lambda s, n, v: progress(s, total_steps, v),
                             average_gradients=None if averager is None else partial(averager.average, rank))
            state, first_step = result.optimizer_state, end
        return result

    if averager is None:
        run_phases(0)
    else:
        run_data_parallel(world, run_phases, averager)
    if not (out / "model.safetensors").exists():
        raise InputRasterError("training produced no model; the validation NLL was never finite")
    if calibrate:
        calibrate_on_validation(out, inputs[0], val_fraction=val_fraction, test_fraction=test_fraction,
                                min_val_columns=task_shape.patch_size, nodata=nodata, bands=bands, seed=tcfg.seed,
                                device=tcfg.device)
    return TrainReport(out, total_steps, *best_of(load_checkpoint(out).card), time.perf_counter() - t0, history)


_SHAPE_KEYS = tuple(f.name for f in fields(TaskShape))


def _from_recipe(
    recipe: str | os.PathLike[str] | Mapping[str, Mapping[str, Any]],
    model: ModelConfig | None,
    training: TrainConfig | None,
    task_shape: TaskShape | None,
    explicit: dict[str, Any],
) -> tuple[ModelConfig, TrainConfig, TaskShape, dict[str, Any]]:
    """The run's settings: each argument given to :func:`train`, else the recipe's entry.

    Returns ``(model, training, task_shape, options)`` with ``options`` in the order of ``explicit``.
    """
    rec = load_recipe(recipe)
    data = dict(rec["data"])
    shape = {k: data.pop(k) for k in list(data) if k in _SHAPE_KEYS}
    unknown = sorted(set(data) - set(explicit))
    if unknown:
        raise ConfigError(f"unknown data option(s) {unknown} in the recipe; valid: "
                          f"{sorted(set(explicit) | set(_SHAPE_KEYS))}")
    options = {k: data.get(k) if v is None else v for k, v in explicit.items()}
    try:
        return (model or ModelConfig.from_dict(rec["model"]), training or TrainConfig.from_dict(rec["training"]),
                task_shape or TaskShape(**shape), options)
    except TypeError as err:
        raise ConfigError(f"invalid recipe: {err}") from err


def _width(path: str | os.PathLike[str]) -> int:
    from geonp.io.raster import open_raster

    with open_raster(path) as src:
        return int(src.width)
