"""The settings of a ``geonp train`` run: what :func:`geonp.train` is given, and what it resolves them to.

:class:`TrainingData` is what a run trains on, :class:`TrainOutput` where it writes, :class:`TrainRecipe`
the model, its optimisation and its tasks, :class:`TrainRun` how it runs. Each setting they leave as None
takes the recipe's entry: :func:`from_recipe` merges them with the recipe (``recipes/default.yaml`` unless
another is named); :func:`settle` checks the merged settings and returns them as one :class:`RunSettings`,
built once at the edge of the run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from geonp.config import ModelConfig, TrainConfig, load_recipe
from geonp.errors import ConfigError
from geonp.training.windows import TaskShape

__all__ = ["RunOptions", "RunSettings", "TrainOutput", "TrainRecipe", "TrainRun", "TrainingData", "from_recipe",
           "given_options", "settle"]

PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class TrainingData:
    """What a ``geonp train`` run trains on: rasters, how they are read, the split of their columns.

    Attributes:
        rasters: raster files; rasters of different band counts are grouped, each group with its
            own normalisation and windows (the model card stores the first group's).
        nodata: nodata value when the files lack (or have a wrong) tag.
        bands: 1-based bands to train on (default all).
        val_fraction: fraction of columns (right of the training region) for validation.
        test_fraction: fraction of columns (rightmost) held out entirely, for later evaluation.
        gap_source: a mask raster (non-zero = gap) or a raster whose missing pixels give real gap
            shapes to borrow.

    Each field left as None takes the recipe's ``data`` entry.
    """

    rasters: Sequence[PathLike]
    nodata: float | None = None
    bands: Sequence[int] | None = None
    val_fraction: float | None = None
    test_fraction: float | None = None
    gap_source: PathLike | None = None


@dataclass(frozen=True)
class TrainOutput:
    """Where a training run writes: its model directory, the card's name and command, its learning curve.

    Attributes:
        directory: model directory to write (best model by validation NLL, plus resume state).
            Never inside the installed geonp package.
        resume: continue from the training state in ``directory`` (single-date runs only).
        overwrite: replace the model already in ``directory`` (otherwise a non-empty directory is
            refused, before any data is read, unless ``resume``).
        metrics: write one record per validation (step, train and validation NLL, learning rate,
            seconds) to this ``.csv`` or ``.jsonl`` file.
        name: model name for its card (default: the directory's name).
        command: the command line, for the card.

    ``metrics`` and ``name`` left as None take the recipe's ``data`` entries, if any.
    """

    directory: PathLike
    resume: bool = False
    overwrite: bool = False
    metrics: PathLike | None = None
    name: str | None = None
    command: str | None = None

    @classmethod
    def of(cls, output: PathLike | TrainOutput) -> TrainOutput:
        """``output`` itself, or ``TrainOutput(output)`` for a directory."""
        return output if isinstance(output, TrainOutput) else cls(output)


@dataclass(frozen=True)
class TrainRecipe:
    """A recipe as types: the model, its optimisation and the tasks it trains on.

    Attributes:
        base: a shipped recipe's name (:func:`geonp.config.recipe_names`), a YAML file or a
            mapping of ``model``/``training``/``data`` sections (a file or mapping overrides the
            ``default`` recipe's entries): every field below left as None takes its entry. The
            defaults of ``geonp train`` live in ``recipes/default.yaml``.
        model: architecture (the ``model`` section).
        training: optimisation settings (the ``training`` section; ``steps`` counts raster steps,
            after any pre-training).
        task_shape: window, query window and context sizes (the ``data`` entries of them).
        batch_size: tasks per step.
        val_tasks: fixed validation tasks.
        pretrain_steps: steps on simulated GP fields before the raster steps.
        gp_fraction: fraction of the raster steps' windows drawn from simulated GP fields.
        gap_mix: gap kind -> weight for window masks (:func:`geonp.data.gaps.sample_window_mask`),
            e.g. ``{"cloud": 0.3, "scene_cloud": 0.25, "stripe": 0.15, "random": 0.15,
            "borrowed": 0.15}``; None (in the recipe too) keeps the 64-px patch mix for
            ``patch_size < 128`` and uses :data:`geonp.data.gaps.WINDOW_KIND_WEIGHTS` for larger windows.
        footprint_probability: chance that a window mask also gets a straight nodata collar.
        pool_size: training windows read into memory.
        pool_megabytes: memory budget of the training windows held in memory (caps ``pool_size``
            for large windows).
        init_from: a built-in model name (``default``) or a model directory whose weights start
            the training (fine-tuning; same architecture).
        calibrate: fit the std calibration on the first raster's validation columns once trained
            (:mod:`geonp.training.calibrate`), as ``geonp evaluate --calibrate`` does.
    """

    base: PathLike | Mapping[str, Mapping[str, Any]] = "default"
    model: ModelConfig | None = None
    training: TrainConfig | None = None
    task_shape: TaskShape | None = None
    batch_size: int | None = None
    val_tasks: int | None = None
    pretrain_steps: int | None = None
    gp_fraction: float | None = None
    gap_mix: dict[str, float] | None = None
    footprint_probability: float | None = None
    pool_size: int | None = None
    pool_megabytes: float | None = None
    init_from: PathLike | None = None
    calibrate: bool | None = None


@dataclass(frozen=True)
class TrainRun:
    """How a ``geonp train`` run runs: its processes, and what it reports as it goes.

    Attributes:
        processes: training processes sharing each step's batch (data parallel, one thread
            each; :mod:`geonp.training.parallel`); 2 on a 2-core CPU is about twice as fast as
            one. Each cuts its own share of the tasks, so the tasks depend on this number: resume
            with the same. None: 1.
        data_workers: processes cutting tasks ahead of the trainer (None: one where two or more
            cores are available, else none); the batches are the same with any number.
        progress: ``(step, total, loss)`` callback.
        status: called with a line saying what the run does after its last step (calibrating).
    """

    processes: int | None = None
    data_workers: int | None = None
    progress: Callable[[int, int, float], None] | None = None
    status: Callable[[str], None] | None = None


@dataclass(frozen=True)
class RunOptions:
    """The data options of a run, resolved (:class:`TrainingData`, :class:`TrainRecipe`, :class:`TrainOutput`)."""

    nodata: float | None
    bands: Sequence[int] | None
    batch_size: int
    val_fraction: float
    test_fraction: float
    val_tasks: int
    pool_size: int
    pretrain_steps: int
    gap_source: PathLike | None
    gap_mix: dict[str, float] | None
    footprint_probability: float
    gp_fraction: float
    init_from: PathLike | None
    pool_megabytes: float  # like pool_size: the recipe's when not given
    metrics: PathLike | None
    name: str | None
    calibrate: bool


@dataclass(frozen=True)
class RunSettings:
    """Everything a run is set by: architecture, optimisation, task shape, data options, processes."""

    mcfg: ModelConfig
    tcfg: TrainConfig
    task_shape: TaskShape
    opts: RunOptions
    world: int

    @property
    def total_steps(self) -> int:
        """Pre-training steps plus raster steps."""
        return self.opts.pretrain_steps + self.tcfg.steps


_SHAPE_KEYS = tuple(f.name for f in fields(TaskShape))


def given_options(data: TrainingData, output: TrainOutput, recipe: TrainRecipe) -> dict[str, Any]:
    """The data options given to a run (None: not given), in the order of :class:`RunOptions`."""
    given = {**vars(data), **vars(recipe), "metrics": output.metrics, "name": output.name}
    return {f.name: given[f.name] for f in fields(RunOptions)}


def from_recipe(recipe: TrainRecipe, explicit: dict[str, Any]) -> tuple[ModelConfig, TrainConfig, TaskShape,
                                                                         dict[str, Any]]:
    """The run's settings: each one given (``recipe``'s fields, ``explicit``), else ``recipe.base``'s entry.

    Returns ``(model, training, task_shape, options)`` with ``options`` in the order of ``explicit``.
    """
    rec = load_recipe(recipe.base)
    data = dict(rec["data"])
    shape = {k: data.pop(k) for k in list(data) if k in _SHAPE_KEYS}
    unknown = sorted(set(data) - set(explicit))
    if unknown:
        raise ConfigError(f"unknown data option(s) {unknown} in the recipe; valid: "
                          f"{sorted(set(explicit) | set(_SHAPE_KEYS))}")
    options = {k: data.get(k) if v is None else v for k, v in explicit.items()}
    try:
        return (recipe.model or ModelConfig.from_dict(rec["model"]),
                recipe.training or TrainConfig.from_dict(rec["training"]),
                recipe.task_shape or TaskShape(**shape), options)
    except TypeError as err:
        raise ConfigError(f"invalid recipe: {err}") from err


def settle(
    mcfg: ModelConfig,
    tcfg: TrainConfig,
    task_shape: TaskShape,
    opts: dict[str, Any],
    *,
    processes: int | None,
    inputs: Sequence[PathLike],
) -> RunSettings:
    """Check the settings :func:`from_recipe` merged.

    Raises:
        ConfigError: a setting out of range, or no inputs.
    """
    o = RunOptions(**opts)
    if mcfg.dim_y != 1:
        raise ConfigError(f"raster training models each band on its own (dim_y=1), got dim_y={mcfg.dim_y}")
    if not 0 < o.val_fraction < 1 or not 0 <= o.test_fraction < 1 or o.val_fraction + o.test_fraction >= 0.9:
        raise ConfigError(f"val_fraction={o.val_fraction} and test_fraction={o.test_fraction} must leave "
                          "at least 10% of the columns for training")
    if not inputs:
        raise ConfigError("no training rasters given")
    if task_shape.core_size > task_shape.patch_size:
        task_shape = TaskShape(**{**task_shape.__dict__, "core_size": task_shape.patch_size})
    if not 0.0 <= o.gp_fraction <= 1.0:
        raise ConfigError(f"gp_fraction={o.gp_fraction} must be in [0, 1]")
    if o.gap_mix is None and task_shape.patch_size >= 128:
        from geonp.data.gaps import WINDOW_KIND_WEIGHTS

        o = replace(o, gap_mix=dict(WINDOW_KIND_WEIGHTS))
    world = 1 if processes is None else processes
    if not isinstance(world, int) or not 1 <= world <= o.batch_size:
        raise ConfigError(f"processes={processes!r} must be an integer from 1 to batch_size={o.batch_size}")
    return RunSettings(mcfg, tcfg, task_shape, o, world)
