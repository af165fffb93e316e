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
training run: the model, the phases of :func:`geonp.training.loop.fit`, resuming. Its settings are
:mod:`geonp.training.settings`, its card :mod:`geonp.training.cards`.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from geonp.config import EvaluationConfig, TrainConfig
from geonp.data.batch import Batch
from geonp.data.datasets import ColumnSplit
from geonp.data.tasks import Task
from geonp.errors import ConfigError, InputRasterError
from geonp.model_files.checkpoint import load_checkpoint
from geonp.model_files.registry import resolve_model_path
from geonp.model_files.train_state import (
    check_training_output,
    load_training_state,
)
from geonp.models import build_model, load_start_weights
from geonp.training.allocator import keep_freed_memory
from geonp.training.calibrate import calibrate_on_validation
from geonp.training.cards import best_of, raster_card
from geonp.training.checkpoints import BestSaver, Reached, stopped_message
from geonp.training.loop import FitHooks, FitResult, MetricsWriter, fit
from geonp.training.parallel import GradientAverager, run_data_parallel, shard_size
from geonp.training.prefetch import PrefetchedBatches, default_workers
from geonp.training.settings import (
    RunSettings,
    TrainingData,
    TrainOutput,
    TrainRecipe,
    TrainRun,
    from_recipe,
    given_options,
    settle,
)
from geonp.training.windows import (
    PoolOptions,
    TaskRecipe,
    WindowGroup,
    gap_source_mask,
    gp_tasks,
    is_near_batch,
    make_batch,
    raster_tasks,
    window_groups,
)

logger = logging.getLogger(__name__)

__all__ = ["TrainReport", "train"]


@dataclass
class TrainReport:
    """What :func:`train` produced: ``steps`` is the run's total, ``first_step`` where this call began it.

    ``first_step`` is 0 for a new run and the step of the training state for a resumed one, so
    this call trained ``steps - first_step`` steps in ``seconds``.
    """

    output: Path
    steps: int
    best_val_nll: float
    best_step: int
    seconds: float
    history: list[dict[str, float]]
    first_step: int = 0


def train(
    data: TrainingData | Sequence[str | os.PathLike[str]],
    output: TrainOutput | str | os.PathLike[str],
    recipe: TrainRecipe | str | os.PathLike[str] | Mapping[str, Mapping[str, Any]] = "default",
    *,
    run: TrainRun | None = None,
) -> TrainReport:
    """Train a model on rasters and write it to a model directory.

    Example::

        train(TrainingData(["a.tif", "b.tif"], nodata=0), TrainOutput("my_model", metrics="curve.csv"),
              TrainRecipe(training=TrainConfig(steps=400), init_from="default"), run=TrainRun(processes=2))

    Args:
        data: what to train on (:class:`~geonp.training.settings.TrainingData`: rasters, nodata,
            bands, validation and test columns, borrowed gap shapes), or the raster files alone.
        output: where to write (:class:`~geonp.training.settings.TrainOutput`: the model directory,
            resume or overwrite, the card's name and command, a metrics file), or the directory alone.
        recipe: the model, its optimisation and its tasks
            (:class:`~geonp.training.settings.TrainRecipe`), or the recipe it builds on alone: a
            shipped recipe's name (:func:`geonp.config.recipe_names`), a YAML file or a mapping of
            ``model``/``training``/``data`` sections (a file or mapping overrides the ``default``
            recipe's entries). Every setting left as None, here or in ``data`` and ``output``,
            takes the recipe's entry: the defaults of ``geonp train`` live in ``recipes/default.yaml``.
        run: processes and callbacks (:class:`~geonp.training.settings.TrainRun`; None: one
            process, no callbacks).

    Returns:
        A :class:`TrainReport`.

    Raises:
        OutputError: the output directory holds a model (without ``overwrite`` or ``resume``) or
            is inside the geonp package; raised before any data is read.
        KeyboardInterrupt: the run was interrupted; the last checkpoint is kept, and a directory
            this call created is removed if nothing was saved in it. Its ``detail`` attribute
            says where the run stopped and what it kept.
    """
    data = data if isinstance(data, TrainingData) else TrainingData(data)
    recipe = recipe if isinstance(recipe, TrainRecipe) else TrainRecipe(recipe)
    output, run = TrainOutput.of(output), run or TrainRun()
    check_training_output(output.directory, overwrite=output.overwrite, resume=output.resume)
    settings = settle(*from_recipe(recipe, given_options(data, output, recipe)), processes=run.processes,
                      inputs=data.rasters)
    out, reached = Path(output.directory), Reached(saved=output.resume)
    created = not out.exists()
    try:
        return _train(settings, data.rasters, output, run, reached)
    except KeyboardInterrupt as err:
        err.detail = stopped_message(out, settings.total_steps, reached, created=created)  # type: ignore[attr-defined]
        raise


def _train(settings: RunSettings, inputs: Sequence[str | os.PathLike[str]], output: TrainOutput, run: TrainRun,
           reached: Reached) -> TrainReport:
    """Run :func:`train` with its settled settings (the arguments are :func:`train`'s)."""
    opts, tcfg, shape = settings.opts, settings.tcfg, settings.task_shape
    out, resume = Path(output.directory), output.resume
    if tcfg.distill_from is not None:
        resolve_model_path(tcfg.distill_from)  # a missing teacher fails before anything is written
    keep_freed_memory()  # a step's large tensors reuse the last step's memory (no page faults)
    t0 = time.perf_counter()
    split = ColumnSplit(opts.val_fraction, opts.test_fraction)
    pools = PoolOptions(opts.nodata, opts.bands, split, opts.pool_size,
                        max(opts.val_tasks, 16), opts.pool_megabytes)
    train_groups, val_groups = window_groups(inputs, shape, pools, tcfg.seed)
    out.mkdir(parents=True, exist_ok=True)  # only once the data is usable: no empty model directory
    task_recipe = TaskRecipe(shape, opts.gap_mix, gap_source_mask(opts.gap_source), opts.footprint_probability)
    # a near model (every batch a near batch) is validated on near tasks
    val_recipe = task_recipe.near() if shape.near_context and shape.near_percent == 100 else task_recipe
    val_batches = _validation_batches(val_groups, val_recipe, opts.val_tasks, tcfg.seed)
    torch.manual_seed(tcfg.seed)
    module = build_model(settings.mcfg)
    if opts.init_from is not None and not resume:
        _load_start_weights(module, opts.init_from)
    begun = _resume(module, out, settings.world) if resume else _Begun()
    reached.step = begun.step if resume else None
    saver = BestSaver(out, module, settings.mcfg, train_groups[0].norm, history=begun.history, started=t0,
                       world=settings.world,
                       metrics=MetricsWriter(Path(opts.metrics) if opts.metrics else None, resume),
                       card=raster_card(settings, inputs, out, output.command,
                                        band_count=train_groups[0].pool.values.shape[1]),
                       reached=reached)

    def report(step: int, total: int, loss: float) -> None:
        reached.step = step
        if run.progress is not None:
            run.progress(step, total, loss)

    trainer = _Trainer(module, settings, _phases(settings, task_recipe, train_groups), val_batches, begun, saver,
                       report, run.data_workers)
    if trainer.averager is None:
        trainer.run(0)
    else:
        run_data_parallel(settings.world, trainer.run, trainer.averager)
    if not (out / "model.safetensors").exists():
        raise InputRasterError("training produced no model; the validation NLL was never finite")
    if opts.calibrate:
        if run.status is not None:
            run.status(f"Calibrating the std on the validation columns of {Path(inputs[0]).name}...")
        calibrate_on_validation(out, inputs[0], replace(split, min_val_columns=shape.patch_size),
                                EvaluationConfig(nodata=opts.nodata, bands=opts.bands, seed=tcfg.seed,
                                                 device=tcfg.device), near_blend=True)
    return TrainReport(out, settings.total_steps, *best_of(load_checkpoint(out).card), time.perf_counter() - t0,
                       begun.history, begun.step)


def _validation_batches(val_groups: Sequence[WindowGroup], recipe: TaskRecipe, val_tasks: int,
                        seed: int) -> list[Batch]:
    """The fixed validation batches (16 tasks each), the same for every run of a seed."""
    val_rng = np.random.default_rng(seed + 10_000)
    return [make_batch(lambda r: raster_tasks(val_groups, recipe, r), min(16, val_tasks), val_rng)
            for _ in range(max(1, val_tasks // 16))]


def _load_start_weights(module: torch.nn.Module, init_from: str | os.PathLike[str]) -> None:
    """Start ``module`` from the weights of the model ``init_from`` names.

    Raises:
        ConfigError: that model's architecture differs from ``module``'s.
    """
    start_weights = load_checkpoint(resolve_model_path(init_from)).module.state_dict()
    try:
        load_start_weights(module, start_weights)
    except RuntimeError as err:
        raise ConfigError(f"cannot start from {init_from}: its architecture differs from the one asked "
                          f"for; pass the same --dim/--depth/--heads/--ff-dim ({str(err).splitlines()[0]})") from err


@dataclass
class _Begun:
    """Where the run starts: step, optimiser state, best validation NLL and history so far."""

    step: int = 0
    opt_state: dict[str, Any] | None = None
    best: float = math.inf
    history: list[dict[str, float]] = field(default_factory=list)


def _resume(module: torch.nn.Module, out: Path, world: int) -> _Begun:
    """Load the training state in ``out`` into ``module``; where the interrupted run stood."""
    state, opt_state, prog = load_training_state(out)
    module.load_state_dict(state)
    begun = _Begun(int(prog["step"]), opt_state, float(prog["best_val_nll"]), list(prog["history"]))
    logger.info("resuming from step %d", begun.step)
    if int(prog.get("processes", 1)) != world:
        logger.warning("resuming with processes=%d where the run had %s: the tasks of the remaining steps "
                       "differ from those of an uninterrupted run", world, prog.get("processes", 1))
    return begun


_Phase = tuple[int, int, Callable[..., list[Task]]]


def _phases(run: RunSettings, recipe: TaskRecipe, train_groups: Sequence[WindowGroup]) -> list[_Phase]:
    """``(begin, end, draw)`` of each phase: GP pre-training if asked, then the raster steps."""
    pretrain, gp_fraction = run.opts.pretrain_steps, run.opts.gp_fraction
    near = recipe.near() if recipe.shape.near_context else None
    phases: list[_Phase] = []
    if pretrain:
        phases.append((0, pretrain, lambda r, near_batch=False: gp_tasks(recipe, r)))

    def draw(r: np.random.Generator, near_batch: bool = False) -> list[Task]:
        rec = near if near_batch and near is not None else recipe
        return gp_tasks(rec, r) if gp_fraction and r.random() < gp_fraction else raster_tasks(train_groups, rec, r)

    phases.append((pretrain, run.total_steps, draw))
    return phases


class _Trainer:
    """Runs the phases of a :func:`train` run in one process (rank), all of them when alone."""

    def __init__(self, module: torch.nn.Module, run: RunSettings, phases: list[_Phase], val_batches: list[Batch],
                 begun: _Begun, saver: BestSaver, progress: Callable[[int, int, float], None] | None,
                 data_workers: int | None) -> None:
        """Hold the run's parts; the averager (processes > 1) is made here, before any fork."""
        self.module, self.run_settings, self.phases, self.val_batches = module, run, phases, val_batches
        self.begun, self.saver, self.progress = begun, saver, progress
        self.averager = GradientAverager(module, run.world) if run.world > 1 else None
        self.workers = (0 if run.world > 1 else default_workers()) if data_workers is None else data_workers

    def run(self, rank: int) -> FitResult:
        """This process's share of the training (all of it when ``world`` is 1)."""
        run, progress = self.run_settings, self.progress
        result, state, first_step = FitResult(best_val_nll=self.begun.best), self.begun.opt_state, self.begun.step
        lead = rank == 0  # validates, saves, reports
        for begin, end, draw in self.phases:
            if first_step >= end:
                continue
            first = max(first_step, begin)
            with PrefetchedBatches(partial(self._sample, rank, draw), range(first, end), self.workers) as batches:
                result = fit(self.module, batches, self.val_batches if lead else [],
                             TrainConfig(**{**run.tcfg.__dict__, "steps": end}),
                             start=FitResult(best_val_nll=result.best_val_nll, optimizer_state=state, step=first),
                             hooks=FitHooks(on_validate=self.saver if lead else None,
                                            progress=None if progress is None or not lead else
                                            lambda s, n, v: progress(s, run.total_steps, v),
                                            average_gradients=None if self.averager is None else
                                            partial(self.averager.average, rank)))
            state, first_step = result.optimizer_state, end
        return result

    def _sample(self, rank: int, draw: Callable[..., list[Task]], step: int) -> Batch:
        """Rank ``rank``'s share of step ``step``'s batch (seeded by step, and rank when parallel)."""
        run = self.run_settings
        seed = [run.tcfg.seed, step] if run.world == 1 else [run.tcfg.seed, step, rank]
        near_batch = is_near_batch(run.task_shape, run.tcfg.seed, step)
        return make_batch(partial(draw, near_batch=near_batch), shard_size(run.opts.batch_size, run.world, rank),
                          np.random.default_rng(seed))
