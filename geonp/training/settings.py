"""The settings of a ``geonp train`` run: each argument given to :func:`geonp.train`, else the recipe's.

:func:`from_recipe` merges the arguments with the recipe (``recipes/default.yaml`` unless another is
named); :func:`settle` checks the merged settings and returns them as one :class:`RunSettings`,
built once at the edge of the run.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from geonp.config import ModelConfig, TrainConfig, load_recipe
from geonp.errors import ConfigError
from geonp.training.windows import TaskShape

__all__ = ["RunOptions", "RunSettings", "from_recipe", "settle"]


@dataclass(frozen=True)
class RunOptions:
    """The data options of a run, resolved (see :func:`geonp.train` for each)."""

    nodata: float | None
    bands: Sequence[int] | None
    batch_size: int
    val_fraction: float
    test_fraction: float
    val_tasks: int
    pool_size: int
    pretrain_steps: int
    gap_source: str | os.PathLike[str] | None
    gap_mix: dict[str, float] | None
    footprint_probability: float
    gp_fraction: float
    init_from: str | os.PathLike[str] | None
    pool_megabytes: float  # like pool_size: the recipe's when not given
    metrics: str | os.PathLike[str] | None
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


def from_recipe(
    recipe: str | os.PathLike[str] | Mapping[str, Mapping[str, Any]],
    model: ModelConfig | None,
    training: TrainConfig | None,
    task_shape: TaskShape | None,
    explicit: dict[str, Any],
) -> tuple[ModelConfig, TrainConfig, TaskShape, dict[str, Any]]:
    """The run's settings: each argument given to :func:`geonp.train`, else the recipe's entry.

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


def settle(
    mcfg: ModelConfig,
    tcfg: TrainConfig,
    task_shape: TaskShape,
    opts: dict[str, Any],
    *,
    shape_overrides: dict[str, int | None],
    processes: int | None,
    inputs: Sequence[str | os.PathLike[str]],
) -> RunSettings:
    """Check the settings :func:`from_recipe` merged; the task shape takes ``shape_overrides``.

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
    overrides = {k: v for k, v in shape_overrides.items() if v is not None}
    if overrides:
        task_shape = TaskShape(**{**task_shape.__dict__, **overrides})
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
