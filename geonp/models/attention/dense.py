"""Dense softmax attention with a materialised kernel bias: the reference oracle.

Memory is ``O(B·H·Nq·Nk)``; use it for tests and small problems only.
"""

from __future__ import annotations

import torch

from geonp.models.attention.base import has_valid_key, key_mask
from geonp.models.attention.bias import BiasTiles
from geonp.models.attention.softmax import BiasedSoftmaxAttention


def dense_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
    key_valid: torch.Tensor | None = None, bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Compute ``softmax(q·kᵀ/√D + bias) v`` with every logit materialised.

    Args:
        q: queries ``[B, H, Nq, D]``.
        k: keys ``[B, H, Nk, D]``.
        v: values ``[B, H, Nk, Dv]``.
        key_valid: ``[B, Nk]``, True where a key may be attended.
        bias: ``[B, H, Nq, Nk]`` additive logit bias.

    Returns:
        ``[B, H, Nq, Dv]``; rows with no valid key are zero.
    """
    logits = torch.einsum("bhqd,bhkd->bhqk", q * q.shape[-1] ** -0.5, k)  # [B, H, Nq, Nk]
    if bias is not None:
        logits = logits + bias
    if key_valid is None:
        return torch.softmax(logits, dim=-1) @ v
    keep = key_mask(key_valid)  # [B, 1, 1, Nk]
    # where() twice: a row with no valid key would give softmax(all -inf) = NaN and NaN gradients.
    logits = torch.where(keep, logits, torch.finfo(logits.dtype).min)
    weights = torch.softmax(logits, dim=-1)
    weights = torch.where(keep & has_valid_key(key_valid), weights, 0.0)
    return weights @ v


class DenseAttention(BiasedSoftmaxAttention):
    """Softmax attention with the bias materialised for every pair (the oracle)."""

    def attend_tiles(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, tiles: BiasTiles | None,
        key_valid: torch.Tensor | None,
    ) -> torch.Tensor:
        """Run :func:`dense_attention` on the bias materialised for every pair."""
        bias = tiles.full() if tiles is not None else None
        return dense_attention(q, k, v, key_valid=key_valid, bias=bias)
