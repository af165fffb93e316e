"""``geonp.train``: train a model on the user's rasters (and optionally simulated GP fields).

Patches of ``patch_size`` pixels are read from the training region of each raster; each step hides
pixels under simulated gaps (:mod:`geonp.data.gaps`), and the model learns to predict the hidden
pixels of a core window from the visible pixels nearest to it, exactly as ``geonp fill`` uses it.
Each band is a separate task (``dim_y = 1``), so a model works on any band count.
"""

from __future__ import annotations

import json
import logging
import math
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from geonp._version import __version__
from geonp.config import ModelConfig, TrainConfig
from geonp.data.batch import Batch
from geonp.data.datasets import PatchPool, sample_patches, split_columns
from geonp.data.gaps import sample_training_mask
from geonp.data.synthetic import gp_grid_field
from geonp.data.tasks import Task, collate, patch_task
from geonp.errors import ConfigError, InputRasterError, NoValidPixelsError
from geonp.models import build_model
from geonp.normalize import Normalizer
from geonp.training.checkpoint import load_checkpoint, load_training_state, save_model, save_training_state
from geonp.training.loop import FitResult, fit

logger = logging.getLogger(__name__)

GP_KERNELS = ("rbf", "matern32", "matern52")


@dataclass(frozen=True)
class TaskShape:
    """How tasks are cut from patches (shared by training and validation).

    Attributes:
        patch_size: patch edge in pixels.
        core_size: edge of the window whose hidden pixels are targets.
        max_context: cap on context pixels (the same cap ``geonp fill`` uses by default).
        max_targets: cap on targets per task.
    """

    patch_size: int = 64
    core_size: int = 48
    max_context: int = 256
    max_targets: int = 128

    def __post_init__(self) -> None:
        for name in ("patch_size", "core_size", "max_context", "max_targets"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < (8 if name == "patch_size" else 1):
                raise ConfigError(f"{name}={value!r} must be a positive integer{' >= 8' if name == 'patch_size' else ''}")


def _raster_task(pool: PatchPool, norm: Normalizer, shape: TaskShape, rng: np.random.Generator,
                 gap_source: np.ndarray | None) -> Task | None:
    i = int(rng.integers(len(pool)))
    band = int(rng.integers(pool.values.shape[1]))
    raw = pool.values[i, band]
    valid = np.isfinite(raw)
    values = ((raw - norm.mean[band]) / norm.std[band])[None]
    return _cut_task(np.nan_to_num(values), valid, shape, rng, gap_source)


def _gp_task(shape: TaskShape, rng: np.random.Generator) -> Task | None:
    p = shape.patch_size
    kernel = GP_KERNELS[int(rng.integers(len(GP_KERNELS)))]
    lengthscale = float(np.exp(rng.uniform(np.log(2.0), np.log(24.0))))
    field = gp_grid_field((p, p), kernel=kernel, lengthscale=lengthscale, rng=rng)
    field = field + rng.normal(0, 0.02, field.shape)
    return _cut_task(field[None].astype(np.float32), np.ones((p, p), bool), shape, rng, None)


def _cut_task(values: np.ndarray, valid: np.ndarray, shape: TaskShape, rng: np.random.Generator,
              gap_source: np.ndarray | None) -> Task | None:
    p, c = shape.patch_size, shape.core_size
    is_gap = sample_training_mask((p, p), rng=rng, source=gap_source)
    r0, c0 = (int(v) for v in rng.integers(0, p - c + 1, size=2))
    return patch_task(values, valid, is_gap, core=(r0, r0 + c, c0, c0 + c),
                      max_context=shape.max_context, max_targets=shape.max_targets, rng=rng)


def make_batch(draw: Callable[[np.random.Generator], Task | None], batch_size: int,
               rng: np.random.Generator) -> Batch:
    """Draw ``batch_size`` non-empty tasks and pad them into a batch."""
    tasks: list[Task] = []
    for _ in range(batch_size * 20):
        task = draw(rng)
        if task is not None:
            tasks.append(task)
            if len(tasks) == batch_size:
                return collate(tasks)
    raise NoValidPixelsError("could not cut tasks with both context and targets from the patches; "
                             "the rasters have too few valid pixels")


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
) -> TrainReport:
    """Train a model on rasters and write it to ``output`` (a model directory).

    Args:
        inputs: raster files (all with the same band count).
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
    if task_shape.core_size > task_shape.patch_size:
        task_shape = TaskShape(**{**task_shape.__dict__, "core_size": task_shape.patch_size})
    out = Path(output)
    t0 = time.perf_counter()
    rng = np.random.default_rng(tcfg.seed)
    common = dict(patch_size=task_shape.patch_size, nodata=nodata, bands=bands,
                  val_fraction=val_fraction, test_fraction=test_fraction, min_valid_fraction=0.5)
    train_pool = sample_patches(inputs, region="train", count=pool_size, rng=rng, **common)
    val_pool = sample_patches(inputs, region="val", count=max(val_tasks, 16), rng=rng, **common)
    out.mkdir(parents=True, exist_ok=True)  # only once the data is usable: no empty model directory
    flat = np.moveaxis(train_pool.values, 1, 0).reshape(train_pool.values.shape[1], -1)
    norm = Normalizer.fit(flat, np.isfinite(flat), seed=tcfg.seed)
    source = _gap_source(gap_source)

    val_rng = np.random.default_rng(tcfg.seed + 10_000)
    val_batches = [
        make_batch(lambda r: _raster_task(val_pool, norm, task_shape, r, source), min(16, val_tasks), val_rng)
        for _ in range(max(1, val_tasks // 16))
    ]

    torch.manual_seed(tcfg.seed)
    module = build_model(mcfg)
    start, opt_state, best, history = 0, None, math.inf, []
    if resume:
        state, opt_state, prog = load_training_state(out)
        module.load_state_dict(state)
        start, best, history = int(prog["step"]), float(prog["best_val_nll"]), list(prog["history"])
        logger.info("resuming from step %d", start)
    total_steps = pretrain_steps + tcfg.steps
    metrics_writer = _MetricsWriter(Path(metrics) if metrics else None, resume)

    card: dict[str, Any] = {
        "name": name or out.name,
        "description": f"{_arch_name(mcfg)} trained by geonp train on {len(inputs)} raster(s)",
        "geonp_version": __version__,
        "command": command,
        "training_data": [str(Path(p).name) for p in inputs],
        "bands": list(bands) if bands else None,
        "band_count": int(train_pool.values.shape[1]),
        "nodata": nodata,
        "coord_unit": mcfg.coord_unit,
        "task_shape": task_shape.__dict__,
        "split": {"axis": "columns", "val_fraction": val_fraction, "test_fraction": test_fraction,
                  "regions": [split_columns(_width(p), val_fraction=val_fraction, test_fraction=test_fraction,
                                            min_val_columns=task_shape.patch_size).__dict__ for p in inputs]},
        "hardware": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
                    f"{'CUDA ' + torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU'}",
        "pretrain_steps": pretrain_steps,
        "steps": tcfg.steps,
        "batch_size": batch_size,
        "train_config": tcfg.__dict__,
    }

    def save_best(record: dict[str, float], is_best: bool, result: FitResult) -> None:
        record = {**record, "step": record["step"]}
        history.append(record)
        metrics_writer.write(record)
        if is_best:
            card.update(best_val_nll=record["val_nll"], best_step=record["step"],
                        training_seconds=round(time.perf_counter() - t0, 1))
            save_model(out, module, mcfg, normalizer=norm.to_dict(), card=card)
        save_training_state(out, module, result.optimizer_state or {"state": {}, "param_groups": []},
                            {"step": result.step, "best_val_nll": result.best_val_nll, "history": history})

    phases: list[tuple[int, int, Callable[[np.random.Generator], Task | None]]] = []
    if pretrain_steps:
        phases.append((0, pretrain_steps, lambda r: _gp_task(task_shape, r)))
    phases.append((pretrain_steps, total_steps,
                   lambda r: _raster_task(train_pool, norm, task_shape, r, source)))
    result = FitResult(best_val_nll=best)
    for begin, end, draw in phases:
        if start >= end:
            continue
        phase_cfg = TrainConfig(**{**tcfg.__dict__, "steps": end})

        def sample(step: int, draw: Callable[[np.random.Generator], Task | None] = draw) -> Batch:
            return make_batch(draw, batch_size, np.random.default_rng([tcfg.seed, step]))

        result = fit(module, sample, val_batches, phase_cfg, start_step=max(start, begin),
                     optimizer_state=opt_state, best_val_nll=result.best_val_nll,
                     on_validate=save_best,
                     progress=None if progress is None else lambda s, n, v: progress(s, total_steps, v))
        opt_state, start = result.optimizer_state, end
    if not (out / "model.safetensors").exists():
        raise InputRasterError("training produced no model; the validation NLL was never finite")
    loaded = load_checkpoint(out)
    return TrainReport(out, total_steps, float(loaded.card.get("best_val_nll", math.nan)),
                       int(loaded.card.get("best_step", -1)), time.perf_counter() - t0, history)


def _arch_name(cfg: ModelConfig) -> str:
    return {"tnpkr": f"TNP-KR ({cfg.attention})", "tnpd": "TNP-D", "cmanp": "CMANP"}.get(cfg.arch, cfg.arch)


def _width(path: str | os.PathLike[str]) -> int:
    from geonp.io.raster import open_raster

    with open_raster(path) as src:
        return int(src.width)
