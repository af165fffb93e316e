"""Small building blocks shared by the models: MLPs, head split and merge, multi-head projections."""

from __future__ import annotations

import itertools

import torch
from torch import nn

from geonp.errors import ConfigError


def resolve_device(device: str | torch.device) -> torch.device:
    """A torch device from ``auto`` (CUDA when available), ``cpu``, ``cuda`` or a device.

    Raises:
        ConfigError: ``cuda`` asked for where no CUDA device is available.
    """
    if str(device) == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda was asked for but no CUDA device is available; use --device cpu or auto")
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


class MLP(nn.Sequential):
    """Linear layers with GELU between them.

    Args:
        sizes: ``[in, hidden..., out]`` widths.
    """

    def __init__(self, sizes: list[int]) -> None:
        """Build the module; the arguments are described in the class docstring."""
        layers: list[nn.Module] = []
        for i, (n_in, n_out) in enumerate(itertools.pairwise(sizes)):
            layers.append(nn.Linear(n_in, n_out))
            if i < len(sizes) - 2:
                layers.append(nn.GELU())
        super().__init__(*layers)


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Split the width of tokens into heads: ``[B, N, H·D] -> [B, H, N, D]``."""
    b, n, e = x.shape
    return x.reshape(b, n, num_heads, e // num_heads).transpose(1, 2)  # [B, H, N, D]


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """Lay the heads side by side again: ``[B, H, N, D] -> [B, N, H·D]``."""
    b, h, n, d = x.shape
    return x.transpose(1, 2).reshape(b, n, h * d)  # [B, N, H·D]


class MultiHeadProjection(nn.Module):
    """Query/key/value/output projections with head split and merge.

    Args:
        dim: model width ``E``.
        num_heads: heads ``H``; ``E`` must be divisible by ``H``.
    """

    def __init__(self, dim: int, num_heads: int) -> None:
        """Build the module; the arguments are described in the class docstring."""
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"dim={dim} must be divisible by num_heads={num_heads}")
        self.num_heads = num_heads
        self.to_q = nn.Linear(dim, dim)
        self.to_k = nn.Linear(dim, dim)
        self.to_v = nn.Linear(dim, dim)
        self.to_out = nn.Linear(dim, dim)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, N, E] -> [B, H, N, D]``."""
        return split_heads(x, self.num_heads)

    def merge(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, H, N, D] -> [B, N, E]`` followed by the output projection."""
        return self.to_out(merge_heads(x))

    def qkv(
        self, x_q: torch.Tensor, x_kv: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Project and split: ``[B, Nq, E], [B, Nk, E] -> q [B,H,Nq,D], k, v [B,H,Nk,D]``."""
        return self.split(self.to_q(x_q)), self.split(self.to_k(x_kv)), self.split(self.to_v(x_kv))
