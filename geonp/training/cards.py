"""What a training run writes on its model card: data, settings, machine.

:func:`raster_card` is the card of a ``geonp train`` run, :func:`series_card` that of
``geonp train --series``; each is filled in with the best validation NLL as the run saves its
best model.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import platform
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from geonp._version import __version__
from geonp.data.datasets import split_columns
from geonp.io.series_stack import SeriesStack
from geonp.model_files.card import ModelCard
from geonp.model_files.checkpoint import LoadedModel
from geonp.models import MODEL_FAMILIES
from geonp.training.series_settings import SeriesSettings
from geonp.training.settings import RunSettings, TrainOutput

__all__ = ["best_of", "hardware", "raster_card", "series_card"]


def hardware() -> str:
    """This machine as a model card states it: CPU, cores and GPU."""
    gpu = "CUDA " + torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, {gpu}"


def best_of(card: ModelCard) -> tuple[float, int]:
    """A trained model's best validation NLL and its step, from its card (NaN and -1 if unstated)."""
    nll = math.nan if card.best_val_nll is None else float(card.best_val_nll)
    return nll, -1 if card.best_step is None else int(card.best_step)


def raster_card(run: RunSettings, inputs: Sequence[str | os.PathLike[str]], out: Path, command: str | None, *,
                band_count: int) -> ModelCard:
    """The card of a ``geonp train`` run on ``inputs`` (before any validation)."""
    mcfg, o = run.mcfg, run.opts
    return ModelCard(
        name=o.name or out.name,
        description=f"{MODEL_FAMILIES[mcfg.arch].describe(mcfg)} trained by geonp train on {len(inputs)} raster(s)",
        geonp_version=__version__,
        command=command,
        training_data=[str(Path(p).name) for p in inputs],
        band_count=int(band_count),
        coord_unit=mcfg.coord_unit,
        task_shape=run.task_shape.to_dict(),
        gap_mix=o.gap_mix,
        gp_fraction=o.gp_fraction,
        init_from=None if o.init_from is None else str(o.init_from),
        hardware=hardware(),
        pretrain_steps=o.pretrain_steps,
        steps=run.tcfg.steps,
        batch_size=o.batch_size,
        train_config=run.tcfg.__dict__,
        extra={
            "bands": list(o.bands) if o.bands else None,
            "nodata": o.nodata,
            "footprint_probability": o.footprint_probability if o.gap_mix is not None else 0.0,
            "split": {"axis": "columns", "val_fraction": o.val_fraction, "test_fraction": o.test_fraction,
                      "regions": [split_columns(_width(p), val_fraction=o.val_fraction,
                                                test_fraction=o.test_fraction,
                                                min_val_columns=run.task_shape.patch_size).__dict__
                                  for p in inputs]},
        },
    )


def series_card(start: LoadedModel, run: SeriesSettings, stack: SeriesStack, val_targets: np.ndarray,
                output: TrainOutput) -> ModelCard:
    """The card of a ``geonp train --series`` run from the model ``start`` on ``stack`` (before any validation).

    Its task shape is ``start``'s, less the single-date window settings, updated by ``run``'s geometry.
    """
    shape = {k: v for k, v in (start.card.task_shape or {}).items()
             if k not in ("patch_size", "tasks_per_window")}  # single-date window settings
    first, last = (dt.date(1970, 1, 1) + dt.timedelta(days=int(d)) for d in (stack.days.min(), stack.days.max()))
    return ModelCard(
        name=run.name or Path(output.directory).name,
        description="multi-date TNP-KR (space + time kernel bias) fine-tuned by geonp train --series "
                    f"from {start.name} on {len(stack.names)} dates",
        geonp_version=__version__,
        command=output.command,
        training_data=stack.names,
        init_from=str(run.init_from),
        band_count=int(stack.values.shape[1]),
        any_band_count=True,
        coord_unit="pixel",
        task_shape={**shape, **run.geometry.card_shape()},
        pretrain_steps=run.pretrain_steps,
        steps=run.training.steps,
        batch_size=run.batch_size,
        train_config=run.training.__dict__,
        hardware=hardware(),
        extra={
            "date_range": [str(first), str(last)],
            "validation_targets": [stack.names[i] for i in val_targets],
            "spacetime_fraction": run.spacetime_fraction,
        },
    )


def _width(path: str | os.PathLike[str]) -> int:
    from geonp.io.raster import open_raster

    with open_raster(path) as src:
        return int(src.width)
