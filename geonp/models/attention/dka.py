"""Deep kernel attention (the TNP-KR paper §3.4, eq. 9): a learned kernel on (token, location), linear in N.

``q'_i = LN( Σ_j ω_ij ψ(v_j) / n_valid )`` with ``ω_ij = φ(q_i, s_i)ᵀ φ(k_j, s_j)`` and the *same*
MLP ``φ`` for queries and keys. Because ``Σ_j ω_ij ψ(v_j) = φ(q_i)ᵀ M`` with
``M = Σ_j φ(k_j) ψ(v_j)ᵀ``, the cost is linear in the number of keys and queries. Locations are
co-embedded in every layer, so DKA is not translation invariant. Dividing by the number of valid
keys (not in eq. 9) keeps the scale independent of the context size.
"""

from __future__ import annotations

import torch
from torch import nn

from geonp.models.attention.base import (
    AttentionGeometry,
    AttentionModule,
    mask_keys,
    valid_key_count,
)
from geonp.models.layers import MLP, merge_heads, split_heads

#: Std of the Fourier features' frequencies (cycles per unit of the scaled coordinates): with
#: ``pos_scale`` four length scales, the features reach down to about a tenth of a length scale.
FOURIER_BANDWIDTH = 2.0


def deep_kernel_attention(
    phi_q: torch.Tensor, phi_k: torch.Tensor, psi_v: torch.Tensor, *,
    key_valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """Linear-time kernel regression ``φ(q)ᵀ (Σ_j φ(k_j) ψ(v_j)ᵀ) / n_valid``.

    Args:
        phi_q: query features ``[B, H, Nq, R]``.
        phi_k: key features ``[B, H, Nk, R]``.
        psi_v: value features ``[B, H, Nk, Dv]``.
        key_valid: ``[B, Nk]``, True where a key counts.

    Returns:
        ``[B, H, Nq, Dv]``; zero where no key is valid.
    """
    m = torch.einsum("bhkr,bhkd->bhrd", mask_keys(phi_k, key_valid), psi_v)  # [B, H, R, Dv]
    return torch.einsum("bhqr,bhrd->bhqd", phi_q, m) / _key_count(phi_k, key_valid)


def naive_deep_kernel_attention(
    phi_q: torch.Tensor, phi_k: torch.Tensor, psi_v: torch.Tensor, *,
    key_valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """The ``O(Nq·Nk)`` twin of :func:`deep_kernel_attention`: every ``ω_ij`` explicit (tests)."""
    omega = torch.einsum("bhqr,bhkr->bhqk", phi_q, phi_k)  # [B, H, Nq, Nk]
    if key_valid is None:
        return omega @ psi_v / phi_k.shape[2]
    omega = omega * key_valid[:, None, None, :]  # written out, apart from the fast path's helpers
    return omega @ psi_v / key_valid.sum(-1).clamp_min(1)[:, None, None, None]


def _key_count(phi_k: torch.Tensor, key_valid: torch.Tensor | None) -> torch.Tensor:
    """The divisor ``n_valid``: ``[B, 1, 1, 1]`` valid keys (at least 1), or all ``Nk`` keys."""
    if key_valid is None:
        return torch.full((1, 1, 1, 1), phi_k.shape[2], dtype=phi_k.dtype, device=phi_k.device)
    return valid_key_count(key_valid)


class DeepKernelAttention(AttentionModule):
    """Multi-head deep kernel attention with co-embedded locations.

    Args:
        dim: model width ``E``.
        num_heads: heads ``H``.
        pos_dim: coordinate dimension ``P``.
        feature_dim: kernel feature dimension ``R`` per head.
        hidden: hidden width of the ``φ`` and ``ψ`` MLPs.
        pos_scale: coordinates are divided by this before embedding (keeps inputs O(1)).
        fourier: also embed the scaled coordinates by this many fixed random Fourier features
            (sine and cosine of Gaussian projections, :data:`FOURIER_BANDWIDTH`), into ``φ``'s
            input and, on a learned scale and gain per head, straight into the kernel: ``ω``
            gains a term ``g_h² · mean cos(2π a_h w·(s_q − s_k))``, a distance kernel (about an
            RBF) beside the learned one, whose reach a smooth MLP of raw coordinates finds hard
            to make; 0 = neither.
    """

    freqs: torch.Tensor  # [P, fourier] frequencies of the Fourier features (a buffer)

    def __init__(self, dim: int, num_heads: int, *, pos_dim: int = 2, feature_dim: int = 32,
                 hidden: int = 128, pos_scale: float = 1.0, fourier: int = 0) -> None:
        """Build the module; the arguments are described in the class docstring."""
        super().__init__()
        self.num_heads = num_heads
        self.feature_dim = feature_dim
        self.pos_scale = pos_scale
        gen = torch.Generator().manual_seed(0)
        self.register_buffer("freqs", torch.randn(pos_dim, fourier, generator=gen) * FOURIER_BANDWIDTH)
        self.phi = MLP([dim + pos_dim + 2 * fourier, hidden, num_heads * feature_dim])
        self.psi = MLP([dim, hidden, dim])
        # the distance kernel: a gain per head and each head on its own scale (the first at the
        # Fourier features' own, the next ones halving it)
        self.gain = nn.Parameter(torch.ones(num_heads)) if fourier else None
        self.log_scale = nn.Parameter(-torch.arange(num_heads, dtype=torch.float32) * 0.7) if fourier else None
        self.norm = nn.LayerNorm(dim)
        self.to_out = nn.Linear(dim, dim)

    def _features(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        p = pos / self.pos_scale
        proj = 2 * torch.pi * p @ self.freqs.to(p.dtype)  # [B, N, F]
        parts = [x, p, torch.sin(proj), torch.cos(proj)] if self.freqs.shape[1] else [x, p]
        f = self.phi(torch.cat(parts, dim=-1))  # [B, N, H*R]
        f = f * self.feature_dim**-0.25  # so ω = φᵀφ has the scale of a dot product over √R
        f = split_heads(f, self.num_heads)  # [B, H, N, R]
        if self.gain is None or self.log_scale is None:
            return f
        proj = proj[:, None] * torch.exp(self.log_scale)[None, :, None, None].to(p.dtype)  # [B, H, N, F]
        rff = torch.cat([torch.sin(proj), torch.cos(proj)], dim=-1) * self.freqs.shape[1] ** -0.5
        rff = rff * self.gain[None, :, None, None].to(f.dtype)  # [B, H, N, 2F]; rffᵀrff = g² mean cos
        return torch.cat([f, rff], dim=-1)  # [B, H, N, R + 2F]

    def project(
        self, x_q: torch.Tensor, x_kv: torch.Tensor, where: AttentionGeometry
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Kernel features ``φ`` of (token, location) for queries and keys, ``ψ`` of the values."""
        psi_v = split_heads(self.psi(x_kv), self.num_heads)  # [B, H, Nk, D]
        return self._features(x_q, where.q_pos), self._features(x_kv, where.k_pos), psi_v

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, where: AttentionGeometry
    ) -> torch.Tensor:
        """Run :func:`deep_kernel_attention` on the features (no bias: ``cache`` unused)."""
        return deep_kernel_attention(q, k, v, key_valid=where.key_valid)

    def output(self, out: torch.Tensor) -> torch.Tensor:
        """Merge the heads, normalise (eq. 9's ``LN``) and project."""
        return self.to_out(self.norm(merge_heads(out)))
