"""Prediction heads: features to a diagonal Gaussian."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from geonp.models.layers import MLP


class GaussianHead(nn.Module):
    """Mean and bounded std per output channel: ``σ = σ_min + (1 - σ_min)·softplus(raw)``.

    Args:
        dim: input width ``E``.
        dim_y: output channels.
        hidden: hidden width.
        sigma_min: lower bound of the std (in normalised units).
    """

    def __init__(self, dim: int, dim_y: int, *, hidden: int = 128, sigma_min: float = 0.01) -> None:
        """Build the module; the arguments are described in the class docstring."""
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.mlp = MLP([dim, hidden, 2 * dim_y])
        self.sigma_min = sigma_min

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``[B, N, E] -> (mean [B, N, dy], std [B, N, dy])``."""
        mean, raw = self.mlp(self.norm(x)).chunk(2, dim=-1)
        return mean, self.sigma_min + (1.0 - self.sigma_min) * F.softplus(raw)


def gaussian_kl(
    mean_p: torch.Tensor, std_p: torch.Tensor, mean_q: torch.Tensor, std_q: torch.Tensor,
    valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mean KL divergence KL(p || q) of Gaussians per target value (nats).

    ``p`` is a teacher's prediction, ``q`` the student's that distillation pulls towards it.

    Args:
        mean_p: the teacher's mean ``[B, N, dy]``.
        std_p: the teacher's std ``[B, N, dy]``.
        mean_q: the student's mean ``[B, N, dy]``.
        std_q: the student's std ``[B, N, dy]``.
        valid: ``[B, N]`` True where the target counts.

    Returns:
        A scalar: the average over valid targets and channels.
    """
    kl = torch.log(std_q / std_p) + (std_p**2 + (mean_p - mean_q) ** 2) / (2 * std_q**2) - 0.5
    return _target_mean(kl, valid)


def gaussian_nll(
    mean: torch.Tensor, std: torch.Tensor, y: torch.Tensor, valid: torch.Tensor | None = None
) -> torch.Tensor:
    """Mean Gaussian negative log-likelihood per target value (nats).

    Args:
        mean: ``[B, N, dy]``.
        std: ``[B, N, dy]``.
        y: ``[B, N, dy]``.
        valid: ``[B, N]`` True where the target counts.

    Returns:
        A scalar: the average over valid targets and channels.
    """
    nll = 0.5 * torch.log(2 * torch.pi * std**2) + 0.5 * ((y - mean) / std) ** 2  # [B, N, dy]
    return _target_mean(nll, valid)


def _target_mean(values: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """Mean of per-target values ``[B, N, dy]`` over the valid targets ``[B, N]`` (all when None)."""
    if valid is None:
        return values.mean()
    w = valid[..., None].to(values.dtype).expand_as(values)
    return (values * w).sum() / w.sum().clamp_min(1.0)
