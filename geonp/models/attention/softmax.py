"""The attention module of the softmax kernels (scan and dense): projections, bias, kernel call.

:class:`BiasedSoftmaxAttention` owns the parameters (q/k/v/out projections, the kernel bias) and
turns coordinates into bias tiles; a subclass only chooses the kernel that runs on per-head
tensors (:class:`~geonp.models.attention.scan.ScanAttention`,
:class:`~geonp.models.attention.dense.DenseAttention`).
"""

from __future__ import annotations

from abc import abstractmethod

import torch

from geonp.models.attention.base import AttentionGeometry, ProjectedAttention
from geonp.models.attention.bias import BiasTiles, RBFNetworkBias

__all__ = ["BiasedSoftmaxAttention"]


class BiasedSoftmaxAttention(ProjectedAttention):
    """Multi-head softmax attention with an optional kernel bias; subclasses pick the kernel.

    Args:
        dim: model width ``E``.
        num_heads: heads ``H``.
        bias: a kernel bias module (e.g. :class:`RBFNetworkBias`) or None.
    """

    def __init__(self, dim: int, num_heads: int, *, bias: RBFNetworkBias | None = None) -> None:
        """Build the projections; the bias module is kept as given."""
        super().__init__(dim, num_heads)
        self.bias = bias

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, where: AttentionGeometry
    ) -> torch.Tensor:
        """Evaluate the bias as tiles (None without a bias) and run the kernel on them."""
        tiles = None
        if self.bias is not None:
            tiles = self.bias.tiles(where.q_pos, where.k_pos, where.key_valid, cache=where.cache)
        return self.attend_tiles(q, k, v, tiles, where.key_valid)

    @abstractmethod
    def attend_tiles(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, tiles: BiasTiles | None,
        key_valid: torch.Tensor | None,
    ) -> torch.Tensor:
        """Run the kernel on per-head tensors and the bias as tiles (None: no bias)."""
