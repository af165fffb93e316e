"""KRBlock (the TNP-KR paper Algorithm 1): shared attention and feed-forward for query and key streams."""

from __future__ import annotations

import torch
from torch import nn

from geonp.models.attention.bias import DistanceCache
from geonp.models.layers import MLP


class KRBlock(nn.Module):
    """Pre-norm kernel-regression block.

    Keys (context tokens) attend to keys; queries (targets) attend to the keys only, never to each
    other. One attention module, one feed-forward network and one pair of LayerNorms serve both
    streams (the first TNP-KR preprint Alg. 2), so a query's output depends on its own token and the context alone:
    queries may be processed in any chunking with identical results.

    Args:
        dim: model width ``E``.
        attention: an attention module with ``forward(x_q, x_kv, *, q_pos, k_pos, key_valid, cache)``.
        ff_dim: hidden width of the feed-forward network.
        dropout: dropout on both residual branches.
    """

    def __init__(self, dim: int, attention: nn.Module, *, ff_dim: int, dropout: float = 0.0) -> None:
        """Build the module; the arguments are described in the class docstring."""
        super().__init__()
        self.attn = attention
        self.norm_attn = nn.LayerNorm(dim)
        self.norm_ff = nn.LayerNorm(dim)
        self.ff = MLP([dim, ff_dim, dim])
        self.drop = nn.Dropout(dropout)

    def _feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.drop(self.ff(self.norm_ff(x)))

    def update_keys(
        self, ks: torch.Tensor, *, k_pos: torch.Tensor, key_valid: torch.Tensor | None,
        cache: DistanceCache | None = None,
    ) -> torch.Tensor:
        """Context stream: ``ks [B, Nk, E] -> [B, Nk, E]`` (steps 1, 3, 5, 6, 8, 10)."""
        kn = self.norm_attn(ks)
        ks = ks + self.drop(self.attn(kn, kn, q_pos=k_pos, k_pos=k_pos, key_valid=key_valid, cache=cache))
        return self._feed_forward(ks)

    def update_queries(
        self,
        qs: torch.Tensor,
        ks: torch.Tensor,
        *,
        q_pos: torch.Tensor,
        k_pos: torch.Tensor,
        key_valid: torch.Tensor | None,
        cache: DistanceCache | None = None,
    ) -> torch.Tensor:
        """Query stream: ``qs [B, Nq, E]`` attends to this block's *input* keys ``ks``."""
        kn = self.norm_attn(ks)
        qn = self.norm_attn(qs)
        qs = qs + self.drop(self.attn(qn, kn, q_pos=q_pos, k_pos=k_pos, key_valid=key_valid, cache=cache))
        return self._feed_forward(qs)
