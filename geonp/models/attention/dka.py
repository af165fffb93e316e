"""Deep kernel attention (seed 002 §3.4, eq. 9): a learned kernel on (token, location), linear in N.

``q'_i = LN( Σ_j ω_ij ψ(v_j) / n_valid )`` with ``ω_ij = φ(q_i, s_i)ᵀ φ(k_j, s_j)`` and the *same*
MLP ``φ`` for queries and keys. Because ``Σ_j ω_ij ψ(v_j) = φ(q_i)ᵀ M`` with
``M = Σ_j φ(k_j) ψ(v_j)ᵀ``, the cost is linear in the number of keys and queries. Locations are
co-embedded in every layer, so DKA is not translation invariant. Dividing by the number of valid
keys (not in eq. 9) keeps the scale independent of the context size.
"""

from __future__ import annotations

import torch
from torch import nn

from geonp.models.attention.bias import DistanceCache
from geonp.models.layers import MLP


def deep_kernel_attention(
    phi_q: torch.Tensor,
    phi_k: torch.Tensor,
    psi_v: torch.Tensor,
    *,
    key_valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """Linear-time kernel regression ``φ(q)ᵀ (Σ_j φ(k_j) ψ(v_j)ᵀ) / n_valid``.

    Args:
        phi_q: query features ``[B, H, Nq, R]``.
        phi_k: key features ``[B, H, Nk, R]``.
        psi_v: value features ``[B, H, Nk, Dv]``.
        key_valid: ``[B, Nk]``, True where a key counts.

    Returns:
        ``[B, H, Nq, Dv]``.
    """
    if key_valid is not None:
        phi_k = phi_k * key_valid[:, None, :, None]
        n = key_valid.sum(-1).clamp_min(1)[:, None, None, None]  # [B, 1, 1, 1]
    else:
        n = torch.full((1, 1, 1, 1), phi_k.shape[2], dtype=phi_k.dtype, device=phi_k.device)
    m = torch.einsum("bhkr,bhkd->bhrd", phi_k, psi_v)  # [B, H, R, Dv]
    return torch.einsum("bhqr,bhrd->bhqd", phi_q, m) / n


def naive_deep_kernel_attention(
    phi_q: torch.Tensor,
    phi_k: torch.Tensor,
    psi_v: torch.Tensor,
    *,
    key_valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """The ``O(Nq·Nk)`` twin of :func:`deep_kernel_attention`: every ``ω_ij`` explicit (tests)."""
    omega = torch.einsum("bhqr,bhkr->bhqk", phi_q, phi_k)  # [B, H, Nq, Nk]
    if key_valid is not None:
        omega = omega * key_valid[:, None, None, :]
        n = key_valid.sum(-1).clamp_min(1)[:, None, None, None]
    else:
        n = phi_k.shape[2]
    return omega @ psi_v / n


class DeepKernelAttention(nn.Module):
    """Multi-head deep kernel attention with co-embedded locations.

    Args:
        dim: model width ``E``.
        num_heads: heads ``H``.
        pos_dim: coordinate dimension ``P``.
        feature_dim: kernel feature dimension ``R`` per head.
        hidden: hidden width of the ``φ`` and ``ψ`` MLPs.
        pos_scale: coordinates are divided by this before embedding (keeps inputs O(1)).
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        pos_dim: int = 2,
        feature_dim: int = 32,
        hidden: int = 128,
        pos_scale: float = 1.0,
    ) -> None:
        """Build the module; the arguments are described in the class docstring."""
        super().__init__()
        self.num_heads = num_heads
        self.feature_dim = feature_dim
        self.pos_scale = pos_scale
        self.phi = MLP([dim + pos_dim, hidden, num_heads * feature_dim])
        self.psi = MLP([dim, hidden, dim])
        self.norm = nn.LayerNorm(dim)
        self.to_out = nn.Linear(dim, dim)

    def _features(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        f = self.phi(torch.cat([x, pos / self.pos_scale], dim=-1))  # [B, N, H*R]
        f = f * self.feature_dim**-0.25  # so ω = φᵀφ has the scale of a dot product over √R
        return f.reshape(b, n, self.num_heads, self.feature_dim).transpose(1, 2)  # [B, H, N, R]

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
        """Attend from ``x_q [B, Nq, E]`` to ``x_kv [B, Nk, E]``; returns ``[B, Nq, E]`` (no bias: ``cache`` unused)."""
        b, nk, e = x_kv.shape
        psi_v = self.psi(x_kv).reshape(b, nk, self.num_heads, e // self.num_heads).transpose(1, 2)
        out = deep_kernel_attention(
            self._features(x_q, q_pos), self._features(x_kv, k_pos), psi_v, key_valid=key_valid
        )  # [B, H, Nq, D]
        out = out.transpose(1, 2).reshape(b, x_q.shape[1], e)
        return self.to_out(self.norm(out))
