"""Optimisers and the learning-rate schedule used by :func:`geonp.training.loop.fit`."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch


class Yogi(torch.optim.Optimizer):
    """Yogi (Zaheer et al. 2018), the optimiser of the TNP-KR paper, with decoupled weight decay.

    Like Adam, but the second moment moves additively:
    ``v ← v − (1 − β2)·sign(v − g²)·g²``, which keeps the effective learning rate from growing fast.
    """

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-3,
        weight_decay: float = 0.0,
    ) -> None:
        """Yogi over ``params`` with Adam's arguments (``eps`` larger, as the Yogi paper uses)."""
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure: None = None) -> None:  # type: ignore[override]
        """Take one optimisation step."""
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros(())
                    state["m"] = torch.zeros_like(p)
                    state["v"] = torch.full_like(p, 1e-6)
                state["step"] += 1
                t = float(state["step"])
                m, v = state["m"], state["v"]
                m.mul_(b1).add_(g, alpha=1 - b1)
                g2 = g * g
                v.addcmul_(torch.sign(v - g2), g2, value=-(1 - b2))
                if group["weight_decay"]:
                    p.mul_(1 - group["lr"] * group["weight_decay"])
                step_size = group["lr"] * math.sqrt(1 - b2**t) / (1 - b1**t)
                p.addcdiv_(m, v.sqrt().add_(group["eps"]), value=-step_size)


def make_optimizer(params: Iterable[torch.nn.Parameter], name: str, *, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """AdamW or Yogi."""
    if name == "yogi":
        return Yogi(params, lr=lr, weight_decay=weight_decay)
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)


def cosine_lr(step: int, *, total: int, warmup: int, min_ratio: float) -> float:
    """Learning-rate multiplier: linear warm-up, then one cosine annealing to ``min_ratio``."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))
