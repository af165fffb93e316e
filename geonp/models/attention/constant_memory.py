"""CMANP's constant-memory cross-attention kernel (Feng et al., CMANP §3.1): fold keys in block by block.

The kernel keeps, per fixed query, only the log normaliser and the normalised output, so memory
does not grow with the number of keys; its oracle is
:func:`~geonp.models.attention.dense.dense_attention` over all keys at once
(``tests/models/test_cmanp.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional as F

from geonp.models.attention.base import key_mask

__all__ = ["CrossAttentionState", "cross_attention_update"]


@dataclass(frozen=True)
class CrossAttentionState:
    """Cross-attention of fixed queries over the keys folded in so far (Feng et al., CMANP §3.1.1).

    Both tensors are float32 whatever the input dtype, so a chunked fold matches a one-shot
    softmax under autocast.

    Attributes:
        log_c: ``[B, H, Nq]`` log of the softmax normaliser ``c_j = Σ_i exp(s_ij)``; ``-inf``
            while a query has seen no valid key.
        ca: ``[B, H, Nq, Dv]`` the normalised output ``Σ_i exp(s_ij) v_i / c_j``; zero while a
            query has seen no valid key.
    """

    log_c: torch.Tensor
    ca: torch.Tensor

    @classmethod
    def empty(cls, batch: int, heads: int, queries: int, dim_v: int, *, device: torch.device) -> CrossAttentionState:
        """The state before any key: ``log c = -inf``, ``CA = 0``."""
        log_c = torch.full((batch, heads, queries), float("-inf"), device=device)
        return cls(log_c, torch.zeros((batch, heads, queries, dim_v), device=device))


def cross_attention_update(
    state: CrossAttentionState,
    q: torch.Tensor,
    k_new: torch.Tensor,
    v_new: torch.Tensor,
    key_valid_new: torch.Tensor | None = None,
) -> CrossAttentionState:
    """Fold a block of new keys into a cross-attention state (the CMANP paper ``UPDATE``, log-space form).

    With ``s_i = q·k_i/√D`` over the new keys and ``t_j = log Σ_new exp(s_i − log c_j)``::

        log c'_j = log c_j + softplus(t_j)
        CA'_j    = exp(log c_j − log c'_j)·CA_j + Σ_new exp(s_i − log c'_j)·v_i

    Folding every block in turn into :meth:`CrossAttentionState.empty` gives exactly
    ``softmax(q·kᵀ/√D) v`` over all keys (what :func:`~geonp.models.attention.dense_attention`
    computes), in memory ``O(Nq · block)``. Every exponent is ``≤ 0``, so nothing overflows.

    Args:
        state: the state after the previous blocks.
        q: the fixed queries ``[B, H, Nq, D]`` (the same tensor for every block).
        k_new: new keys ``[B, H, Nk, D]``.
        v_new: new values ``[B, H, Nk, Dv]``.
        key_valid_new: ``[B, Nk]``, True where a new key counts; a fully masked block leaves the
            state unchanged (bit for bit).

    Returns:
        The new state; the input state is not modified.
    """
    s = (q.float() * q.shape[-1] ** -0.5) @ k_new.float().transpose(-1, -2)  # [B, H, Nq, Nk]
    if key_valid_new is None:
        keep = torch.ones_like(s[:1, :1, :1], dtype=torch.bool)  # [1, 1, 1, Nk]
    else:
        keep = key_mask(key_valid_new)  # [B, 1, 1, Nk]
    # Masked logits become the most negative finite float, not -inf: logsumexp over a fully
    # masked row then stays finite and its gradient is not NaN; the where()s below discard it.
    s = torch.where(keep, s, torch.finfo(s.dtype).min)
    has_new = keep.any(-1)  # [B, 1, 1]
    lse_new = torch.where(has_new, torch.logsumexp(s, -1), 0.0)  # [B, H, Nq], log Σ_new exp(s_i)
    has_old = torch.isfinite(state.log_c)  # [B, H, Nq]
    log_c_old = torch.where(has_old, state.log_c, 0.0)
    t = lse_new - log_c_old  # [B, H, Nq]: log Σ_new exp(s_i − log c_j)
    log_c = torch.where(
        has_old & has_new, log_c_old + F.softplus(t),
        torch.where(has_old, log_c_old, torch.where(has_new, lse_new, float("-inf"))),
    )  # [B, H, Nq]
    log_c_safe = torch.where(torch.isfinite(log_c), log_c, 0.0)
    scale_old = torch.where(has_old, torch.exp(log_c_old - log_c_safe), 0.0)  # c_j / c'_j ≤ 1
    p = torch.where(keep, torch.exp(s - log_c_safe[..., None]), 0.0)  # [B, H, Nq, Nk], ≤ 1
    ca = scale_old[..., None] * state.ca + p @ v_new.float()  # [B, H, Nq, Dv]
    return CrossAttentionState(log_c, ca)
