"""Train a multi-date model: one date with hidden pixels, other dates of the place as references.

A time series is a set of co-registered rasters with acquisition dates (and optional QA bands).
Each training task picks a target date, hides pixels of it under a real cloud shape borrowed
from another date's QA gaps or under simulated gaps (:mod:`geonp.data.gaps`), and gives one to
three other dates (the previous ones, as ``geonp fill --reference`` is usually run, or dates on
either side) as references with their own gaps. Tasks are built by
:func:`geonp.data.tasks.window_task`, the code that builds a fill tile's task, so the reference
pixels a training task sees are chosen as a fill chooses them.

Simulated space-time fields pre-train the model (or are mixed in): a GP field shared by all
dates, seen through a per-date gain and offset, plus a per-date GP field whose weight grows with
the date difference, so a reference says less the farther its date.

The model starts from a single-date model's weights (``init_from``): the temporal bias starts at
zero and the reference token flag as the observed one, so before training it treats a reference
pixel as an observed pixel of the target date.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from geonp.config import ModelConfig, TrainConfig
from geonp.data.batch import Batch
from geonp.data.gaps import sample_window_mask
from geonp.data.synthetic import gp_grid_field
from geonp.data.tasks import ReferenceView, Task, TaskWindow, window_task
from geonp.errors import ConfigError, NoValidPixelsError
from geonp.io.series_stack import Dated, SeriesStack, load_series
from geonp.model_files.checkpoint import load_checkpoint
from geonp.model_files.train_state import check_training_output
from geonp.models import build_model
from geonp.tasks.normalize import Normalizer
from geonp.training.cards import best_of, series_card
from geonp.training.checkpoints import SeriesSaver, series_stopped_message
from geonp.training.loop import FitHooks, FitResult, MetricsWriter, fit
from geonp.training.series_settings import SeriesData, SeriesRecipe, from_series_recipe
from geonp.training.settings import TrainOutput
from geonp.training.windows import make_batch

logger = logging.getLogger(__name__)

#: Gap kinds hidden on a target date (borrowed = a real cloud shape from another date's QA).
SERIES_GAP_MIX = {"cloud": 0.3, "scene_cloud": 0.1, "stripe": 0.1, "random": 0.1}
BORROW_PROBABILITY = 0.4
#: Chance (models with ``ref_slots``) that the target date is hidden over its whole window, so its
#: references stand in for its context (:func:`geonp.data.tasks.feature_context`): dates clouded
#: over a whole block are common in a season of imagery.
CLOUDED_OVER_PROBABILITY = 0.05
#: Fixed validation tasks of a run (8 per batch).
VAL_TASKS = 64


def series_task(stack: SeriesStack, norm: Normalizer, targets: np.ndarray, recipe: SeriesRecipe,
                rng: np.random.Generator) -> Task | None:
    """One multi-date task: a target date among ``targets`` (indices), its references, hidden gaps."""
    obs = stack.observed
    t = int(rng.choice(targets))
    others = np.flatnonzero((np.arange(len(stack.days)) != t) & (stack.clear > 0.05))
    if others.size == 0:
        return None
    k = int(rng.integers(1, recipe.max_references + 1))
    gap_days = stack.days[others] - stack.days[t]
    if rng.random() < recipe.previous_probability and (gap_days < 0).any():
        before = others[gap_days < 0]
        refs = before[np.argsort(-stack.days[before])][:k]
    else:
        refs = others[np.argsort(np.abs(gap_days))][: 2 * k]
        refs = rng.permutation(refs)[:k]
    h, w = obs.shape[1:]
    valid = obs[t]
    if rng.random() < BORROW_PROBABILITY:
        donor = int(rng.choice(np.arange(len(stack.days))))
        is_gap = ~obs[donor]
        if not (is_gap & valid).any() or (valid & ~is_gap).mean() < 0.02:
            is_gap, _ = sample_window_mask((h, w), rng=rng, weights=SERIES_GAP_MIX, footprint_probability=0.0)
    else:
        is_gap, _ = sample_window_mask((h, w), rng=rng, weights=SERIES_GAP_MIX, footprint_probability=0.0)
    if recipe.spec.ref_slots and rng.random() < CLOUDED_OVER_PROBABILITY:
        is_gap = np.ones((h, w), bool)
    band = int(rng.integers(stack.values.shape[1]))

    def scaled(i: int) -> np.ndarray:  # date i's band in normalised units, 0 where not observed
        return np.nan_to_num((stack.values[i, band] - norm.mean[band]) / norm.std[band])[None]

    references = [ReferenceView(scaled(r), obs[r][None], float(stack.days[r] - stack.days[t])) for r in refs]
    c = min(recipe.core_size, h, w)
    r0, c0 = int(rng.integers(0, h - c + 1)), int(rng.integers(0, w - c + 1))
    return window_task(TaskWindow(scaled(t), valid, is_gap, references=references), core=(r0, r0 + c, c0, c0 + c),
                       spec=recipe.spec, max_targets=recipe.max_targets, rng=rng)


def spacetime_task(recipe: SeriesRecipe, rng: np.random.Generator, size: int = 64) -> Task | None:
    """A task on a simulated space-time field (see the module docstring)."""
    ls = float(np.exp(rng.uniform(np.log(2.0), np.log(24.0))))
    common = gp_grid_field((size, size), kernel="matern52", lengthscale=ls, rng=rng)
    tau = float(np.exp(rng.uniform(np.log(8.0), np.log(400.0))))  # days over which a date decorrelates
    k = int(rng.integers(1, recipe.max_references + 1))
    offsets = -np.sort(rng.integers(1, 120, size=k)) if rng.random() < 0.6 else rng.integers(-120, 121, size=k)
    offsets = np.where(offsets == 0, -1, offsets)

    def date_field(days: float, target: bool) -> np.ndarray:
        rho = math.exp(-abs(days) / tau)
        own = gp_grid_field((size, size), kernel="matern32", lengthscale=float(rng.uniform(1.0, 12.0)), rng=rng)
        gain, offset = (1.0, 0.0) if target else (rng.uniform(0.6, 1.5), rng.normal(0, 0.5))
        field = gain * (rho * common + math.sqrt(1 - rho * rho) * own) + offset
        return (field + rng.normal(0, 0.02, field.shape)).astype(np.float32)

    target = date_field(0.0, True)
    references = []
    for d in offsets:
        gaps, _ = sample_window_mask((size, size), rng=rng, weights=SERIES_GAP_MIX, footprint_probability=0.0)
        references.append(ReferenceView(date_field(float(d), False)[None], (~gaps)[None], float(d)))
    is_gap, _ = sample_window_mask((size, size), rng=rng, weights=SERIES_GAP_MIX, footprint_probability=0.0)
    c = min(recipe.core_size, size)
    r0, c0 = int(rng.integers(0, size - c + 1)), int(rng.integers(0, size - c + 1))
    return window_task(TaskWindow(target[None], np.ones((size, size), bool), is_gap, references=references),
                       core=(r0, r0 + c, c0, c0 + c), spec=recipe.spec, max_targets=recipe.max_targets, rng=rng)


def temporal_from(single: torch.nn.Module, cfg: ModelConfig) -> tuple[torch.nn.Module, ModelConfig]:
    """A multi-date model carrying a single-date model's weights (see the module docstring)."""
    tcfg = replace(cfg, temporal=True, dim_x=3)
    module = build_model(tcfg)
    state = {}
    for key, value in single.state_dict().items():
        if ".attn.bias." in key:  # the spatial bias lives under .space in a multi-date model
            key = key.replace(".attn.bias.", ".attn.bias.space.")
        state[key] = value
    flag = state["embed.flag.weight"]
    state["embed.flag.weight"] = torch.cat([flag, flag[1:2]], 0)  # references start as observed pixels
    missing, unexpected = module.load_state_dict(state, strict=False)
    if unexpected or any(".bias.time." not in k for k in missing):
        raise ConfigError(f"cannot start a multi-date model from this one: missing {missing}, unexpected {unexpected}")
    return module, tcfg


def features_from(single: torch.nn.Module, cfg: ModelConfig, slots: int) -> tuple[torch.nn.Module, ModelConfig]:
    """A ``ref_slots`` model carrying a single-date model's weights: the feature inputs start at zero."""
    fcfg = replace(cfg, dim_x=2 + 3 * slots, ref_slots=slots)
    module = build_model(fcfg)
    state = dict(single.state_dict())
    first = "embed.mlp.0.weight"
    if first not in state or cfg.embed_coords:
        raise ConfigError("cannot start a multi-date feature model from this one: it must be a TNP-KR "
                          "single-date model without embedded coordinates")
    w = state[first]
    state[first] = torch.cat([w, w.new_zeros(w.shape[0], 3 * slots)], 1)
    module.load_state_dict(state)
    return module, fcfg


def start_module(start: Any, slots: int) -> tuple[torch.nn.Module, ModelConfig]:
    """The model a multi-date run trains from ``start`` (a loaded model): as it is when it is multi-date already."""
    cfg = start.config
    if cfg.takes_references:
        if cfg.ref_slots != slots:
            raise ConfigError(f"init_from {start.name} reads {cfg.ref_slots} reference slots, the recipe {slots}; "
                              f"set ref_slots: {cfg.ref_slots} in the recipe's data section, or start from a "
                              "single-date model")
        return start.module, cfg
    return features_from(start.module, cfg, slots) if slots else temporal_from(start.module, cfg)


@dataclass
class SeriesTrainReport:
    """What :func:`train_series` produced."""

    output: Path
    steps: int
    best_val_nll: float
    best_step: int
    seconds: float


_Draw = Callable[[np.random.Generator], Task | None]

def train_series(
    data: SeriesData | Sequence[Dated],
    output: TrainOutput | str | os.PathLike[str],
    recipe: SeriesRecipe | str | os.PathLike[str] | Mapping[str, Mapping[str, Any]] | None = None,
    *,
    training: TrainConfig | None = None,
    progress: Callable[[int, int, float], None] | None = None,
) -> SeriesTrainReport:
    """Train a multi-date model on a time series and write it to a model directory.

    Every setting left as None takes the entry of the shipped ``multidate`` recipe
    (``recipes/multidate.yaml``, the multi-date model's), as ``geonp train --series`` does: the
    defaults of both live there.

    Args:
        data: what to train on (:class:`~geonp.training.series_settings.SeriesData`: dated
            rasters, the dates used and validated on, bands, nodata, QA files), or the dated rasters
            alone (``geonp.scan_series``).
        output: where to write (:class:`~geonp.training.settings.TrainOutput`: the model directory,
            overwrite, the card's name and command, a metrics file: the run's learning curve), or
            the directory alone. A multi-date run does not resume.
        recipe: the task geometry (a :class:`~geonp.training.series_settings.SeriesRecipe`), or a
            recipe: a shipped recipe's name, a YAML file or a mapping of ``training``/``data``
            sections overriding ``multidate``'s entries (the ``data`` entries
            :data:`~geonp.training.series_settings.GEOMETRY_KEYS` set the geometry, the others
            ``init_from``, ``batch_size``, ``spacetime_fraction``, ``pretrain_steps``, ``bands``,
            ``nodata`` and ``name``: :class:`~geonp.training.series_settings.SeriesSettings`).
            None: ``multidate``.
        training: optimisation settings (default: the recipe's ``training`` section).
        progress: ``(step, total, loss)`` callback.
    """
    from geonp.model_files.registry import load_model

    data = data if isinstance(data, SeriesData) else SeriesData(data)
    output = TrainOutput.of(output)
    if output.resume:
        raise ConfigError("a multi-date run cannot resume; train it again")
    check_training_output(output.directory, overwrite=output.overwrite, resume=False)
    created = not Path(output.directory).exists()
    t0 = time.perf_counter()
    run = from_series_recipe(recipe, training, {"bands": data.bands, "nodata": data.nodata, "name": output.name})
    tcfg, pretrain_steps = run.training, run.pretrain_steps
    chosen = [i for i in data.items if data.before is None or i.date < data.before]
    if len(chosen) < 3:
        raise ConfigError(f"{len(chosen)} date(s) to train on; a time series needs at least 3")
    stack = load_series(chosen, bands=run.bands, nodata=run.nodata, qa_kind=data.qa_kind)
    flat = np.moveaxis(stack.values, 1, 0).reshape(stack.values.shape[1], -1)
    norm = Normalizer.fit(flat, np.isfinite(flat), seed=tcfg.seed)
    start = load_model(run.init_from)
    module, mcfg = start_module(start, run.geometry.spec.ref_slots)
    train_targets, val_targets = _split_targets(stack, run.geometry.min_observed, data.val_from)
    draw = partial(_task_draw, stack, norm, run.geometry)
    val_rng = np.random.default_rng(tcfg.seed + 10_000)
    val_batches = [make_batch(draw(val_targets, 0.0), 8, val_rng) for _ in range(VAL_TASKS // 8)]
    (out := Path(output.directory)).mkdir(parents=True, exist_ok=True)
    saver = SeriesSaver(out, module, mcfg, norm, series_card(start, run, stack, val_targets, output), started=t0,
                         metrics=MetricsWriter(None if output.metrics is None else Path(output.metrics), resume=False))
    total = pretrain_steps + tcfg.steps
    phases = ((0, pretrain_steps, draw(train_targets, 1.0)),
              (pretrain_steps, total, draw(train_targets, run.spacetime_fraction)))
    try:
        _fit_phases(module, phases, val_batches, tcfg, saver, batch_size=run.batch_size, progress=progress)
    except KeyboardInterrupt as err:
        err.detail = series_stopped_message(out, saver.best_step, created=created)  # type: ignore[attr-defined]
        raise
    if saver.best_step < 0:
        raise NoValidPixelsError("training produced no model; the validation NLL was never finite")
    return SeriesTrainReport(out, total, *best_of(load_checkpoint(out).card), time.perf_counter() - t0)


def _fit_phases(module: torch.nn.Module, phases: Sequence[tuple[int, int, _Draw]], val_batches: list[Batch],
                tcfg: TrainConfig, saver: SeriesSaver, *, batch_size: int,
                progress: Callable[[int, int, float], None] | None) -> None:
    """Train ``module`` through each ``(begin, end, draw)`` phase, carrying the optimiser state."""
    total = phases[-1][1]
    result = FitResult(best_val_nll=math.inf)
    opt_state = None
    for begin, end, draw in phases:
        if begin >= end:
            continue
        sample = partial(_sample, draw, batch_size, tcfg.seed)
        result = fit(module, sample, val_batches, TrainConfig(**{**tcfg.__dict__, "steps": end}),
                     start=FitResult(best_val_nll=result.best_val_nll, optimizer_state=opt_state, step=begin),
                     hooks=FitHooks(on_validate=saver,
                                    progress=None if progress is None else lambda s, n, v: progress(s, total, v)))
        opt_state = result.optimizer_state


def _split_targets(stack: SeriesStack, min_observed: float,
                   val_from: dt.date | None) -> tuple[np.ndarray, np.ndarray]:
    """Training and validation target dates (indices), each with ``min_observed`` of it observed.

    Validation targets are the dates from ``val_from`` on (default: the last 20 % of the days).

    Raises:
        NoValidPixelsError: either set is empty.
    """
    usable = stack.clear >= min_observed
    cut = np.quantile(stack.days, 0.8) if val_from is None else (val_from - dt.date(1970, 1, 1)).days
    train_targets = np.flatnonzero(usable & (stack.days < cut))
    val_targets = np.flatnonzero(usable & (stack.days >= cut))
    if train_targets.size == 0 or val_targets.size == 0:
        raise NoValidPixelsError("no training or no validation target date has enough clear pixels "
                                 f"({min_observed:.0%}); add dates or lower the validation split")
    return train_targets, val_targets


def _task_draw(stack: SeriesStack, norm: Normalizer, recipe: SeriesRecipe, targets: np.ndarray,
               spacetime: float) -> _Draw:
    """A task sampler: a simulated space-time task with chance ``spacetime``, else one of ``targets``."""
    return lambda r: spacetime_task(recipe, r) if r.random() < spacetime else series_task(stack, norm, targets,
                                                                                           recipe, r)


def _sample(draw: _Draw, batch_size: int, seed: int, step: int) -> Batch:
    """Step ``step``'s batch, seeded by the run's seed and the step."""
    return make_batch(draw, batch_size, np.random.default_rng([seed, step]))
