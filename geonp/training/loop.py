"""The one training loop of geonp: :func:`fit`. Every training path calls it."""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from geonp.config import TrainConfig
from geonp.data.batch import Batch
from geonp.models.heads import gaussian_kl, gaussian_nll
from geonp.models.layers import resolve_device
from geonp.training.optim import cosine_lr, make_optimizer

logger = logging.getLogger(__name__)


@dataclass
class FitResult:
    """What :func:`fit` did.

    Attributes:
        history: one record per validation (step, train_nll, val_nll, lr, seconds).
        best_val_nll: the lowest validation NLL seen.
        best_step: the step where it was seen.
        best_state: the weights at that step (CPU tensors).
        optimizer_state: the optimiser state at the end (for resuming).
        step: the last completed step.
    """

    history: list[dict[str, float]] = field(default_factory=list)
    best_val_nll: float = math.inf
    best_step: int = -1
    best_state: dict[str, torch.Tensor] | None = None
    optimizer_state: dict[str, Any] | None = None
    step: int = 0


@torch.no_grad()
def evaluate_nll(model: nn.Module, batches: Sequence[Batch], device: torch.device) -> float:
    """Mean Gaussian NLL per target value over ``batches`` (weighted by target count)."""
    model.eval()
    total, count = 0.0, 0.0
    for batch in batches:
        b = batch.to(device)
        assert b.yt is not None, "validation batches carry their targets"
        mean, std = model(b.xc, b.yc, b.xt, b.context_valid)
        n = float(b.target_valid.sum() if b.target_valid is not None else b.xt.shape[0] * b.xt.shape[1])
        total += float(gaussian_nll(mean, std, b.yt, b.target_valid)) * n
        count += n
    return total / max(count, 1.0)


@dataclass(frozen=True)
class FitHooks:
    """What :func:`fit` calls back as it trains.

    Attributes:
        on_validate: called after each validation with ``(record, is_best, result)``; use it to
            save checkpoints and write metrics.
        progress: called every step with ``(step, total, train_nll)``.
        average_gradients: data-parallel training (:mod:`geonp.training.parallel`): called after
            each backward pass with this process's loss; averages the gradients over the
            processes in place and returns the mean loss.
    """

    on_validate: Callable[[dict[str, float], bool, FitResult], None] | None = None
    progress: Callable[[int, int, float], None] | None = None
    average_gradients: Callable[[float], float] | None = None


def fit(
    model: nn.Module,
    sample_batch: Callable[[int], Batch],
    val_batches: Sequence[Batch],
    cfg: TrainConfig,
    *,
    start: FitResult | None = None,
    hooks: FitHooks | None = None,
) -> FitResult:
    """Train ``model`` on the Gaussian NLL of its target points.

    Args:
        model: a model with ``forward(xc, yc, xt, context_valid) -> (mean, std)``.
        sample_batch: ``step -> Batch`` (deterministic in the step for reproducible runs).
        val_batches: fixed validation batches.
        cfg: optimisation settings.
        start: where a resumed run stands: its ``step`` (the schedule continues from there),
            ``optimizer_state`` and ``best_val_nll``; None: from step 0.
        hooks: what to call back (validation, progress, gradient averaging); None: nothing.

    Returns:
        A :class:`FitResult`; the model keeps its *last* weights, ``best_state`` the best ones.
    """
    device = resolve_device(cfg.device)
    model.to(device)
    opt = make_optimizer(model.parameters(), cfg.optimizer, lr=cfg.lr, weight_decay=cfg.weight_decay)
    start, hooks = start or FitResult(), hooks or FitHooks()
    if start.optimizer_state is not None:
        opt.load_state_dict(start.optimizer_state)
    result = FitResult(best_val_nll=start.best_val_nll, step=start.step)
    teacher = load_teacher(cfg.distill_from, device) if cfg.distill_from else None
    running, n_running, t0 = 0.0, 0, time.perf_counter()
    for step in range(start.step, cfg.steps):
        model.train()
        lr = cfg.lr * cosine_lr(step, total=cfg.steps, warmup=cfg.warmup_steps, min_ratio=cfg.min_lr_ratio)
        for group in opt.param_groups:
            group["lr"] = lr
        b = sample_batch(step).to(device)
        loss, nll = _loss(model, b, teacher, cfg.distill_weight)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"training loss became {float(loss)} at step {step}; lower the learning rate")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        value = float(nll.detach())  # the data NLL: the curve compares with runs without a teacher
        if hooks.average_gradients is not None:
            value = hooks.average_gradients(value)
        nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        running += value
        n_running += 1
        result.step = step + 1
        if hooks.progress is not None:
            hooks.progress(step + 1, cfg.steps, value)
        if (step + 1) % cfg.val_every == 0 or step + 1 == cfg.steps:
            val = evaluate_nll(model, val_batches, device) if val_batches else math.nan
            record = {
                "step": step + 1, "train_nll": running / max(n_running, 1), "val_nll": val,
                "lr": lr, "seconds": time.perf_counter() - t0,
            }
            running, n_running = 0.0, 0
            result.history.append(record)
            is_best = val < result.best_val_nll
            if is_best:
                result.best_val_nll, result.best_step = val, step + 1
                result.best_state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
            result.optimizer_state = opt.state_dict()
            logger.info("step %d train_nll %.4f val_nll %.4f", step + 1, record["train_nll"], val)
            if hooks.on_validate is not None:
                hooks.on_validate(record, is_best, result)
    result.optimizer_state = opt.state_dict()
    return result


def _loss(model: nn.Module, b: Batch, teacher: nn.Module | None, distill_weight: float
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss, data NLL)`` of a batch: the NLL, plus the KL from a teacher's predictions when distilling."""
    assert b.yt is not None, "training batches carry their targets"
    mean, std = model(b.xc, b.yc, b.xt, b.context_valid)
    nll = gaussian_nll(mean, std, b.yt, b.target_valid)
    if teacher is None:
        return nll, nll
    with torch.no_grad():
        t_mean, t_std = teacher(b.xc, b.yc, b.xt, b.context_valid)
    kl = gaussian_kl(t_mean, t_std, mean, std, b.target_valid)
    return (1 - distill_weight) * nll + distill_weight * kl, nll


def load_teacher(model: str, device: torch.device) -> nn.Module:
    """The frozen teacher of a distillation (:attr:`TrainConfig.distill_from`), in eval mode on ``device``."""
    from geonp.model_files.registry import load_model

    teacher = load_model(model).module.to(device).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher


class MetricsWriter:
    """Appends each validation record of a run to a ``.csv`` (header first) or ``.jsonl`` file.

    Args:
        path: The file, or None to write nothing.
        resume: Keep what the file holds (a resumed run); otherwise it starts empty.
    """

    def __init__(self, path: Path | None, resume: bool) -> None:
        """Build the writer; the arguments are described in the class docstring."""
        self.path = path
        if path is not None and not resume:
            path.unlink(missing_ok=True)

    def write(self, record: dict[str, Any]) -> None:
        """Append one record (the same keys every time)."""
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
