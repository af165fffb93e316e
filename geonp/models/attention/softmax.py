"""The attention module of the softmax kernels (scan and dense): projections, bias, kernel call.

:class:`BiasedSoftmaxAttention` owns the parameters (q/k/v/out projections, the kernel bias) and
turns coordinates into bias tiles; a subclass only chooses the kernel that runs on per-head
tensors (:class:`~geonp.models.attention.scan.ScanAttention`,
:class:`~geonp.models.attention.dense.DenseAttention`).
"""

from __future__ import annotations

import torch
from torch import nn

from geonp.models.attention.bias import BiasTiles, DistanceCache, RBFNetworkBias
from geonp.models.layers import MultiHeadProjection

__all__ = ["BiasedSoftmaxAttention"]


class BiasedSoftmaxAttention(nn.Module):
    """Multi-head softmax attention with an optional kernel bias; subclasses pick the kernel.

    Args:
        dim: model width ``E``.
        num_heads: heads ``H``.
        bias: a kernel bias module (e.g. :class:`RBFNetworkBias`) or None.
    """

    def __init__(self, dim: int, num_heads: int, *, bias: RBFNetworkBias | None = None) -> None:
        """Build the projections; the bias module is kept as given."""
        super().__init__()
        self.proj = MultiHeadProjection(dim, num_heads)
        self.bias = bias

    def forward(
        self,
        x_q: torch.Tensor,
        x_kv: torch.Tensor,
        *,
        q_pos: torch.Tensor,
        k_pos: torch.Tensor,
        key_valid: torch.Tensor | None = None,
        cache: DistanceCache | None = None,
    ) -> torch.Tensor:
        """Attend from ``x_q [B, Nq, E]`` to ``x_kv [B, Nk, E]``; returns ``[B, Nq, E]``.

        ``cache`` shares squared distances between the layers of one forward pass.
        """
        q, k, v = self.proj.qkv(x_q, x_kv)
        out = self.attend_fused(q, k, v, q_pos, k_pos, key_valid, cache)
        if out is None:
            tiles = self.bias.tiles(q_pos, k_pos, key_valid, cache=cache) if self.bias is not None else None
            out = self.attend(q, k, v, tiles, key_valid)
        return self.proj.merge(out)

    def attend_fused(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        q_pos: torch.Tensor,
        k_pos: torch.Tensor,
        key_valid: torch.Tensor | None,
        cache: DistanceCache | None,
    ) -> torch.Tensor | None:
        """A kernel that computes the bias from the positions itself, or None (then :meth:`attend`)."""
        return None

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        tiles: BiasTiles | None,
        key_valid: torch.Tensor | None,
    ) -> torch.Tensor:
        """Run the kernel on per-head tensors."""
        raise NotImplementedError
