"""Small building blocks shared by the models: MLPs and multi-head projections."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch
from torch import nn


def resolve_device(device: str | torch.device) -> torch.device:
    """A torch device from ``auto`` (CUDA when available), ``cpu``, ``cuda`` or a device.

    Raises:
        ConfigError: ``cuda`` asked for where no CUDA device is available.
    """
    from geonp.errors import ConfigError

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
        b, n, e = x.shape
        return x.reshape(b, n, self.num_heads, e // self.num_heads).transpose(1, 2)

    def merge(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, H, N, D] -> [B, N, E]`` followed by the output projection."""
        b, h, n, d = x.shape
        return self.to_out(x.transpose(1, 2).reshape(b, n, h * d))

    def qkv(
        self, x_q: torch.Tensor, x_kv: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Project and split: ``[B, Nq, E], [B, Nk, E] -> q [B,H,Nq,D], k, v [B,H,Nk,D]``."""
        return self.split(self.to_q(x_q)), self.split(self.to_k(x_kv)), self.split(self.to_v(x_kv))


def decode_in_chunks(
    decode: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    xt: torch.Tensor,
    query_chunk: int | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run ``decode`` on ``xt [B, Nt, P]`` in chunks of targets and concatenate ``(mean, std)``.

    Valid for models whose targets are independent given the context (all of geonp's).
    """
    if query_chunk is None or query_chunk >= xt.shape[1]:
        return decode(xt)
    parts = [decode(xt[:, i : i + query_chunk]) for i in range(0, xt.shape[1], query_chunk)]
    return torch.cat([p[0] for p in parts], 1), torch.cat([p[1] for p in parts], 1)


def check_shapes(
    xc: torch.Tensor,
    yc: torch.Tensor,
    xt: torch.Tensor,
    context_valid: torch.Tensor | None,
    dim_x: int,
    dim_y: int,
) -> None:
    """Raise ValueError unless ``xc [B, Nc, P], yc [B, Nc, dy], xt [B, Nt, P], context_valid [B, Nc]``.

    Every neural process of geonp checks its inputs with it.
    """
    ok = (
        xc.dim() == 3 and yc.dim() == 3 and xt.dim() == 3
        and xc.shape[:2] == yc.shape[:2] and xt.shape[0] == xc.shape[0]
        and xc.shape[-1] == dim_x and xt.shape[-1] == dim_x and yc.shape[-1] == dim_y
        and (context_valid is None or context_valid.shape == xc.shape[:2])
    )
    if not ok:
        cv = None if context_valid is None else tuple(context_valid.shape)
        raise ValueError(
            f"expected xc [B, Nc, {dim_x}], yc [B, Nc, {dim_y}], xt [B, Nt, {dim_x}], context_valid "
            f"[B, Nc]; got xc {tuple(xc.shape)}, yc {tuple(yc.shape)}, xt {tuple(xt.shape)}, "
            f"context_valid {cv}"
        )
