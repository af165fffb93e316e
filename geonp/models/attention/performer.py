"""Performer (FAVOR+) attention, the first TNP-KR preprint (Jenson et al., v1) §3.2: positive orthogonal random features, linear in N.

``softmax(q·kᵀ/√D)`` is approximated by ``φ(q)·φ(k)ᵀ`` with
``φ(x) = exp(Wx - |x|²/2) / √m`` on ``x = q·D^{-1/4}``. Standard FAVOR+ cannot add a pairwise
logit bias, so this variant has none (the TNP-KR paper implies the same for TNP-KR: PERF).
"""

from __future__ import annotations

import math

import torch

from geonp.models.attention.base import (
    AttentionGeometry,
    ProjectedAttention,
    mask_keys,
    zero_keyless_rows,
)


def orthogonal_features(num_features: int, dim: int, *, generator: torch.Generator) -> torch.Tensor:
    """Random features ``[num_features, dim]``: orthogonal blocks with chi-distributed norms."""
    blocks = []
    for _ in range(math.ceil(num_features / dim)):
        g = torch.randn(dim, dim, generator=generator)
        qmat, _ = torch.linalg.qr(g)
        blocks.append(qmat.T)
    w = torch.cat(blocks)[:num_features]
    norms = torch.randn(num_features, dim, generator=generator).norm(dim=1)
    return w * norms[:, None]


def _positive_features(x: torch.Tensor, w: torch.Tensor, *, stabiliser: torch.Tensor) -> torch.Tensor:
    proj = x @ w.T  # [B, H, N, M]
    sq = (x * x).sum(-1, keepdim=True) / 2
    return torch.exp(proj - sq - stabiliser) / math.sqrt(w.shape[0])


def performer_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, features: torch.Tensor, *,
    key_valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """FAVOR+ attention in time and memory linear in the points.

    Args:
        q: queries ``[B, H, Nq, D]``.
        k: keys ``[B, H, Nk, D]``.
        v: values ``[B, H, Nk, Dv]``.
        features: random features ``[M, D]``.
        key_valid: ``[B, Nk]``, True where a key counts.

    Returns:
        ``[B, H, Nq, Dv]``; rows with no valid key are zero.
    """
    phi_q, phi_k = _feature_maps(q, k, features, key_valid)
    num = phi_q @ (phi_k.transpose(-1, -2) @ v)  # [B, H, Nq, Dv]
    den = phi_q @ phi_k.sum(-2)[..., None]  # [B, H, Nq, 1]
    return _normalise(num, den, key_valid)


def naive_performer_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, features: torch.Tensor, *,
    key_valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """:func:`performer_attention`'s slow twin: the ``[Nq, Nk]`` feature-kernel matrix, built explicitly."""
    phi_q, phi_k = _feature_maps(q, k, features, key_valid)
    a = phi_q @ phi_k.transpose(-1, -2)  # [B, H, Nq, Nk]
    return _normalise(a @ v, a.sum(-1, keepdim=True), key_valid)


def _feature_maps(q: torch.Tensor, k: torch.Tensor, features: torch.Tensor,
                  key_valid: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Positive random features of queries and keys (masked keys zeroed)."""
    scale = q.shape[-1] ** -0.25
    q, k = q * scale, k * scale
    # Stabilisers: a per-row max for queries and one global max for keys; both cancel in the ratio.
    q_stab = (q @ features.T).amax(-1, keepdim=True).detach()
    k_stab = (k @ features.T).amax(dim=(-1, -2), keepdim=True).detach()
    phi_q = _positive_features(q, features, stabiliser=q_stab)  # [B, H, Nq, M]
    phi_k = _positive_features(k, features, stabiliser=k_stab)  # [B, H, Nk, M]
    return phi_q, mask_keys(phi_k, key_valid)


def _normalise(num: torch.Tensor, den: torch.Tensor, key_valid: torch.Tensor | None) -> torch.Tensor:
    out = num / den.clamp_min(1e-6 * den.abs().amax().clamp_min(1e-30))
    return zero_keyless_rows(out, key_valid)


class PerformerAttention(ProjectedAttention):
    """Multi-head FAVOR+ attention; the random features are a fixed, saved buffer.

    Args:
        dim: model width ``E``.
        num_heads: heads ``H``.
        num_features: random features ``M``.
        seed: seed of the random features.
    """

    features: torch.Tensor  # a buffer (register_buffer), not a submodule

    def __init__(self, dim: int, num_heads: int, *, num_features: int = 64, seed: int = 0) -> None:
        """Build the module; the arguments are described in the class docstring."""
        super().__init__(dim, num_heads)
        gen = torch.Generator().manual_seed(seed)
        self.register_buffer("features", orthogonal_features(num_features, dim // num_heads, generator=gen))

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, where: AttentionGeometry
    ) -> torch.Tensor:
        """Run :func:`performer_attention` (no bias: positions unused)."""
        return performer_attention(q, k, v, self.features, key_valid=where.key_valid)
